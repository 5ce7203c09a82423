#!/usr/bin/env bash
# Installs Socket.IO v4 (pinned) into the herald cache by package name; nothing of it is committed.
# Usage: bench/peers/socketio/install.sh   (env: HERALD_CACHE)
set -euo pipefail
CACHE="${HERALD_CACHE:-$HOME/.cache/herald}/peers/socketio"
VERSION="${SOCKETIO_VERSION:-4.8.1}"
if [ -f "$CACHE/node_modules/socket.io/package.json" ] && grep -q "\"version\": \"$VERSION\"" "$CACHE/node_modules/socket.io/package.json"; then
  SOCKETIO_OK=1
fi
command -v node >/dev/null || { echo "Socket.IO needs Node 20 (node not found)" >&2; exit 1; }
mkdir -p "$CACHE"
cd "$CACHE"
[ -f package.json ] || echo '{"name":"herald-bench-socketio-peer","private":true}' > package.json
[ -n "${SOCKETIO_OK:-}" ] || npm install --no-audit --no-fund --save-exact "socket.io@$VERSION" "socket.io-client@$VERSION" >&2
# The cross-node peer: two Socket.IO nodes over Redis (@socket.io/redis-adapter, node-redis client).
# Used when HERALD_BENCH_REDIS is set (see server.js); installed here by package name, pinned.
REDIS_ADAPTER_VERSION="${SOCKETIO_REDIS_ADAPTER_VERSION:-8.3.0}"
REDIS_CLIENT_VERSION="${SOCKETIO_REDIS_CLIENT_VERSION:-4.7.0}"
if ! grep -qs "\"version\": \"$REDIS_ADAPTER_VERSION\"" "$CACHE/node_modules/@socket.io/redis-adapter/package.json"; then
  npm install --no-audit --no-fund --save-exact "@socket.io/redis-adapter@$REDIS_ADAPTER_VERSION" "redis@$REDIS_CLIENT_VERSION" >&2
fi
# The other cross-node peer: Socket.IO nodes over NATS (@mickl/socket.io-nats-adapter, nats.js 2.x).
# Used when HERALD_BENCH_SIO_NATS is set (see server.js); installed here by package name, pinned.
NATS_ADAPTER_VERSION="${SOCKETIO_NATS_ADAPTER_VERSION:-}"
if [ ! -f "$CACHE/node_modules/@mickl/socket.io-nats-adapter/package.json" ]; then
  npm install --no-audit --no-fund --save-exact "@mickl/socket.io-nats-adapter${NATS_ADAPTER_VERSION:+@$NATS_ADAPTER_VERSION}" "nats@2" >&2 || \
    echo "could not install @mickl/socket.io-nats-adapter (only the NATS-adapter runs need it)" >&2
fi
