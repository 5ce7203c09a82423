#!/usr/bin/env bash
# Installs Socket.IO v4 (pinned) into the herald cache by package name; nothing of it is committed.
# Usage: bench/peers/socketio/install.sh   (env: HERALD_CACHE)
set -euo pipefail
CACHE="${HERALD_CACHE:-$HOME/.cache/herald}/peers/socketio"
VERSION="${SOCKETIO_VERSION:-4.8.1}"
if [ -f "$CACHE/node_modules/socket.io/package.json" ] && grep -q "\"version\": \"$VERSION\"" "$CACHE/node_modules/socket.io/package.json"; then
  exit 0
fi
command -v node >/dev/null || { echo "Socket.IO needs Node 20 (node not found)" >&2; exit 1; }
mkdir -p "$CACHE"
cd "$CACHE"
[ -f package.json ] || echo '{"name":"herald-bench-socketio-peer","private":true}' > package.json
npm install --no-audit --no-fund --save-exact "socket.io@$VERSION" "socket.io-client@$VERSION" >&2
