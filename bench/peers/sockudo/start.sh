#!/usr/bin/env bash
# Starts Sockudo (Pusher protocol) on 127.0.0.1:PORT with one app (id bench, key bench-key,
# secret bench-secret), local adapter, no metrics listener, its connection rate limiter off
# (it refuses a benchmark's connects otherwise), per-app limits raised so that the app's
# defaults (100 connections, 100 client events/s) are not what is measured, and client
# events enabled (fan-out publishes as a client event on a private channel), and presence
# channels of any size (joinflood's members). exec: the pid is
# Sockudo's. Usage: bench/peers/sockudo/start.sh PORT
set -euo pipefail
PORT="${1:?usage: start.sh PORT}"
BIN="${HERALD_CACHE:-$HOME/.cache/herald}/peers/sockudo/bin/sockudo"
[ -x "$BIN" ] || { echo "Sockudo is not installed: run bench/peers/sockudo/install.sh" >&2; exit 1; }
export HOST=127.0.0.1 PORT="$PORT"
export METRICS_ENABLED=false RATE_LIMITER_ENABLED=false
export ADAPTER_DRIVER=local CACHE_DRIVER=memory QUEUE_DRIVER=none APP_MANAGER_DRIVER=memory
export SOCKUDO_DEFAULT_APP_ID=bench SOCKUDO_DEFAULT_APP_KEY=bench-key SOCKUDO_DEFAULT_APP_SECRET=bench-secret
export SOCKUDO_DEFAULT_APP_ENABLED=true SOCKUDO_DEFAULT_APP_ENABLE_CLIENT_MESSAGES=true
export SOCKUDO_DEFAULT_APP_MAX_CONNECTIONS=1000000
export SOCKUDO_DEFAULT_APP_MAX_CLIENT_EVENTS_PER_SECOND=1000000
export SOCKUDO_DEFAULT_APP_MAX_BACKEND_EVENTS_PER_SECOND=1000000
# joinflood joins a presence channel: its default of 100 members per channel would refuse the rest
export SOCKUDO_DEFAULT_APP_MAX_PRESENCE_MEMBERS_PER_CHANNEL=1000000
export RUST_LOG="${RUST_LOG:-warn}"
exec "$BIN"
