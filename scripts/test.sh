#!/usr/bin/env bash
# Runs every test of herald: what a newcomer runs, and exactly what CI runs.
#
#   scripts/test.sh
#
# Needs the Rust toolchain, Go, python3 and Node 20 (present on our Debian
# machines). Everything else it needs it installs itself, once: Debian
# packages through apt-get when run as root, npm packages into sdk/ts,
# the Autobahn runner (kosoku, from PyPI) and the S3-compatible server
# (versitygw, built from the Go module proxy) into ~/.cache/herald.
# Servers it starts listen on free loopback ports and are stopped by pid.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

started=$SECONDS
# Each step's line says the time so far and the disk left: a CI machine's disk is finite.
step() {
  printf '\n== [%dm%02ds, %s free] %s\n' $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60)) \
    "$(df -h --output=avail . 2>/dev/null | tail -1 | tr -d ' ')" "$*"
}
# One build of each test binary, no incremental caches: CI builds once from a clean clone, and
# target/debug/incremental alone was about 10 GB of a full run. Set CARGO_INCREMENTAL=1 to keep them.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
pids=()
pg_dirs=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for d in "${pg_dirs[@]}"; do scripts/pg.sh stop "$d" || true; rm -rf "$(dirname "$d")"; done
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { # url: poll until it answers 200, at most 20 s
  for _ in $(seq 200); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "no answer from $1" >&2; return 1
}

step "system packages"
need=()
command -v curl >/dev/null || need+=(curl)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v nats-server >/dev/null || [ -x /usr/sbin/nats-server ] || need+=(nats-server)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx)
# tests/deploy.rs: certificates, and `systemd-analyze verify` of deploy/herald.service.
command -v openssl >/dev/null || need+=(openssl)
command -v systemd-analyze >/dev/null || need+=(systemd)
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v prometheus >/dev/null || need+=(prometheus)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "missing: ${need[*]} (run as root, or install them)" >&2; exit 1
  fi
fi
echo "ok"

step "S3-compatible server for the files tests (versitygw: built once, about 2.5 to 4 min on 2 cores)"
scripts/s3.sh install
echo "ok"

step "format and lints"
if cargo fmt --version >/dev/null 2>&1; then cargo fmt --all -- --check; else echo "rustfmt not installed: skipped"; fi
if cargo clippy --version >/dev/null 2>&1; then cargo clippy -q --workspace --all-targets -- -D warnings; else echo "clippy not installed: skipped"; fi

step "build"
cargo build -q --release --workspace
herald=$root/target/release/herald

step "rust tests on the embedded store (unit, protocol, HTTP, lifecycle), and the tiers that need PostgreSQL, NATS and nginx"
# Those tiers are #[ignore]d so that a bare `cargo test` needs only the Rust toolchain; here they all run.
cargo test -q --workspace -- --include-ignored

step "the core server's integration tests again, on two PostgreSQL shards"
# --workspace, as above, not -p herald: with the same packages selected the dependencies' features unify
# the same way, so these are the binaries already built; -p herald alone rebuilt every one of them.
pg_dir=$(mktemp -d)/pg
pg_dirs+=("$pg_dir")
pg_url=$(scripts/pg.sh start "$pg_dir" "$(free_port)")
HERALD_TEST_STORE=postgres HERALD_TEST_PG_URL=$pg_url cargo test -q --workspace --test protocol --test auth --test http_api --test lifecycle --test admin --test messages --test moderation --test inbox --test presence --test send_hook --test revoke --test webhook --test conversations --test streams --test files --test export --test search

step "the HTTP API against its own OpenAPI document (Schemathesis: no 5xx, every answer as documented)"
port=$(free_port)
data=$(mktemp -d)
st_key=schemathesis-api-key-0123456789abcdef0123
HERALD_JWT_SECRET=schemathesis-secret-0123456789abcdef01 HERALD_API_KEY=$st_key "$herald" serve \
  --listen "127.0.0.1:$port" --data "$data" >"$data/herald.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$port/healthz"
scripts/schemathesis.sh "http://127.0.0.1:$port" "$st_key"
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true; rm -rf "$data"


step "autobahn conformance (WebSocket layer, through --diag-echo)"
port=$(free_port)
data=$(mktemp -d)
HERALD_JWT_SECRET=autobahn-secret-0123456789abcdef0123 HERALD_API_KEY=autobahn-api-key-0123456789abcdef0123 "$herald" serve --listen "127.0.0.1:$port" --data "$data" --diag-echo \
  >"$data/herald.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$port/healthz"
scripts/autobahn.sh "ws://127.0.0.1:$port/diag/echo"
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true; rm -rf "$data"

step "herald-bench smoke run (each scenario, tiny)"
target/release/herald-bench smoke

step "herald-bench cell smoke (2 nodes, 3 NATS servers, a PostgreSQL shard, 200 users: exact delivery)"
target/release/herald-bench cell --smoke

step "herald-bench cell, the bad day's smoke (3 nodes, 300 users, each node drained and restarted in turn: every user resumed, exact delivery)"
target/release/herald-bench cell --smoke-bad-day

if [ -f sdk/ts/package.json ]; then
  step "TypeScript SDK"
  (cd sdk/ts && npm install --no-audit --no-fund --loglevel=error && npm run -s typecheck && npm test --silent && npm run -s build)
  (cd sdk/ts && HERALD_BIN=$herald npm run -s test:integration)
fi

step "demo page: bundle up to date, and two browsers chatting in Chromium"
(cd web && npm install --no-audit --no-fund --loglevel=error && npm run -s check-dist && HERALD_BIN=$herald npm test)

step "the SDK as a package: npm pack, installed from the tarball into a fresh project, chatting from Node and from a browser bundle"
(cd sdk/ts && HERALD_BIN=$herald npm run -s test:pack)

step "all tests passed"
