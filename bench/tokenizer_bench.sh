#!/usr/bin/env bash
# Tokenizer encode throughput, moengine vs the JavaScript reference (same text, same run).
# Usage: bench/tokenizer_bench.sh [MiB of text, default 4]   (needs scripts/setup-npm.sh)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
cmake -S "$root" -B "$build" -G Ninja >/dev/null
ninja -C "$build" tokenizer_bench >/dev/null
mkdir -p "$build/test-tmp"
MOENGINE_TEST_TMP="$build/test-tmp" "$build/tests/tokenizer/tokenizer_bench" "${1:-4}"
