#!/usr/bin/env bash
# scripts/llamacpp.sh — llama.cpp as a peer for speed and correctness comparisons.
#
# Installs llama.cpp's sources from the npm package node-llama-cpp (pinned; it ships the
# whole llama.cpp tree as a git bundle, llama/gitRelease.bundle), builds the CPU tools we
# need with CMake, and builds our own tools/llamacpp/dump_logits.cpp against libllama.
# Everything lives in .cache/llamacpp/ (git-ignored); no llama.cpp code enters our repo.
# See docs/llamacpp-peer.md.
#
# usage: scripts/llamacpp.sh [build]          install + build (idempotent), print paths
#        scripts/llamacpp.sh paths            print paths of an existing build (no build)
#        scripts/llamacpp.sh gen-models DIR [ARCH_REGEX]
#                                             build, then write llama.cpp's own tiny random
#                                             test models (tests/test-llama-archs -o DIR),
#                                             e.g. ARCH_REGEX='^(deepseek2|qwen3moe)$'
#        scripts/llamacpp.sh clean            remove .cache/llamacpp
#
# stdout: KEY=VALUE lines only (usable with eval "$(scripts/llamacpp.sh)"); progress on stderr.
# env:   LLAMACPP_JOBS (default 2), LLAMACPP_CACHE (default <repo>/.cache/llamacpp),
#        LLAMACPP_NPM_VERSION (default pinned below; another version skips the hash checks),
#        LLAMACPP_NO_TESTS=1 (do not build test-llama-archs),
#        LLAMACPP_SERVER=1 (also build llama-server, without its web UI: about 10 more
#        CPU-minutes the first time; bench/serve_vs_llamacpp.sh sets it).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# --- pins ---------------------------------------------------------------------------------
PIN_NPM_VERSION=3.22.1
PIN_NPM_INTEGRITY='sha512-bltIipuWmc123H7tMIgDGKSsSrhmhlQYeVUC48XTjVW7XGJJiJJyCdlTMzQ/LiWoPkGDpcL4FviDpgw7qfTiDw=='
PIN_LLAMACPP_COMMIT=de3ff815ea7d559ee917f063901b8986f038abc6   # HEAD of the shipped bundle

NPM_VERSION=${LLAMACPP_NPM_VERSION:-$PIN_NPM_VERSION}
CACHE=${LLAMACPP_CACHE:-$ROOT/.cache/llamacpp}
JOBS=${LLAMACPP_JOBS:-2}
WITH_TESTS=1
[ "${LLAMACPP_NO_TESTS:-0}" = 1 ] && WITH_TESTS=0
WITH_SERVER=0
[ "${LLAMACPP_SERVER:-0}" = 1 ] && WITH_SERVER=1

NPM_DIR=$CACHE/npm
SRC=$CACHE/src
BUILD=$CACHE/build
BIN=$CACHE/bin

log() { echo "llamacpp: $*" >&2; }
die() { echo "llamacpp: ERROR: $*" >&2; exit 1; }

print_paths() {
  local ok=1
  for f in "$BUILD/bin/llama-bench" "$BUILD/bin/llama-quantize" "$BIN/dump_logits"; do
    [ -x "$f" ] || { log "missing $f (run scripts/llamacpp.sh build)"; ok=0; }
  done
  [ $ok = 1 ] || return 1
  echo "LLAMACPP_NPM=node-llama-cpp@$NPM_VERSION"
  echo "LLAMACPP_COMMIT=$(git -C "$SRC" rev-parse HEAD)"
  echo "LLAMACPP_SRC=$SRC"
  echo "LLAMA_BENCH=$BUILD/bin/llama-bench"
  echo "LLAMA_QUANTIZE=$BUILD/bin/llama-quantize"
  echo "LLAMA_DUMP_LOGITS=$BIN/dump_logits"
  if [ -x "$BUILD/bin/test-llama-archs" ]; then
    echo "LLAMA_TEST_ARCHS=$BUILD/bin/test-llama-archs"
  fi
  if [ -x "$BUILD/bin/llama-server" ]; then
    echo "LLAMA_SERVER=$BUILD/bin/llama-server"
  elif [ $WITH_SERVER = 1 ]; then
    log "missing $BUILD/bin/llama-server (run LLAMACPP_SERVER=1 scripts/llamacpp.sh build)"
    return 1
  fi
}

file_integrity() {  # npm-style "sha512-<base64>" of a file
  node -e 'const c=require("crypto"),f=require("fs");
           process.stdout.write("sha512-"+c.createHash("sha512").update(f.readFileSync(process.argv[1])).digest("base64"))' "$1"
}

check_tools() {
  local missing=()
  for t in npm node git cmake c++ tar flock; do command -v "$t" >/dev/null 2>&1 || missing+=("$t"); done
  ((${#missing[@]} == 0)) || die "missing tools: ${missing[*]} (Debian: apt-get install nodejs npm git cmake g++ util-linux)"
}

# --- 1. npm package -> llama.cpp git bundle -------------------------------------------------
fetch_source() {
  local tgz=$NPM_DIR/node-llama-cpp-$NPM_VERSION.tgz
  mkdir -p "$NPM_DIR"
  if [ ! -s "$tgz" ]; then
    log "npm pack node-llama-cpp@$NPM_VERSION (about 36 MB) ..."
    (cd "$NPM_DIR" && npm pack --silent "node-llama-cpp@$NPM_VERSION" >/dev/null) ||
      die "npm pack node-llama-cpp@$NPM_VERSION failed (is registry.npmjs.org reachable? try: npm ping)"
    [ -s "$tgz" ] || die "npm pack did not produce $tgz"
  fi
  if [ "$NPM_VERSION" = "$PIN_NPM_VERSION" ]; then
    local got; got=$(file_integrity "$tgz")
    if [ "$got" != "$PIN_NPM_INTEGRITY" ]; then
      rm -f "$tgz"
      die "integrity mismatch for $tgz: got $got, expected $PIN_NPM_INTEGRITY (file removed; rerun)"
    fi
  fi

  local bundle=$NPM_DIR/package/llama/gitRelease.bundle
  if [ ! -s "$bundle" ] || [ "$tgz" -nt "$bundle" ]; then
    log "extracting llama/gitRelease.bundle"
    rm -rf "$NPM_DIR/package"
    tar -xzf "$tgz" -C "$NPM_DIR" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json \
        package/package.json ||
      die "node-llama-cpp@$NPM_VERSION does not ship llama/gitRelease.bundle (packaging changed?)"
    touch "$bundle"
  fi

  local want=""
  [ "$NPM_VERSION" = "$PIN_NPM_VERSION" ] && want=$PIN_LLAMACPP_COMMIT
  [ -n "$want" ] || want=$(git bundle list-heads "$bundle" | awk '$2=="HEAD"{print $1; exit}')
  [ -n "$want" ] || die "cannot read HEAD from $bundle"
  if [ -d "$SRC/.git" ] && [ "$(git -C "$SRC" rev-parse HEAD 2>/dev/null)" = "$want" ] &&
     git -C "$SRC" diff --quiet HEAD 2>/dev/null; then
    return 0
  fi
  log "cloning llama.cpp $want from the bundle into $SRC"
  rm -rf "$SRC" "$BUILD"
  git clone --quiet "$bundle" "$SRC" 2>/dev/null || git clone --quiet --no-checkout "$bundle" "$SRC"
  git -C "$SRC" -c advice.detachedHead=false checkout --quiet "$want" ||
    die "commit $want not in $bundle"
}

# --- 2. llama.cpp CPU build ---------------------------------------------------------------------
build_llamacpp() {
  local gen=() targets=(llama llama-bench llama-quantize)
  command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
  [ $WITH_TESTS = 1 ] && targets+=(test-llama-archs)
  [ $WITH_SERVER = 1 ] && targets+=(llama-server)
  local args=(
    -DCMAKE_BUILD_TYPE=Release
    -DBUILD_SHARED_LIBS=OFF
    -DGGML_NATIVE=ON
    -DGGML_OPENMP=ON
    -DLLAMA_BUILD_COMMON=ON
    -DLLAMA_BUILD_TOOLS=ON
    -DLLAMA_BUILD_TESTS="$([ $WITH_TESTS = 1 ] && echo ON || echo OFF)"
    -DLLAMA_BUILD_EXAMPLES=OFF
    -DLLAMA_BUILD_SERVER=ON
    -DLLAMA_BUILD_UI=OFF
    -DLLAMA_USE_PREBUILT_UI=OFF
    -DLLAMA_BUILD_APP=OFF
    -DLLAMA_OPENSSL=OFF
  )
  local stamp=$BUILD/.moengine-configure old
  old=$(cat "$stamp" 2>/dev/null || true)
  if [ ! -f "$BUILD/CMakeCache.txt" ] || [ "$old" != "${gen[*]} ${args[*]}" ]; then
    log "configuring ($BUILD)"
    # A changed generator needs a fresh tree; changed options are reconfigured in place so
    # objects they do not affect (all of libllama when only the server is switched on) stay.
    [ "${old%% -D*}" = "${gen[*]}" ] || rm -rf "$BUILD"
    cmake -S "$SRC" -B "$BUILD" "${gen[@]}" "${args[@]}" >"$CACHE/configure.log" 2>&1 ||
      { tail -30 "$CACHE/configure.log" >&2; die "cmake configure failed (full log: $CACHE/configure.log)"; }
    echo "${gen[*]} ${args[*]}" >"$stamp"
  fi
  if [ -x "$BUILD/bin/llama-bench" ]; then
    log "checking ${targets[*]} are up to date"
  else
    log "building ${targets[*]} with -j$JOBS (first build: ~15 CPU-minutes; log: $CACHE/build.log)"
  fi
  cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}" >"$CACHE/build.log" 2>&1 ||
    { tail -40 "$CACHE/build.log" >&2; die "llama.cpp build failed (full log: $CACHE/build.log)"; }
}

# --- 3. our dump_logits against the static libllama -----------------------------------------
build_dump_logits() {
  local srcf=$ROOT/tools/llamacpp/dump_logits.cpp out=$BIN/dump_logits libs=()
  local l
  for l in src/libllama.a ggml/src/libggml.a ggml/src/libggml-cpu.a ggml/src/libggml-base.a; do
    [ -f "$BUILD/$l" ] || die "expected static library $BUILD/$l not found"
    libs+=("$BUILD/$l")
  done
  mkdir -p "$BIN"
  local stale=0
  if [ ! -x "$out" ] || [ "$srcf" -nt "$out" ]; then stale=1; fi
  for l in "${libs[@]}"; do
    if [ "$l" -nt "$out" ]; then stale=1; fi
  done
  if [ $stale = 1 ]; then
    log "building $out"
    c++ -std=c++17 -O2 -Wall -Wextra -I"$SRC/include" -I"$SRC/ggml/include" "$srcf" -o "$out.tmp" \
        -Wl,--start-group "${libs[@]}" -Wl,--end-group -fopenmp -pthread -ldl -lm ||
      die "failed to build dump_logits"
    mv -f "$out.tmp" "$out"
  fi
}

smoke() {
  "$BUILD/bin/llama-bench" --help >/dev/null 2>&1 || die "llama-bench --help failed"
  "$BUILD/bin/llama-quantize" --help >/dev/null 2>&1 || [ $? = 1 ] || die "llama-quantize --help failed"
  "$BIN/dump_logits" --help >/dev/null 2>&1 || die "dump_logits --help failed"
  if [ $WITH_SERVER = 1 ]; then
    "$BUILD/bin/llama-server" --help >/dev/null 2>&1 || die "llama-server --help failed"
  fi
}

do_build() {
  check_tools
  mkdir -p "$CACHE"
  exec 9>"$CACHE/.lock"
  flock 9   # one build at a time per cache folder
  local t0=$SECONDS
  fetch_source
  build_llamacpp
  build_dump_logits
  smoke
  log "ready in $((SECONDS - t0)) s ($(git -C "$SRC" log -1 --format=%h "$PIN_LLAMACPP_COMMIT" 2>/dev/null || git -C "$SRC" rev-parse --short HEAD), node-llama-cpp@$NPM_VERSION)"
  flock -u 9
}

cmd=${1:-build}
case "$cmd" in
  build) do_build; print_paths ;;
  paths) print_paths ;;
  gen-models)
    dir=${2:?usage: scripts/llamacpp.sh gen-models DIR [ARCH_REGEX]}
    re=${3:-'^(deepseek2|qwen3moe)$'}
    [ $WITH_TESTS = 1 ] || die "gen-models needs test-llama-archs (unset LLAMACPP_NO_TESTS)"
    do_build
    mkdir -p "$dir"
    # seed 42, stdev 0.1: the same files every time for a given llama.cpp commit
    "$BUILD/bin/test-llama-archs" -a "$re" -s 42 -d 0.1 -o "$dir" >&2 || die "test-llama-archs -o $dir failed"
    ls -1 "$dir"/*.gguf
    ;;
  clean) rm -rf "$CACHE"; log "removed $CACHE" ;;
  -h|--help|help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) die "unknown command '$cmd' (build|paths|gen-models|clean)" ;;
esac
