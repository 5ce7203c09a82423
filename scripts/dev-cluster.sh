#!/usr/bin/env bash
# A local herald cell on one machine: a NATS cluster of three servers, one
# PostgreSQL cluster holding two shards, and N herald nodes, all on loopback.
# Ctrl-C (or SIGTERM) stops everything it started, by pid.
#
#   scripts/dev-cluster.sh 3
#
# Nodes listen on 127.0.0.1:8081.. ; ask any of them GET /v1/gateway?ws=... .
# State lives in $HERALD_DEV_CLUSTER_DIR (default: a fresh temp dir, removed at exit).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
n=${1:-3}
[[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] || { echo "usage: $0 NODES" >&2; exit 2; }
nats=$(command -v nats-server || echo /usr/sbin/nats-server)
[ -x "$nats" ] || { echo "nats-server not found: apt-get install nats-server" >&2; exit 1; }
cargo build -q --release -p herald
herald=$PWD/target/release/herald

keep=${HERALD_DEV_CLUSTER_DIR:+1}
dir=${HERALD_DEV_CLUSTER_DIR:-$(mktemp -d)}
mkdir -p "$dir"
pids=()
stopping=
stop() {
  stopping=1
  trap - INT TERM EXIT
  echo "stopping ${#pids[@]} processes"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  scripts/pg.sh stop "$dir/pg" || true
  [ -n "$keep" ] || rm -rf "$dir"
}
trap stop INT TERM EXIT

# NATS: client ports 4222-4224, routes 6222-6224.
routes=nats://127.0.0.1:6222,nats://127.0.0.1:6223,nats://127.0.0.1:6224
for i in 0 1 2; do
  "$nats" -a 127.0.0.1 -p $((4222 + i)) --cluster_name herald --cluster nats://127.0.0.1:$((6222 + i)) \
    --routes "$routes" >"$dir/nats-$i.log" 2>&1 &
  pids+=($!)
done
brokers=nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224

admin=$(scripts/pg.sh start "$dir/pg" 5433)
for db in herald_a herald_b; do
  psql -q "$admin" -c "CREATE DATABASE $db" 2>/dev/null || true
done
stores=${admin%/postgres}/herald_a,${admin%/postgres}/herald_b

export HERALD_JWT_SECRET=${HERALD_JWT_SECRET:-dev-cluster-secret-0123456789abcdef0123} HERALD_API_KEY=${HERALD_API_KEY:-dev-cluster-api-key-0123456789abcdef0123}
for i in $(seq 1 "$n"); do
  port=$((8080 + i))
  "$herald" serve --listen 127.0.0.1:$port --data "$dir/node-$i" --node "node-$i" \
    --broker "$brokers" --store "$stores" >"$dir/node-$i.log" 2>&1 &
  pids+=($!)
  echo "node-$i: http://127.0.0.1:$port  (log $dir/node-$i.log)"
done
echo "api key: $HERALD_API_KEY   jwt secret: $HERALD_JWT_SECRET"
echo "try: curl 'http://127.0.0.1:8081/v1/gateway?ws=acme'   Ctrl-C stops the cell"
wait -n "${pids[@]}" || true
[ -n "$stopping" ] || echo "a process of the cell exited; see the logs in $dir" >&2
