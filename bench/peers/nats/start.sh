#!/usr/bin/env bash
# Starts Debian's nats-server with only its WebSocket listener in use, on 127.0.0.1:PORT:
# raw pub/sub, no TLS, no auth, no JetStream (no storage). The client port is a free one
# chosen by nats-server (-1), on loopback; nothing connects to it. exec: the pid is nats-server's.
# Usage: bench/peers/nats/start.sh PORT
set -euo pipefail
PORT="${1:?usage: start.sh PORT}"
CACHE="${HERALD_CACHE:-$HOME/.cache/herald}/peers/nats"
mkdir -p "$CACHE"
CONF="$CACHE/ws-$PORT.conf"
cat > "$CONF" <<CONF
listen: "127.0.0.1:-1"
max_payload: 1048576
websocket {
  host: "127.0.0.1"
  port: $PORT
  no_tls: true
  compression: false
}
CONF
echo "listening on 127.0.0.1:$PORT"
exec nats-server -c "$CONF"
