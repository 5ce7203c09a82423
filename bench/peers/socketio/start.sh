#!/usr/bin/env bash
# Starts the Socket.IO peer on 127.0.0.1:PORT (0 for any). exec: the pid is Node's.
# Usage: bench/peers/socketio/start.sh PORT
set -euo pipefail
CACHE="${HERALD_CACHE:-$HOME/.cache/herald}/peers/socketio"
[ -d "$CACHE/node_modules/socket.io" ] || { echo "Socket.IO is not installed: run bench/peers/socketio/install.sh" >&2; exit 1; }
export NODE_PATH="$CACHE/node_modules"
exec node "$(dirname "$0")/server.js" "${1:-0}"
