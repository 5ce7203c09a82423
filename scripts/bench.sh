#!/usr/bin/env bash
# herald's benchmarks, herald beside its peers in the same run.
#
#   scripts/bench.sh compare idle   [herald-bench idle flags]    # default: --conns 15000 --chats 100 --runs 3
#   scripts/bench.sh compare fanout [herald-bench fanout flags]  # default: --watchers 1000 --runs 3
#   scripts/bench.sh install                                     # peers into ${HERALD_CACHE:-~/.cache/herald}/peers
#   scripts/bench.sh smoke                                       # every herald scenario, tiny (the test suite's)
#
# Env: PEERS (default herald,socketio,nats), HERALD_CACHE, JSON=1 (one JSON object on stdout,
# the table on stderr). Builds release binaries and copies them to a temp folder first, so a
# rebuild by someone else during the run cannot swap them. Everything runs on loopback; every
# server and client process is started and stopped by herald-bench, by pid.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
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
  cargo build --release -p herald -p herald-bench >&2
  BIN="$(mktemp -d -t herald-bench-bin-XXXXXX)"
  trap 'rm -rf "$BIN"' EXIT
  local target="${CARGO_TARGET_DIR:-$ROOT/target}"
  cp "$target/release/herald" "$target/release/herald-bench" "$BIN/"
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
  compare)
    scenario="${1:?usage: scripts/bench.sh compare idle|fanout [flags]}"
    shift
    case "$scenario" in
      idle) defaults=(--conns 15000 --chats 100 --runs 3) ;;
      fanout) defaults=(--watchers 1000 --runs 3) ;;
      *) echo "unknown scenario $scenario (idle, fanout)" >&2; exit 2 ;;
    esac
    [ "$#" -gt 0 ] && defaults=("$@")
    json=()
    [ "${JSON:-0}" = 1 ] && json=(--json)
    install_peers
    build
    HERALD_PEERS_DIR="$ROOT/bench/peers" "$BIN/herald-bench" compare --peers "$PEERS" "$scenario" "${defaults[@]}" "${json[@]}"
    ;;
  *)
    sed -n '2,11p' "$0" >&2
    exit 2
    ;;
esac
