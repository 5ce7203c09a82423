#!/usr/bin/env bash
# Installs Sockudo (Rust, Pusher protocol) into the herald cache by crate name.
# Needs Debian's protobuf-compiler (protoc). Nothing of Sockudo's is committed.
# Usage: bench/peers/sockudo/install.sh   (env: HERALD_CACHE, SOCKUDO_VERSION, SOCKUDO_BUILD_TIMEOUT)
set -euo pipefail
CACHE="${HERALD_CACHE:-$HOME/.cache/herald}/peers/sockudo"
VERSION="${SOCKUDO_VERSION:-}"
TIMEOUT="${SOCKUDO_BUILD_TIMEOUT:-2400}"
if [ -x "$CACHE/bin/sockudo" ]; then echo "$CACHE/bin/sockudo"; exit 0; fi
command -v protoc >/dev/null || { echo "sockudo needs protoc: apt-get install protobuf-compiler" >&2; exit 1; }
mkdir -p "$CACHE"
args=(install sockudo --locked --no-default-features --features local,v2,nats,redis --root "$CACHE")
[ -n "$VERSION" ] && args+=(--version "$VERSION")
# its own target dir, so the shared workspace target is not locked for the length of this build
CARGO_TARGET_DIR="$CACHE/target" timeout "$TIMEOUT" nice -n 10 cargo "${args[@]}" >&2
rm -rf "$CACHE/target"
echo "$CACHE/bin/sockudo"
