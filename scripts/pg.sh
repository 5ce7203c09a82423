#!/usr/bin/env bash
# A throwaway PostgreSQL cluster on loopback, for tests and local clusters.
#
#   scripts/pg.sh start DIR PORT   # initdb DIR if empty, start on 127.0.0.1:PORT, print the admin URL
#   scripts/pg.sh start DIR PORT TLS_DIR   # the same with ssl on: TLS_DIR holds server.crt and server.key
#   scripts/pg.sh stop DIR         # fast shutdown
#
# Uses Debian's server binaries (/usr/lib/postgresql/*/bin). PostgreSQL refuses
# to run as root, so as root it runs them as the `postgres` user.
set -euo pipefail
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
  echo "pg.sh: PostgreSQL server binaries not found (apt-get install postgresql)" >&2; exit 1
fi
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
cmd=${1:?usage: pg.sh start DIR PORT [TLS_DIR] | stop DIR}
dir=${2:?missing DIR}
case $cmd in
  start)
    port=${3:?missing PORT}
    mkdir -p "$dir"
    # The postgres user must reach DIR: as root, let it through the (often private) parent.
    if [ "$(id -u)" -eq 0 ]; then chmod o+x "$(dirname "$dir")"; chown postgres "$dir"; chmod 700 "$dir"; fi
    if [ ! -f "$dir/PG_VERSION" ]; then
      as_pg "$bin/initdb" -D "$dir" -U herald --auth=trust -E UTF8 >/dev/null
    fi
    tls=""
    if [ -n "${4:-}" ]; then
      # PostgreSQL refuses a key that others can read, or that it does not own.
      install -m 600 "$4/server.key" "$dir/server.key"
      install -m 644 "$4/server.crt" "$dir/server.crt"
      if [ "$(id -u)" -eq 0 ]; then chown postgres "$dir/server.key" "$dir/server.crt"; fi
      tls="-c ssl=on -c ssl_cert_file=$dir/server.crt -c ssl_key_file=$dir/server.key"
    fi
    as_pg "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -w -t 30 \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=300 $tls" start >/dev/null
    echo "postgres://herald@127.0.0.1:$port/postgres"
    ;;
  stop)
    [ -f "$dir/postmaster.pid" ] && as_pg "$bin/pg_ctl" -D "$dir" -m fast -w -t 30 stop >/dev/null || true
    ;;
  *) echo "pg.sh: unknown command $cmd" >&2; exit 2 ;;
esac
