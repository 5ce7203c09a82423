#!/usr/bin/env bash
# A throwaway S3-compatible server on loopback, for tests, benchmarks and local
# clusters: the Versity S3 Gateway (versitygw, Apache-2.0) serving a plain
# folder. It checks presigned V4 signatures as a bucket would (signed headers,
# expiry), answers response-content-* overrides and keeps bucket CORS rules.
#
#   scripts/s3.sh install             # build versitygw into the cache, once (about 2.5 min on 2 cores)
#   scripts/s3.sh bin                 # print the binary's path, installing it first if missing
#   scripts/s3.sh start DIR [PORT]    # serve DIR/data on 127.0.0.1:PORT (a free port if not given), create
#                                     # the bucket, print its --files-s3 URL; the pid goes to DIR/versitygw.pid
#   scripts/s3.sh stop DIR            # stop it by that pid
#
# The build comes from the Go module proxy (`go install`, about 340 MB of
# modules into Go's module cache) into ${HERALD_S3_CACHE:-~/.cache/herald}.
# S3_ACCESS_KEY, S3_SECRET_KEY and S3_BUCKET override the test credentials
# and the bucket's name; S3_CORS_ORIGINS (comma-separated) sets the bucket
# CORS rule that lets browsers of those origins upload and fetch.
set -euo pipefail
version=v1.8.0
cache=${HERALD_S3_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/herald}/versitygw-$version
bin=$cache/versitygw
access=${S3_ACCESS_KEY:-herald-test}
secret=${S3_SECRET_KEY:-herald-test-secret-0123456789}
bucket=${S3_BUCKET:-herald}

install() {
  [ -x "$bin" ] && return 0
  command -v go >/dev/null || { echo "s3.sh: the Go toolchain is needed to build versitygw" >&2; exit 1; }
  mkdir -p "$cache"
  # One build at a time: tests starting servers in parallel wait for the first.
  exec 9>"$cache.lock"
  flock 9
  if [ ! -x "$bin" ]; then
    local tmp
    tmp=$(mktemp -d "$cache/build.XXXXXX")
    echo "s3.sh: building versitygw $version (once; about 2.5 min on 2 cores)" >&2
    if ! GOBIN=$tmp GOFLAGS=-trimpath go install "github.com/versity/versitygw/cmd/versitygw@$version" \
      >"$tmp/build.log" 2>&1; then
      cat "$tmp/build.log" >&2; exit 1
    fi
    mv "$tmp/versitygw" "$bin"
    rm -rf "$tmp"
  fi
  flock -u 9
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

cmd=${1:?usage: s3.sh install | bin | start DIR [PORT] | stop DIR}
case $cmd in
  install) install ;;
  bin) install; echo "$bin" ;;
  start)
    dir=${2:?missing DIR}
    port=${3:-$(free_port)}
    install
    mkdir -p "$dir/data"
    # Its own stdout and stderr go to the log, so a caller reading ours is not held open.
    "$bin" --access "$access" --secret "$secret" --port "127.0.0.1:$port" --quiet \
      posix "$dir/data" </dev/null >>"$dir/versitygw.log" 2>&1 &
    echo $! >"$dir/versitygw.pid"
    # A start that fails from here on stops what it started.
    trap '[ $? -eq 0 ] || "$0" stop "$dir"' EXIT
    up=""
    for _ in $(seq 100); do
      if curl -s -o /dev/null "http://127.0.0.1:$port/"; then up=1; break; fi
      kill -0 "$(cat "$dir/versitygw.pid")" 2>/dev/null || break
      sleep 0.1
    done
    if [ -z "$up" ]; then
      echo "s3.sh: versitygw did not answer on 127.0.0.1:$port; its log:" >&2
      tail -n 20 "$dir/versitygw.log" >&2
      exit 1
    fi
    # CreateBucket, signed in headers by curl; 409 when DIR already held it.
    empty=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
    code=$(curl -s -o "$dir/create-bucket.out" -w '%{http_code}' -X PUT --aws-sigv4 aws:amz:us-east-1:s3 \
      --user "$access:$secret" -H "x-amz-content-sha256: $empty" "http://127.0.0.1:$port/$bucket")
    case $code in
      200 | 409) ;;
      *) echo "s3.sh: creating bucket $bucket answered $code: $(cat "$dir/create-bucket.out")" >&2; exit 1 ;;
    esac
    # S3_CORS_ORIGINS=a,b: the bucket CORS rule browsers need to upload and fetch from those origins
    # (docs/operations.md gives the same rule for a real bucket).
    if [ -n "${S3_CORS_ORIGINS:-}" ]; then
      xml="<CORSConfiguration><CORSRule>"
      for o in ${S3_CORS_ORIGINS//,/ }; do xml+="<AllowedOrigin>$o</AllowedOrigin>"; done
      xml+="<AllowedMethod>PUT</AllowedMethod><AllowedMethod>GET</AllowedMethod>"
      xml+="<AllowedHeader>Content-Type</AllowedHeader><MaxAgeSeconds>3600</MaxAgeSeconds></CORSRule></CORSConfiguration>"
      md5=$(printf %s "$xml" | python3 -c 'import base64,hashlib,sys; print(base64.b64encode(hashlib.md5(sys.stdin.buffer.read()).digest()).decode())')
      sha=$(printf %s "$xml" | sha256sum | cut -d' ' -f1)
      code=$(curl -s -o "$dir/put-cors.out" -w '%{http_code}' -X PUT --aws-sigv4 aws:amz:us-east-1:s3 \
        --user "$access:$secret" -H "Content-MD5: $md5" -H "x-amz-content-sha256: $sha" --data-binary "$xml" \
        "http://127.0.0.1:$port/$bucket?cors=")
      [ "$code" = 200 ] || { echo "s3.sh: setting the bucket's CORS rule answered $code: $(cat "$dir/put-cors.out")" >&2; exit 1; }
    fi
    echo "http://$access:$secret@127.0.0.1:$port/$bucket"
    ;;
  stop)
    dir=${2:?missing DIR}
    pidfile=$dir/versitygw.pid
    [ -f "$pidfile" ] || exit 0
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
    ;;
  *) echo "s3.sh: unknown command $cmd" >&2; exit 2 ;;
esac
