#!/usr/bin/env bash
# bench/sim_vs_measured.sh — the cluster simulator against this machine: calibrate a CPU
# profile from `moengine bench model` (and `bench kv-transfer`) runs, then predict what
# `moengine bench serve` measures in the same session, and compare.
#
# usage: bench/sim_vs_measured.sh [OUT_DIR]
#   OUT_DIR (default: a new temporary directory) gets every result, log, profile and config.
#
# 1. Calibration, from micro-benchmarks only (never from the serve runs checked below): on
#    CALIB_MODEL, `bench model` at THREADS threads (the unified server's device) and at
#    THREADS/2 (each instance of 1P1D), each twice: pp 128 / tg TG / --batch BATCHES at
#    --batch-context 128, and pp 512 / tg TG / --batch BATCHES at --batch-context 512;
#    `bench kv-transfer` for the KV link; `moengine sim calibrate` fits one profile per
#    thread count into OUT_DIR/profiles/hardware/{cpu-local,cpu-local-half}.yaml, with the
#    engine's wake time (overhead.wake_us) from the mean queue time of WAKE_PROMPTS short
#    requests (16 + 4 tokens) sent one at a time to a fresh `moengine serve`.
# 2. Measurement: `moengine serve` (the defaults: 2048 batched tokens, 64 sequences, 1 GiB
#    of KV in blocks of 16) on MODEL with THREADS threads, sent NUM_PROMPTS = max(PROMPTS_PER_C
#    x c, MIN_PROMPTS) random requests of INPUT_LEN prompt token ids (below the model's
#    vocabulary size) and OUTPUT_LEN output tokens, each drawn uniformly within RANGE_RATIO
#    of its length (bench serve --random-range-ratio; ignore_eos, greedy, streamed), c at a
#    time, for each c of CONCURRENCY; then 1P1D: a prefill and a decode instance of
#    THREADS/2 threads each, KV over KV_TRANSPORT, behind `moengine proxy`, at
#    PD_CONCURRENCY. Each server is started fresh and stopped after its run.
# 3. Prediction: for each case a sim config with the same deployment settings and a closed
#    loop of c clients sending the measured requests' lengths in the order bench serve sent
#    them (lengths_from: its result file), pausing
#    between requests as long as bench serve's clients were measured to (tens of us: enough
#    to break the ties of requests answered in the same step, as they break in the server);
#    `moengine sim --json`.
# Prints case, measured, predicted and error for output tokens/s, TTFT p50 and TPOT p50, and
# exits 1 when any error exceeds TOLERANCE percent (all rows are printed first).
#
# env: MODEL (models/mid-q8_0.gguf, generated when missing), CALIB_MODEL (MODEL),
#      INPUT_LEN (256), OUTPUT_LEN (64), RANGE_RATIO (0.25; 0 gives every request the same
#      lengths, whose closed loops lock into phases: docs/simulator.md),
#      CONCURRENCY ("1 4 16"), PD_CONCURRENCY (4; "" skips
#      1P1D), PROMPTS_PER_C (8), MIN_PROMPTS (8), THREADS (the cores: nproc), TG (64),
#      BATCHES (1,4,16), WAKE_PROMPTS (32), KV_TRANSPORT (ucx), TOLERANCE (15), MOENGINE (build/moengine),
#      READY_TIMEOUT (600 s for a server to load the model).
# Servers listen on ports the OS picks (--port 0), on 127.0.0.1.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODEL=${MODEL:-$ROOT/models/mid-q8_0.gguf}
CALIB_MODEL=${CALIB_MODEL:-$MODEL}
INPUT_LEN=${INPUT_LEN:-256}
OUTPUT_LEN=${OUTPUT_LEN:-64}
RANGE_RATIO=${RANGE_RATIO:-0.25}
CONCURRENCY=${CONCURRENCY:-"1 4 16"}
PD_CONCURRENCY=${PD_CONCURRENCY-4}
PROMPTS_PER_C=${PROMPTS_PER_C:-8}
MIN_PROMPTS=${MIN_PROMPTS:-8}
THREADS=${THREADS:-$(nproc)}
TG=${TG:-64}
WAKE_PROMPTS=${WAKE_PROMPTS:-32}
BATCHES=${BATCHES:-1,4,16}
KV_TRANSPORT=${KV_TRANSPORT:-ucx}
TOLERANCE=${TOLERANCE:-15}
MOENGINE=${MOENGINE:-$ROOT/build/moengine}
READY_TIMEOUT=${READY_TIMEOUT:-600}
OUT_DIR=${1:-$(mktemp -d "${TMPDIR:-/tmp}/sim-vs-measured.XXXXXX")}
HALF=$((THREADS / 2 > 0 ? THREADS / 2 : 1))
# Server settings: serve's defaults, written out so that the sim configs match them.
MAX_BATCHED_TOKENS=2048
MAX_NUM_SEQS=64
KV_GIB=1
BLOCK_SIZE=16

log() { echo "sim_vs_measured: $*" >&2; }
die() { echo "sim_vs_measured: ERROR: $*" >&2; exit 1; }

[ -x "$MOENGINE" ] || die "$MOENGINE not found; build it first (scripts/build.sh)"
command -v node >/dev/null || die "node is needed to read the JSON results (scripts/setup.sh installs it)"
command -v curl >/dev/null || die "curl is needed to wait for the servers"
for m in "$MODEL" "$CALIB_MODEL"; do
  if [ ! -e "$m" ]; then
    [ "$m" = "$ROOT/models/mid-q8_0.gguf" ] || die "model $m not found"
    log "generating $m (about 2.8 GB)"
    mkdir -p "$(dirname "$m")"
    "$MOENGINE" gen-model --arch deepseek2 --preset mid --type q8_0 --out "$m" >&2
  fi
done
mkdir -p "$OUT_DIR"/{calibration,profiles/hardware,serve,sim}
OUT_DIR=$(cd "$OUT_DIR" && pwd)
START=$(date +%s)
log "results in $OUT_DIR"

# Every server runs in a process group of its own (setsid), killed whole on exit.
GROUPS_STARTED=()
stop_all() {
  local g
  for g in "${GROUPS_STARTED[@]}"; do kill -TERM -- "-$g" 2>/dev/null || true; done
  for g in "${GROUPS_STARTED[@]}"; do
    for _ in $(seq 100); do kill -0 -- "-$g" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$g" 2>/dev/null || true
  done
  GROUPS_STARTED=()
}
trap stop_all EXIT
trap 'exit 130' INT TERM

# start LOG CMD...: runs CMD in a new process group, output to LOG.
start() {
  local logf=$1
  shift
  setsid "$@" >"$logf" 2>&1 &
  GROUPS_STARTED+=($!)
}

# url_of LOG: waits for the "serving ... on URL" / "proxy on URL" line; prints URL.
url_of() {
  local url
  for _ in $(seq $((READY_TIMEOUT * 5))); do
    url=$(grep -oE '(serving .* on|proxy on) http://[0-9.]+:[0-9]+' "$1" 2>/dev/null | grep -oE 'http://[0-9.:]+' | head -1 || true)
    if [ -n "$url" ] && curl -sf "$url/health" >/dev/null 2>&1; then
      echo "$url"
      return
    fi
    sleep 0.2
  done
  cat "$1" >&2
  die "the server logging to $1 did not become ready"
}

# field FILE EXPR: a value of a JSON file (EXPR in terms of r).
field() { node -e 'const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")); console.log(eval(process.argv[2]))' "$1" "$2"; }

# 1. Calibration -------------------------------------------------------------------------
# wake THREADS: how long an idle engine takes to start a step for a request, from the queue
# time of WAKE_PROMPTS short requests sent one at a time (not the workload checked below).
wake() {
  local logf=$OUT_DIR/calibration/wake-t$1.log url
  log "calibration: engine wake time, $1 threads, $WAKE_PROMPTS requests of 16 + 4 tokens one at a time"
  start "$logf" "$MOENGINE" serve --model "$CALIB_MODEL" --served-model-name bench --host 127.0.0.1 --port 0 --threads "$1"
  url=$(url_of "$logf")
  "$MOENGINE" bench serve --base-url "$url" --endpoint /v1/completions --dataset random --input-len 16 --output-len 4 \
    --ignore-eos --temperature 0 --num-prompts "$WAKE_PROMPTS" --max-concurrency 1 --request-rate inf --seed 2 \
    --tokenizer "$CALIB_MODEL" >"$OUT_DIR/calibration/wake-t$1.txt"
  curl -sf "$url/metrics" >"$OUT_DIR/calibration/wake-t$1.metrics"
  stop_all
}
calibrate() {
  local name=$1 threads=$2 f benches=()
  for ctx in 128 512; do
    f=$OUT_DIR/calibration/bench-model-t$threads-c$ctx.json
    log "calibration: bench model, $threads threads, pp $ctx, tg $TG, batches $BATCHES at context $ctx"
    "$MOENGINE" bench model --model "$CALIB_MODEL" --pp "$ctx" --tg "$TG" --reps 2 --threads "$threads" \
      --batch "$BATCHES" --batch-context "$ctx" --json >"$f" 2>"$OUT_DIR/calibration/bench-model-t$threads-c$ctx.log"
    benches+=(--bench "$f")
  done
  wake "$threads"
  "$MOENGINE" sim calibrate --model "$CALIB_MODEL" "${benches[@]}" --kv-transfer "$OUT_DIR/calibration/kv-transfer.json" \
    --kv-method "$KV_TRANSPORT" --wake-metrics "$OUT_DIR/calibration/wake-t$threads.metrics" \
    --name "$name" --out "$OUT_DIR/profiles/hardware/$name.yaml" \
    >"$OUT_DIR/calibration/$name.txt"
  cat "$OUT_DIR/calibration/$name.txt" >&2
}
log "calibration: bench kv-transfer ($KV_TRANSPORT)"
"$MOENGINE" bench kv-transfer --transports "$KV_TRANSPORT" --seconds 0.2 --json "$OUT_DIR/calibration/kv-transfer.json" \
  >"$OUT_DIR/calibration/kv-transfer.txt"
calibrate cpu-local "$THREADS"
[ -z "$PD_CONCURRENCY" ] || calibrate cpu-local-half "$HALF"
PRECISION=$("$MOENGINE" sim calibrate --model "$MODEL" --print-precision)

# 2. Measurement -------------------------------------------------------------------------
SERVE_COMMON=(--model "$MODEL" --served-model-name bench --host 127.0.0.1 --port 0 --max-num-batched-tokens "$MAX_BATCHED_TOKENS"
              --max-num-seqs "$MAX_NUM_SEQS" --kv-cache-memory "$KV_GIB" --block-size "$BLOCK_SIZE")
n_prompts() { local n=$((PROMPTS_PER_C * $1)); [ "$n" -ge "$MIN_PROMPTS" ] || n=$MIN_PROMPTS; echo "$n"; }

# bench NAME URL C N
bench() {
  log "measure $1: $4 requests of $INPUT_LEN + $OUTPUT_LEN tokens, $3 at a time"
  "$MOENGINE" bench serve --base-url "$2" --endpoint /v1/completions --dataset random --input-len "$INPUT_LEN" \
    --output-len "$OUTPUT_LEN" --random-range-ratio "$RANGE_RATIO" --ignore-eos --temperature 0 --num-prompts "$4" --max-concurrency "$3" --request-rate inf \
    --seed 1 --tokenizer "$MODEL" --save-detailed --result-file "$OUT_DIR/serve/$1.json" >"$OUT_DIR/serve/$1.txt"
  local done_n
  done_n=$(field "$OUT_DIR/serve/$1.json" 'r.completed')
  [ "$done_n" = "$4" ] || die "$1: $done_n of $4 requests completed (see $OUT_DIR/serve/$1.txt)"
}

CASES=()
for c in $CONCURRENCY; do
  n=$(n_prompts "$c")
  start "$OUT_DIR/serve/unified-c$c.log" "$MOENGINE" serve "${SERVE_COMMON[@]}" --threads "$THREADS"
  url=$(url_of "$OUT_DIR/serve/unified-c$c.log")
  bench "unified-c$c" "$url" "$c" "$n"
  stop_all
  CASES+=("unified-c$c:$c:$n")
done
if [ -n "$PD_CONCURRENCY" ]; then
  c=$PD_CONCURRENCY
  n=$(n_prompts "$c")
  start "$OUT_DIR/serve/pd-prefill.log" "$MOENGINE" serve "${SERVE_COMMON[@]}" --threads "$HALF" --role prefill --kv-transport "$KV_TRANSPORT"
  start "$OUT_DIR/serve/pd-decode.log" "$MOENGINE" serve "${SERVE_COMMON[@]}" --threads "$HALF" --role decode --kv-transport "$KV_TRANSPORT"
  p_url=$(url_of "$OUT_DIR/serve/pd-prefill.log")
  d_url=$(url_of "$OUT_DIR/serve/pd-decode.log")
  start "$OUT_DIR/serve/pd-proxy.log" "$MOENGINE" proxy --host 127.0.0.1 --port 0 --prefill "$p_url" --decode "$d_url"
  url=$(url_of "$OUT_DIR/serve/pd-proxy.log")
  bench "1p1d-c$c" "$url" "$c" "$n"
  stop_all
  CASES+=("1p1d-c$c:$c:$n")
fi

# 3. Prediction --------------------------------------------------------------------------
pool="{instances: 1, devices: 1, max_batched_tokens: $MAX_BATCHED_TOKENS, max_sequences_per_device: $MAX_NUM_SEQS, kv_cache_gib: $KV_GIB, block_size: $BLOCK_SIZE}"
for entry in "${CASES[@]}"; do
  IFS=: read -r name c n <<<"$entry"
  cfg=$OUT_DIR/sim/$name.yaml
  # The clients' pause between an answer and their next request, as measured: the mean gap
  # from each request's end to the next start after it (at least 1 us).
  think=$(node -e '
    const m = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")), c = Number(process.argv[2]);
    const ends = m.start_times.map((s, i) => s + m.e2els[i]).sort((a, b) => a - b);
    const starts = [...m.start_times].sort((a, b) => a - b);
    let sum = 0, n = 0;
    for (let i = c; i < starts.length; ++i) { sum += Math.max(0, starts[i] - ends[i - c]); ++n; }
    console.log(Math.max(1e-6, n ? sum / n : 0).toExponential(3));' "$OUT_DIR/serve/$name.json" "$c")
  if [[ $name == unified* ]]; then
    hw=cpu-local
    deployment="  unified: $pool"
  else
    hw=cpu-local-half
    deployment="  prefill: $pool
  decode: $pool
  kv_transfer: scale_up"
  fi
  cat >"$cfg" <<EOF
description: "$name: what bench/sim_vs_measured.sh measured in serve/$name.json"
hardware: $hw
model: {gguf: $MODEL}
precision: $PRECISION
deployment:
$deployment
workload:
  arrival: {closed: {clients: $c, think_s: $think, lengths_from: $OUT_DIR/serve/$name.json}}
EOF
  MOENGINE_SIM_PROFILES=$OUT_DIR/profiles "$MOENGINE" sim --config "$cfg" --json "$OUT_DIR/sim/$name.json" >"$OUT_DIR/sim/$name.txt"
done

# The table ------------------------------------------------------------------------------
status=0
{
  echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores; model $(basename "$MODEL")" \
    "(calibrated on $(basename "$CALIB_MODEL")); $INPUT_LEN + $OUTPUT_LEN tokens (range ratio $RANGE_RATIO); unified on $THREADS threads, 1P1D on $HALF + $HALF"
  echo
  echo "| case | metric | measured | predicted | error |"
  echo "| --- | --- | --- | --- | --- |"
} >"$OUT_DIR/summary.md"
for entry in "${CASES[@]}"; do
  IFS=: read -r name c n <<<"$entry"
  pool_key=$([[ $name == unified* ]] && echo unified || echo decode)
  m=$OUT_DIR/serve/$name.json
  s=$OUT_DIR/sim/$name.json
  while IFS=$'\t' read -r metric measured predicted; do
    row=$(awk -v n="$name" -v k="$metric" -v a="$measured" -v b="$predicted" -v tol="$TOLERANCE" 'BEGIN {
      e = 100 * (b - a) / a; flag = (e > tol || e < -tol) ? " !" : "";
      printf "| %s | %s | %.2f | %.2f | %+.1f%%%s |\n", n, k, a, b, e, flag; exit (flag != "") }') || status=1
    echo "$row" >>"$OUT_DIR/summary.md"
  done < <(node -e '
    const fs = require("fs");
    const m = JSON.parse(fs.readFileSync(process.argv[1], "utf8")), s = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
    const k = process.argv[3];
    console.log(["output tok/s", m.output_throughput, s[k].output_tokens_per_s].join("\t"));
    console.log(["TTFT p50 ms", m.median_ttft_ms, 1000 * s.ttft_s.p50].join("\t"));
    console.log(["TPOT p50 ms", m.median_tpot_ms, 1000 * s.tpot_s.p50].join("\t"));' "$m" "$s" "$pool_key")
done
echo >>"$OUT_DIR/summary.md"
echo "total time $(($(date +%s) - START)) s; results in $OUT_DIR" >>"$OUT_DIR/summary.md"
cat "$OUT_DIR/summary.md"
[ $status -eq 0 ] || log "some predictions are off by more than $TOLERANCE%"
exit $status
