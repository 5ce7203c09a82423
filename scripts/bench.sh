#!/usr/bin/env bash
# herald's benchmarks, herald beside its peers in the same run.
#
#   scripts/bench.sh compare idle   [herald-bench idle flags]    # default: --conns 15000 --chats 100 --runs 3
#   scripts/bench.sh compare fanout [herald-bench fanout flags]  # default: --watchers 1000 --runs 3
#   scripts/bench.sh compare joinflood [flags]                   # default: --runs 3 (ladder 500/s x2, 8 steps);
#                                                                # peers default to herald,socketio,sockudo
#   scripts/bench.sh compare churn [herald-bench churn flags]    # default: --rate 2000 --duration-s 10 --runs 3;
#                                                                # peers default to herald,socketio,sockudo
#   scripts/bench.sh install                                     # peers into ${HERALD_CACHE:-~/.cache/herald}/peers
#   scripts/bench.sh smoke                                       # every herald scenario, tiny (the test suite's)
#   scripts/bench.sh churn [herald-bench churn flags]            # default: --rate 1500 --duration-s 10 --runs 3
#   BROKER=1 scripts/bench.sh churn [flags]                      # the same, herald with --broker: this script
#                                                                # starts one nats-server and one PostgreSQL (pg.sh)
#   scripts/bench.sh churn --peer socketio [flags]               # Socket.IO's room join/leave churn (installed peer)
#   scripts/bench.sh cross [herald-bench fanout flags]           # cross-node fan-out: two herald nodes over NATS +
#                                                                # PostgreSQL beside two Socket.IO nodes over Redis
#                                                                # (@socket.io/redis-adapter); default --watchers 1000 --runs 3
#                                                                # SIO_ADAPTER=nats: Socket.IO over @mickl/socket.io-nats-adapter
#
# Env: PEERS (default herald,socketio,nats), HERALD_CACHE, BENCH_BIN (prebuilt binaries' folder), JSON=1 (one JSON object on stdout,
# the table on stderr). Builds release binaries and copies them to a temp folder first, so a
# rebuild by someone else during the run cannot swap them. Everything runs on loopback; every
# server and client process is started and stopped by herald-bench, by pid.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
PEERS_SET="${PEERS:-}"
PEERS="${PEERS:-herald,socketio,nats}"

install_peers() {
  local p
  for p in ${PEERS//,/ }; do
    [ "$p" = herald ] && continue
    echo "installing peer $p" >&2
    "$ROOT/bench/peers/$p/install.sh" >&2
  done
}

build() {
  # BENCH_BIN=DIR: use the herald and herald-bench already copied there (no build).
  if [ -n "${BENCH_BIN:-}" ]; then BIN="$BENCH_BIN"; return; fi
  cargo build --release -p herald -p herald-bench >&2
  BIN="$(mktemp -d -t herald-bench-bin-XXXXXX)"; BIN_TMP="$BIN"
  trap 'rm -rf "$BIN"' EXIT
  local target="${CARGO_TARGET_DIR:-$ROOT/target}"
  cp "$target/release/herald" "$target/release/herald-bench" "$BIN/"
}

# One nats-server and one PostgreSQL on loopback for a herald node with --broker;
# sets BROKER_FLAGS and stops both (by pid / pg_ctl) when the script exits.
start_broker_deps() {
  local nats dir port=${BENCH_NATS_PORT:-14222} pgport=${BENCH_PG_PORT:-15433}
  nats=$(command -v nats-server || echo /usr/sbin/nats-server)
  [ -x "$nats" ] || { echo "nats-server not found: apt-get install nats-server" >&2; exit 1; }
  DEPS_DIR="$(mktemp -d -t herald-bench-deps-XXXXXX)"
  "$nats" -a 127.0.0.1 -p "$port" >"$DEPS_DIR/nats.log" 2>&1 &
  NATS_PID=$!
  local admin
  admin=$("$ROOT/scripts/pg.sh" start "$DEPS_DIR/pg" "$pgport")
  psql -q "$admin" -c "CREATE DATABASE herald_bench" >/dev/null
  BROKER_FLAGS=(--server-arg=--broker=nats://127.0.0.1:$port --server-arg=--store=${admin%/postgres}/herald_bench)
  REDIS_PID=
  if [ "${WITH_REDIS:-0}" = 1 ]; then
    local rport=${BENCH_REDIS_PORT:-16379}
    redis-server --bind 127.0.0.1 --port "$rport" --save '' --appendonly no --dir "$DEPS_DIR" >"$DEPS_DIR/redis.log" 2>&1 &
    REDIS_PID=$!
    export HERALD_BENCH_REDIS="redis://127.0.0.1:$rport"
  fi
  trap 'kill "$NATS_PID" ${REDIS_PID:+"$REDIS_PID"} 2>/dev/null || true; wait "$NATS_PID" ${REDIS_PID:+"$REDIS_PID"} 2>/dev/null || true; "$ROOT/scripts/pg.sh" stop "$DEPS_DIR/pg" || true; rm -rf "$DEPS_DIR" "${BIN_TMP:-}"' EXIT
}

cmd="${1:-}"
shift || true
case "$cmd" in
  install)
    install_peers
    ;;
  smoke)
    build
    "$BIN/herald-bench" smoke "$@"
    ;;
  churn)
    defaults=(--rate 1500 --duration-s 10 --runs 3)
    [ "$#" -gt 0 ] && defaults=("$@")
    json=()
    [ "${JSON:-0}" = 1 ] && json=(--json)
    build
    BROKER_FLAGS=()
    [ "${BROKER:-0}" = 1 ] && start_broker_deps
    ulimit -n 20000 2>/dev/null || true
    HERALD_PEERS_DIR="$ROOT/bench/peers" "$BIN/herald-bench" churn "${defaults[@]}" "${BROKER_FLAGS[@]}" "${json[@]}"
    ;;
  cross)
    defaults=(--watchers 1000 --runs 3)
    [ "$#" -gt 0 ] && defaults=("$@")
    json=()
    [ "${JSON:-0}" = 1 ] && json=(--json)
    PEERS="${PEERS_CROSS:-herald,socketio}"
    install_peers
    build
    WITH_REDIS=1 start_broker_deps
    # SIO_ADAPTER=nats: the Socket.IO nodes use @mickl/socket.io-nats-adapter on the same nats-server.
    if [ "${SIO_ADAPTER:-redis}" = nats ]; then
      unset HERALD_BENCH_REDIS
      export HERALD_BENCH_SIO_NATS="nats://127.0.0.1:${BENCH_NATS_PORT:-14222}"
    fi
    ulimit -n 20000 2>/dev/null || true
    HERALD_PEERS_DIR="$ROOT/bench/peers" "$BIN/herald-bench" compare --peers "$PEERS" fanout --nodes 2 \
      "${defaults[@]}" "${BROKER_FLAGS[@]}" "${json[@]}"
    ;;
  compare)
    scenario="${1:?usage: scripts/bench.sh compare idle|fanout|joinflood|churn [flags]}"
    shift
    case "$scenario" in
      idle) defaults=(--conns 15000 --chats 100 --runs 3) ;;
      fanout) defaults=(--watchers 1000 --runs 3) ;;
      joinflood) defaults=(--runs 3); PEERS="${PEERS_SET:-herald,socketio,sockudo}" ;;
      churn) defaults=(--rate 2000 --duration-s 10 --runs 3); PEERS="${PEERS_SET:-herald,socketio,sockudo}" ;;
      *) echo "unknown scenario $scenario (idle, fanout, joinflood, churn)" >&2; exit 2 ;;
    esac
    [ "$#" -gt 0 ] && defaults=("$@")
    json=()
    [ "${JSON:-0}" = 1 ] && json=(--json)
    install_peers
    build
    # every joiner and churning socket holds a file: the process may hold up to 20,000
    ulimit -n 20000 2>/dev/null || true
    HERALD_PEERS_DIR="$ROOT/bench/peers" "$BIN/herald-bench" compare --peers "$PEERS" "$scenario" "${defaults[@]}" "${json[@]}"
    ;;
  *)
    sed -n '2,23p' "$0" >&2
    exit 2
    ;;
esac
