#!/usr/bin/env bash
# Runs Schemathesis (PyPI) against a running herald's own OpenAPI document:
# every route of GET /v1/openapi.json, with generated valid and invalid
# inputs, checking that nothing answers 5xx and that every answer (status,
# content type, body) is one the document describes.
#
#   scripts/schemathesis.sh http://127.0.0.1:PORT API_KEY
#
# Env: HERALD_CACHE (default ~/.cache/herald) holds the venv;
# SCHEMATHESIS_EXAMPLES (default 25) bounds the inputs per operation.
set -euo pipefail

VERSION=4.32.5
base=${1:?usage: scripts/schemathesis.sh http://127.0.0.1:PORT API_KEY}
key=${2:?usage: scripts/schemathesis.sh http://127.0.0.1:PORT API_KEY}
venv=${HERALD_CACHE:-$HOME/.cache/herald}/schemathesis-venv
py=$venv/bin/python

installed() { "$py" -c 'import importlib.metadata as m, sys; sys.exit(m.version("schemathesis") != sys.argv[1])' "$VERSION" 2>/dev/null; }
if ! installed; then
  echo "schemathesis: installing schemathesis==$VERSION into $venv" >&2
  if [ ! -x "$py" ] && ! python3 -m venv "$venv" >/dev/null 2>&1; then
    rm -rf "$venv"
    if [ "$(id -u)" -ne 0 ]; then
      echo "schemathesis: 'python3 -m venv' failed; install python3-venv" >&2; exit 1
    fi
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$venv"
  fi
  "$py" -m pip install -q --disable-pip-version-check "schemathesis==$VERSION"
fi

# POST /v1/admin/drain is run like every other route, not excluded: it is safe here, since a drain only
# takes the node out of routing and refuses later WebSockets, while the HTTP API, all Schemathesis uses,
# keeps answering (GET /v1/admin/status then says "draining": true, as documented).
exec timeout "${SCHEMATHESIS_TIMEOUT:-600}" "$venv/bin/schemathesis" run "$base/v1/openapi.json" \
  --url "$base" \
  --header "Authorization: Bearer $key" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
  --max-examples "${SCHEMATHESIS_EXAMPLES:-25}" \
  --seed 1 \
  --no-color
