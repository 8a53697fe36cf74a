#!/usr/bin/env bash
# bench/pd_vs_unified.sh — 1P1D behind `moengine proxy` against one unified `moengine serve`
# at equal total cores, under the same load, measured with `moengine bench serve`.
#
# usage: bench/pd_vs_unified.sh [MODEL.gguf]
#   MODEL defaults to models/mid-q8_0.gguf, generated with gen-model when missing.
#
# Unified: one instance with THREADS compute threads. Disaggregated: a prefill instance and a
# decode instance with THREADS/2 threads each (the same cores in all), KV over KV_TRANSPORT,
# behind the proxy. Each is sent NUM_PROMPTS random requests of INPUT_LEN token ids and
# OUTPUT_LEN output tokens (ignore_eos, greedy, streamed) with at most CONCURRENCY in
# flight. Besides TTFT, TPOT and throughput, the disaggregated run says where a request's
# time goes, from the instances' own metrics: prefill (P's time to first token), proxy
# (the client's TTFT minus P's), KV transfer (D's pull: first contact to lease release) and
# D's first decode step (the first inter-token gap minus the transfer).
#
# env: INPUT_LEN (2048), OUTPUT_LEN (64), NUM_PROMPTS (8), CONCURRENCY (2), THREADS (2),
#      KV_TRANSPORT (ucx), KV_DTYPE (auto: every server's --kv-cache-dtype), PORT (18090: unified and proxy; P and D take PORT+1, PORT+2),
#      MOENGINE (build/moengine), OUT_DIR (.cache/bench-pd/<UTC time>),
#      READY_TIMEOUT (600 s for a server to load the model).
# stdout: the comparison table (also OUT_DIR/summary.md); results and logs in OUT_DIR.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODEL=${1:-$ROOT/models/mid-q8_0.gguf}
INPUT_LEN=${INPUT_LEN:-2048}
OUTPUT_LEN=${OUTPUT_LEN:-64}
NUM_PROMPTS=${NUM_PROMPTS:-8}
CONCURRENCY=${CONCURRENCY:-2}
THREADS=${THREADS:-2}
KV_TRANSPORT=${KV_TRANSPORT:-ucx}
KV_DTYPE=${KV_DTYPE:-auto}
PORT=${PORT:-18090}
MOENGINE=${MOENGINE:-$ROOT/build/moengine}
OUT_DIR=${OUT_DIR:-$ROOT/.cache/bench-pd/$(date -u +%Y%m%d-%H%M%S)}
READY_TIMEOUT=${READY_TIMEOUT:-600}
HALF=$((THREADS / 2 > 0 ? THREADS / 2 : 1))

log() { echo "pd_vs_unified: $*" >&2; }
die() { echo "pd_vs_unified: ERROR: $*" >&2; exit 1; }

[ -x "$MOENGINE" ] || die "$MOENGINE not found; build it first (scripts/build.sh)"
command -v node >/dev/null || die "node is needed to read the JSON results (scripts/setup.sh installs it)"
if [ ! -f "$MODEL" ]; then
  [ "$MODEL" = "$ROOT/models/mid-q8_0.gguf" ] || die "model $MODEL not found"
  log "generating $MODEL (about 2.8 GB)"
  mkdir -p "$(dirname "$MODEL")"
  "$MOENGINE" gen-model --arch deepseek2 --preset mid --type q8_0 --out "$MODEL" >&2
fi
mkdir -p "$OUT_DIR"

PIDS=()
stop_all() {
  [ ${#PIDS[@]} -eq 0 ] && return
  kill "${PIDS[@]}" 2>/dev/null || true
  wait "${PIDS[@]}" 2>/dev/null || true
  PIDS=()
}
trap stop_all EXIT

# wait_ready URL LOG: until URL/health answers (or the process is gone).
wait_ready() {
  for _ in $(seq $((READY_TIMEOUT * 5))); do
    curl -sf "$1/health" >/dev/null 2>&1 && return
    sleep 0.2
  done
  cat "$2" >&2
  die "$1 did not become ready"
}

# bench NAME URL: one `bench serve` run.
bench() {
  log "$1: $NUM_PROMPTS requests of $INPUT_LEN tokens, $CONCURRENCY at a time"
  "$MOENGINE" bench serve --base-url "$2" --endpoint /v1/completions --dataset random \
    --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --ignore-eos --temperature 0 \
    --num-prompts "$NUM_PROMPTS" --max-concurrency "$CONCURRENCY" --request-rate inf --seed 1 \
    --save-detailed --result-file "$OUT_DIR/$1.json" >"$OUT_DIR/$1.txt"
}

# metric URL NAME: sum / count of a histogram, or a counter's value, from URL/metrics.
hist_mean() {
  curl -s "$1/metrics" | awk -v n="moengine:$2" '
    index($0, n "_sum{") == 1 { s = $NF } index($0, n "_count{") == 1 { c = $NF }
    END { if (c > 0) printf "%.1f", 1000 * s / c; else print "-" }'
}

serve() {
  local name=$1
  shift
  "$MOENGINE" serve --model "$MODEL" --served-model-name bench --host 127.0.0.1 --max-num-seqs "$CONCURRENCY" \
    --kv-cache-dtype "$KV_DTYPE" "$@" \
    >"$OUT_DIR/$name.log" 2>&1 &
  PIDS+=($!)
}

serve unified --port "$PORT" --threads "$THREADS"
wait_ready "http://127.0.0.1:$PORT" "$OUT_DIR/unified.log"
bench unified "http://127.0.0.1:$PORT"
stop_all

serve prefill --port $((PORT + 1)) --threads "$HALF" --role prefill --kv-transport "$KV_TRANSPORT"
serve decode --port $((PORT + 2)) --threads "$HALF" --role decode --kv-transport "$KV_TRANSPORT"
"$MOENGINE" proxy --host 127.0.0.1 --port "$PORT" --prefill "http://127.0.0.1:$((PORT + 1))" \
  --decode "http://127.0.0.1:$((PORT + 2))" >"$OUT_DIR/proxy.log" 2>&1 &
PIDS+=($!)
for p in $((PORT + 1)) $((PORT + 2)) "$PORT"; do wait_ready "http://127.0.0.1:$p" "$OUT_DIR/proxy.log"; done
bench pd "http://127.0.0.1:$PORT"
p_ttft=$(hist_mean "http://127.0.0.1:$((PORT + 1))" time_to_first_token_seconds)
transfer=$(hist_mean "http://127.0.0.1:$((PORT + 2))" kv_transfer_duration_seconds)
proxy_ttft=$(hist_mean "http://127.0.0.1:$PORT" proxy_time_to_first_token_seconds)
d_metrics=$(curl -s "http://127.0.0.1:$((PORT + 2))/metrics")
kv_bytes=$(awk '/^moengine:kv_transfer_bytes_total/ { print $NF }' <<<"$d_metrics")
pulled=$(awk '/^moengine:kv_remote_loads_total.*result="loaded"/ { print $NF }' <<<"$d_metrics")
recomputed=$(awk '/^moengine:kv_remote_loads_total.*result="recomputed"/ { print $NF }' <<<"$d_metrics")
stop_all

# summary FILE: completed, throughput, mean TTFT, mean TPOT, mean first inter-token gap.
summary() {
  node -e 'const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    const gaps = (r.itls || []).filter(l => l.length > 0).map(l => l[0]);
    const first = gaps.length ? 1000 * gaps.reduce((a, b) => a + b, 0) / gaps.length : NaN;
    console.log([r.completed, r.output_throughput.toFixed(2), r.mean_ttft_ms.toFixed(0), r.mean_tpot_ms.toFixed(1),
                 first.toFixed(1)].join("\t"))' "$1"
}
IFS=$'\t' read -r u_done u_tput u_ttft u_tpot u_gap < <(summary "$OUT_DIR/unified.json")
IFS=$'\t' read -r d_done d_tput d_ttft d_tpot d_gap < <(summary "$OUT_DIR/pd.json")
first_step=$(awk -v g="$d_gap" -v t="$transfer" 'BEGIN { if (t == "-") print "-"; else printf "%.1f", g - t }')
proxy_cost=$(awk -v a="$proxy_ttft" -v b="$p_ttft" 'BEGIN { if (a == "-" || b == "-") print "-"; else printf "%.1f", a - b }')
per_request=$(awk -v b="$kv_bytes" -v n="$pulled" 'BEGIN { if (n > 0) printf "%.1f", b / n / 1048576; else print "-" }')
{
  echo "model: $(basename "$MODEL"); $INPUT_LEN-token prompts, $OUTPUT_LEN output tokens, $NUM_PROMPTS requests," \
    "$CONCURRENCY at a time; $THREADS threads in all; KV $KV_DTYPE over $KV_TRANSPORT; moengine $(git -C "$ROOT" rev-parse --short HEAD)"
  echo
  echo "| setup | completed | out tok/s | mean TTFT ms | mean TPOT ms | mean first gap ms |"
  echo "| --- | --- | --- | --- | --- | --- |"
  echo "| unified ($THREADS threads) | $u_done | $u_tput | $u_ttft | $u_tpot | $u_gap |"
  echo "| 1P1D ($HALF + $HALF threads) | $d_done | $d_tput | $d_ttft | $d_tpot | $d_gap |"
  echo
  echo "1P1D, where the time to the first and second token goes (means, ms): prefill on P $p_ttft;" \
    "proxy $proxy_cost; KV transfer $transfer ($per_request MiB per pull; $pulled pulled, $recomputed recomputed on D);" \
    "D's first decode step $first_step"
} | tee "$OUT_DIR/summary.md"
log "results in $OUT_DIR"
