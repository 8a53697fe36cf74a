#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what is needed, builds, runs every
# CTest test, then bounded fuzzing runs of the GGUF reader, the request parsing and the
# placement files.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
(cd "$root/build" && ctest --output-on-failure -j"$(nproc)" --timeout 1800)
"$root/scripts/fuzz-smoke.sh"
