#!/usr/bin/env bash
# A throwaway PostgreSQL cluster on loopback, for tests and local clusters.
#
#   scripts/pg.sh start DIR PORT   # initdb DIR if empty, start on 127.0.0.1:PORT, print the admin URL
#   scripts/pg.sh start DIR PORT TLS_DIR   # the same with ssl on: TLS_DIR holds server.crt and server.key
#   scripts/pg.sh stop DIR         # fast shutdown
#
# Streaming replication (a primary started by `start`, a standby made from it):
#
#   scripts/pg.sh standby DIR PORT PRIMARY_PORT NAME  # wipe DIR, base backup of 127.0.0.1:PRIMARY_PORT,
#                                                     # start it as a standby named NAME on PORT, print its URL
#   scripts/pg.sh sync DIR NAMES   # synchronous_standby_names of the running primary in DIR ('' = off)
#   scripts/pg.sh promote DIR      # the standby in DIR becomes a primary (waits until it takes writes)
#
# Uses Debian's server binaries (/usr/lib/postgresql/*/bin). PostgreSQL refuses
# to run as root, so as root it runs them as the `postgres` user.
set -euo pipefail
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
  echo "pg.sh: PostgreSQL server binaries not found (apt-get install postgresql)" >&2; exit 1
fi
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
cmd=${1:?usage: pg.sh start DIR PORT [TLS_DIR] | stop DIR | standby DIR PORT PRIMARY_PORT NAME | sync DIR NAMES | promote DIR}
dir=${2:?missing DIR}

# The pids of the live processes of the server in DIR: every PostgreSQL
# process works in its data directory, so this finds a SIGKILLed postmaster's
# lingering children too (they are no longer its children). Zombies have no
# working directory and are left out.
pids_in() {
  local real p
  real=$(realpath -m "$1")
  for p in /proc/[0-9]*; do
    if [ "$(readlink "$p/cwd" 2>/dev/null)" = "$real" ]; then echo "${p#/proc/}"; fi
  done
}

# Waits until no process works in DIR (a killed server's children exit a
# moment after it); fails after 10 s.
wait_gone() {
  local i
  for i in $(seq 100); do
    [ -z "$(pids_in "$1")" ] && return 0
    sleep 0.1
  done
  echo "pg.sh: processes still run in $1: $(pids_in "$1" | tr '\n' ' ')" >&2; return 1
}

# Before a start in a DIR whose server was killed: once none of its processes
# is left, its postmaster.pid and socket lock files are stale. PostgreSQL
# removes them itself only when their pid is gone, and an unreaped zombie
# postmaster still answers kill(pid, 0).
clear_stale() {
  [ -f "$1/postmaster.pid" ] || return 0
  if [ -n "$(pids_in "$1")" ]; then
    # A live server: leave it to pg_ctl, which says so. A killed one's children: wait.
    local pm; pm=$(head -n 1 "$1/postmaster.pid" 2>/dev/null || true)
    if [ -n "$pm" ] && [ -d "/proc/$pm" ] && [ "$(awk '{print $3}' "/proc/$pm/stat" 2>/dev/null)" != Z ]; then
      return 0
    fi
    wait_gone "$1"
  fi
  rm -f "$1/postmaster.pid" "$1"/.s.PGSQL.*.lock
}

# Options of every server: loopback only, its own socket directory, room for
# the tests' connections; a standby retries a lost primary after 200 ms, not
# the default 5 s (which also delays a promotion), and notices a dead or
# silent primary within seconds.
server_opts() {
  echo "-p $1 -k $2 -c listen_addresses=127.0.0.1 -c max_connections=400" \
    "-c wal_retrieve_retry_interval=200ms -c wal_receiver_status_interval=1s" \
    "-c wal_receiver_timeout=5s -c wal_sender_timeout=5s"
}

# The port of the running server in DIR (line 4 of postmaster.pid).
port_of() { sed -n 4p "$1/postmaster.pid"; }

# Runs SQL on the running server in DIR through its socket.
sql_in() { "$bin/psql" -h "$1" -p "$(port_of "$1")" -U herald -d postgres -X -q -v ON_ERROR_STOP=1 -c "$2" >/dev/null; }

# The postgres user must reach DIR: as root, let it through the (often private) parent.
own_dir() {
  mkdir -p "$1"
  if [ "$(id -u)" -eq 0 ]; then chmod o+x "$(dirname "$1")"; chown postgres "$1"; chmod 700 "$1"; fi
}

case $cmd in
  start)
    port=${3:?missing PORT}
    own_dir "$dir"
    if [ ! -f "$dir/PG_VERSION" ]; then
      as_pg "$bin/initdb" -D "$dir" -U herald --auth=trust -E UTF8 >/dev/null
    fi
    clear_stale "$dir"
    tls=""
    if [ -n "${4:-}" ]; then
      # PostgreSQL refuses a key that others can read, or that it does not own.
      install -m 600 "$4/server.key" "$dir/server.key"
      install -m 644 "$4/server.crt" "$dir/server.crt"
      if [ "$(id -u)" -eq 0 ]; then chown postgres "$dir/server.key" "$dir/server.crt"; fi
      tls="-c ssl=on -c ssl_cert_file=$dir/server.crt -c ssl_key_file=$dir/server.key"
    fi
    as_pg "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -w -t 30 \
      -o "$(server_opts "$port" "$dir") $tls" start >/dev/null
    echo "postgres://herald@127.0.0.1:$port/postgres"
    ;;
  stop)
    [ -f "$dir/postmaster.pid" ] && as_pg "$bin/pg_ctl" -D "$dir" -m fast -w -t 30 stop >/dev/null || true
    ;;
  standby)
    port=${3:?missing PORT}
    primary=${4:?missing PRIMARY_PORT}
    name=${5:?missing NAME}
    # Whatever ran here (an old primary, killed) must be gone before its files go.
    wait_gone "$dir"
    rm -rf "$dir"
    own_dir "$dir"
    # A fast checkpoint: the default spread one can take minutes. -R writes
    # primary_conninfo (with application_name, the name a primary's
    # synchronous_standby_names lists) and standby.signal.
    as_pg "$bin/pg_basebackup" -D "$dir" -R --checkpoint=fast -X stream \
      -d "host=127.0.0.1 port=$primary user=herald application_name=$name" >/dev/null
    # The copy carries the primary's synchronous_standby_names: promoted, it
    # would wait for a standby named after itself and every commit would hang.
    rm -f "$dir"/.s.PGSQL.*
    sed -i '/^synchronous_standby_names[[:space:]]*=/d' "$dir/postgresql.auto.conf"
    rm -f "$dir/server.log"
    as_pg "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -w -t 30 -o "$(server_opts "$port" "$dir")" start >/dev/null
    echo "postgres://herald@127.0.0.1:$port/postgres"
    ;;
  sync)
    names=${3?missing NAMES}
    if [ -z "$names" ]; then
      sql_in "$dir" "ALTER SYSTEM RESET synchronous_standby_names"
    else
      sql_in "$dir" "ALTER SYSTEM SET synchronous_standby_names = '${names//\'/\'\'}'"
    fi
    sql_in "$dir" "SELECT pg_reload_conf()"
    ;;
  promote)
    as_pg "$bin/pg_ctl" -D "$dir" -w -t 30 promote >/dev/null
    ;;
  *) echo "pg.sh: unknown command $cmd" >&2; exit 2 ;;
esac
