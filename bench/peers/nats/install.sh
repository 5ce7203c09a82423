#!/usr/bin/env bash
# nats-server comes from Debian (apt-get install nats-server); nothing to fetch into the cache.
set -euo pipefail
command -v nats-server >/dev/null && exit 0
echo "nats-server not found: apt-get install nats-server" >&2
exit 1
