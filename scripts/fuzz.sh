#!/usr/bin/env bash
# A short fuzzing run of every cargo-fuzz target in fuzz/ (its own crate, not
# a workspace member): builds them, then runs each for SECONDS (default 20)
# from its committed corpus, one process at a time.
#
#   scripts/fuzz.sh [SECONDS]
#
# Targets: `request` (herald_protocol::request::parse_frame), `connection`
# (a real in-process node's frame handling, through FrameHarness) and
# `websocket` (the WebSocket layer reading a client's bytes cut anywhere). Each
# asserts protocol properties, not only the absence of panics; see their doc
# comments. The committed corpus (fuzz/corpus/<target>) is only read: what a
# run finds goes to a scratch folder, so the tree stays clean. A crash stops
# its target, leaves the input in fuzz/artifacts/<target>/ and makes this
# script exit non-zero after the other targets ran. Replay one input with
#   fuzz/target/x86_64-unknown-linux-gnu/release/<target> <file>
# (HERALD_FUZZ_TRACE=1 prints a connection's frames).
#
# Longer runs, which do grow the corpus:
#   cargo +nightly fuzz run -s none -a <target> -- -max_total_time=600
# then `cargo +nightly fuzz cmin -s none -a <target>` before committing it.
#
# Needs the nightly toolchain; installs cargo-fuzz.
set -euo pipefail

seconds=${1:-20}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "fuzz: installing the nightly toolchain" >&2
  rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz" >&2
  cargo install cargo-fuzz --locked
fi

# No sanitizer: the code under test is safe Rust, and without ASan it runs
# about twice as many inputs. Debug assertions on, so arithmetic overflow panics.
flags=(--sanitizer none --debug-assertions)
cargo +nightly fuzz build "${flags[@]}"

targets=(request connection websocket)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/herald-fuzz-run.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
failed=()
for t in "${targets[@]}"; do
  mkdir -p "$scratch/$t" "fuzz/artifacts/$t" "fuzz/corpus/$t"
  args=(-max_total_time="$seconds" -timeout=25 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$root/fuzz/artifacts/$t/")
  [ -f "fuzz/dict/$t.dict" ] && args+=(-dict="fuzz/dict/$t.dict")
  echo "fuzz: $t for ${seconds}s" >&2
  log=$scratch/$t.log
  if cargo +nightly fuzz run "${flags[@]}" "$t" "$scratch/$t" "fuzz/corpus/$t" -- "${args[@]}" >"$log" 2>&1; then
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "fuzz: $t ok (${execs:-?} inputs)" >&2
  else
    failed+=("$t")
    echo "fuzz: $t FAILED; the end of its log:" >&2
    grep -v '^\s*$' "$log" | tail -n 60 >&2
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
  exit 1
fi
echo "fuzz: all targets ok" >&2
