#!/usr/bin/env bash
# Autobahn WebSocket conformance run against an echo endpoint, driven by kosoku
# (a Rust runner of the Autobahn TestSuite case files, from PyPI).
#
#   scripts/autobahn.sh ws://127.0.0.1:PORT/diag/echo
#
# Runs every fuzzing-client case except 12.* and 13.* (permessage-deflate, which
# herald does not negotiate), writes the Autobahn-format report to
# target/autobahn/ (index.json, index.html, one .json/.html per case), prints a
# count per outcome and the failing cases. Exits non-zero if any case did not
# pass or if no case ran. A case passes, as kosoku defines it, when its
# behavior is OK, NON-STRICT or INFORMATIONAL and its behaviorClose is OK or
# INFORMATIONAL; FAILED, UNIMPLEMENTED and ERROR (could not run) all fail.
#
# Env: HERALD_CACHE (default ~/.cache/herald) holds the kosoku venv;
#      AUTOBAHN_TIMEOUT (seconds, default 1200) bounds the whole run.
set -euo pipefail

KOSOKU_VERSION=0.1.0
url=${1:?usage: scripts/autobahn.sh ws://127.0.0.1:PORT/diag/echo}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$root/target/autobahn
venv=${HERALD_CACHE:-$HOME/.cache/herald}/autobahn-venv
py=$venv/bin/python

installed() { "$py" -c 'import importlib.metadata as m, sys; sys.exit(m.version("kosoku") != sys.argv[1])' "$KOSOKU_VERSION" 2>/dev/null; }

# 1. A venv with the pinned kosoku, made once and reused.
if ! installed; then
  echo "autobahn: installing kosoku==$KOSOKU_VERSION into $venv" >&2
  if [ ! -x "$py" ] && ! python3 -m venv "$venv" >/dev/null 2>&1; then
    rm -rf "$venv" # a failed venv is left half made (no pip)
    if [ "$(id -u)" -ne 0 ]; then
      echo "autobahn: 'python3 -m venv' failed; install python3-venv" >&2; exit 1
    fi
    # Debian ships venv/ensurepip separately.
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$venv"
  fi
  "$py" -m pip install -q --disable-pip-version-check "kosoku==$KOSOKU_VERSION"
fi

# 2. The run. kosoku exits 1 when a case fails; the report is written either way.
rm -rf "$out" && mkdir -p "$out"
start=$SECONDS rc=0
timeout "${AUTOBAHN_TIMEOUT:-1200}" "$venv/bin/kosoku" -x '12.*' -x '13.*' -o "$out" "$url" \
  >"$out/kosoku.log" 2>&1 || rc=$?
echo "autobahn: kosoku $KOSOKU_VERSION against $url: $((SECONDS - start))s, exit $rc, report $out/index.html"
if [ ! -s "$out/index.json" ]; then
  cat "$out/kosoku.log" >&2; echo "autobahn: no case ran (kosoku exit $rc)" >&2; exit 1
fi

# 3. Summary from index.json: {agent: {case id: {behavior, behaviorClose, reportfile, ...}}}.
"$py" - "$out" "$rc" <<'EOF'
import collections, json, os, sys
out, rc = sys.argv[1], int(sys.argv[2])
index = json.load(open(os.path.join(out, "index.json")))
cases = [(cid, c) for agent in index.values() for cid, c in agent.items()]
key = lambda cid: [int(p) for p in cid.split(".")]
for field in ("behavior", "behaviorClose"):
    for outcome, n in collections.Counter(c[field] for _, c in cases).most_common():
        print(f"{field} {outcome}: {n}")
bad = sorted(((cid, c) for cid, c in cases
              if c["behavior"] not in ("OK", "NON-STRICT", "INFORMATIONAL")
              or c["behaviorClose"] not in ("OK", "INFORMATIONAL")), key=lambda x: key(x[0]))
print(f"cases: {len(cases)} run, {len(cases) - len(bad)} passed, {len(bad)} failed")
if bad:
    print("failed case ids:", " ".join(cid for cid, _ in bad))
for cid, c in bad[:30]:  # the reasons, for the first few
    why = json.load(open(os.path.join(out, c["reportfile"])))
    print(f"FAILED {cid}: behavior={c['behavior']} behaviorClose={c['behaviorClose']}"
          f" ({why['result']} / {why['resultClose']})")
if len(bad) > 30:
    print(f"... and {len(bad) - 30} more: see index.html")
if rc and not bad:
    print(open(os.path.join(out, "kosoku.log")).read(), file=sys.stderr)
sys.exit(1 if bad or rc or not cases else 0)
EOF
