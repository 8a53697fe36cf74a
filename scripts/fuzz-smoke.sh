#!/usr/bin/env bash
# Builds the fuzzers with clang (libFuzzer, ASan, UBSan) into build-fuzz and runs each for a
# bounded time on a scratch copy of its committed seeds (fuzz/corpus/NAME): gguf (the GGUF
# reader), safetensors (the safetensors reader), protocol (the OpenAI request parsing),
# placement (load traces and placement files), kv_wire (the KV transfer wire format) and
# kv_events (the KV-events payloads and snapshots).
# Exits non-zero when a fuzzer finds a crash, a sanitizer report, a leak, a timeout or an
# out-of-memory; the input that did it is left in build-fuzz/NAME-fuzz-run/findings/
# (replay: build-fuzz/fuzz/NAME_fuzz FILE).
#
#   FUZZ_SECONDS (default 30)  how long to fuzz each target
#   JOBS (default 2)           build parallelism
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build-fuzz"
seconds=${FUZZ_SECONDS:-30}

# MOENGINE_SANITIZE puts ASan/UBSan on every library and -fsanitize=fuzzer-no-link gives them
# coverage: without both, the fuzzer would be blind to the parser it is meant to explore and
# ASan would not check the parser's own loads.
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOENGINE_FUZZ=ON -DMOENGINE_SANITIZE=ON \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link" >/dev/null
ninja -C "$build" -j "${JOBS:-2}" gguf_fuzz safetensors_fuzz protocol_fuzz placement_fuzz kv_wire_fuzz kv_events_fuzz

# UBSan only prints by default; a report must fail the run like an ASan one does.
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
failed=0
for name in gguf safetensors protocol placement kv_wire kv_events; do
  work="$build/$name-fuzz-run"
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/findings"
  cp "$root"/fuzz/corpus/$name/* "$work/corpus/"
  start=$(date +%s)
  status=0
  "$build/fuzz/${name}_fuzz" "$work/corpus" -max_total_time="$seconds" -rss_limit_mb=2048 \
    -timeout=10 -print_funcs=0 -print_final_stats=1 -artifact_prefix="$work/findings/" || status=$?
  echo "fuzz-smoke: ${name}_fuzz ran $(( $(date +%s) - start )) s, exit status $status"
  if [ "$status" -ne 0 ] || [ -n "$(ls -A "$work/findings")" ]; then
    echo "fuzz-smoke: ${name}_fuzz FAILED; reproducers in $work/findings/" >&2
    failed=1
  fi
done
exit "$failed"
