#!/usr/bin/env bash
# bench/ep_replacement.sh — expert parallelism with live re-placement on a skewed workload:
# EP4 (or RANKS) on this host, in one run.
#
# usage: bench/ep_replacement.sh
#
# A generated model whose routing is skewed (gen-model --expert-skew: each MoE layer has its
# own hot experts) is served by 4 ranks (`mpirun -np 4 moengine serve --ep 4`), starting from
# an even placement with SPARE spare replicas per rank and layer that know nothing of the
# skew. Four `bench serve` clients, one per rank, keep every rank busy for DURATION
# seconds while the group re-places its experts every INTERVAL seconds
# (--replace-interval-s, at most MAX_MOVES copies each). At the end rank 0 prints the run's
# summary, which this script shows with the clients' throughput:
#   steps and the median step time; the p90 and longest steps taken while expert weights
#   were being copied and outside copies, against the median, for all steps and again for
#   the decode-only ones (no rank prefilling); re-placements and the bytes moved; the
#   layers' busiest-rank load over their mean-rank load (1 is even) before the first
#   re-placement and after the last one.
# A second run without re-placement (same placement, same load) gives the peer figures.
#
# env: MODEL (models/mid5-skew-q8_0.gguf: made if missing with gen-model --preset mid
#      --layers 5 --type q8_0 --expert-skew SKEW), SKEW (1.0), RANKS (4), SPARE (2),
#      DURATION (60 s), INTERVAL (10 s), MAX_MOVES (32), INPUT_LEN (64), OUTPUT_LEN (64),
#      CONCURRENCY (4 per rank), NUM_PROMPTS (per rank; 100000: new requests for the whole
#      DURATION; CONCURRENCY with a long OUTPUT_LEN: decode only after the first steps),
#      PORT (18600: ranks on PORT..PORT+RANKS-1),
#      MOENGINE (build/moengine), OUT_DIR (.cache/bench-ep/<UTC time>)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SKEW=${SKEW:-1.0}
MODEL=${MODEL:-$ROOT/models/mid5-skew-q8_0.gguf}
RANKS=${RANKS:-4}
SPARE=${SPARE:-2}
DURATION=${DURATION:-60}
INTERVAL=${INTERVAL:-10}
MAX_MOVES=${MAX_MOVES:-32}
INPUT_LEN=${INPUT_LEN:-64}
OUTPUT_LEN=${OUTPUT_LEN:-64}
CONCURRENCY=${CONCURRENCY:-4}
NUM_PROMPTS=${NUM_PROMPTS:-100000}
PORT=${PORT:-18600}
MOENGINE=${MOENGINE:-$ROOT/build/moengine}
OUT_DIR=${OUT_DIR:-$ROOT/.cache/bench-ep/$(date -u +%Y%m%d-%H%M%S)}
MPIRUN=(mpirun --oversubscribe --bind-to none -np "$RANKS")
[ "$(id -u)" -eq 0 ] && MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$RANKS")
mkdir -p "$OUT_DIR"

if [ ! -f "$MODEL" ]; then
  echo "ep_replacement: generating $MODEL" >&2
  "$MOENGINE" gen-model --arch deepseek2 --preset mid --layers 5 --type q8_0 --expert-skew "$SKEW" --out "$MODEL" >&2
fi

# The even placement with SPARE replicas per rank and layer: expert e on rank e*R/E, and
# rank r's spares are the experts r*SPARE.. of the next rank's run (hot or cold by chance).
"$MOENGINE" generate --model "$MODEL" --prompt-ids 1 --max-tokens 1 --ep 1 --expert-trace-out "$OUT_DIR/shape.npy" \
  --threads 1 >/dev/null 2>"$OUT_DIR/shape.log"
read -r LAYERS EXPERTS < <(sed -n 's/.*x \([0-9]*\) MoE layers x \([0-9]*\) experts.*/\1 \2/p' "$OUT_DIR/shape.log")
{
  printf '{"nodes": 1, "devices_per_node": %d, "layers": [' "$RANKS"
  for ((l = 0; l < LAYERS; l++)); do
    slots="" devices=""
    for ((e = 0; e < EXPERTS; e++)); do slots+="$e,"; devices+="$((e * RANKS / EXPERTS)),"; done
    for ((r = 0; r < RANKS; r++)); do
      for ((s = 0; s < SPARE; s++)); do
        e=$(( ((r + 1) % RANKS) * EXPERTS / RANKS + s ))
        slots+="$e,"; devices+="$r,"
      done
    done
    [ "$l" -gt 0 ] && printf ','
    printf '{"slots": [%s], "devices": [%s]}' "${slots%,}" "${devices%,}"
  done
  printf ']}\n'
} >"$OUT_DIR/start.json"

run_phase() {  # NAME, extra serve args...
  local name=$1
  shift
  local log="$OUT_DIR/$name.log"
  "${MPIRUN[@]}" "$MOENGINE" serve --model "$MODEL" --served-model-name m --port "$PORT" --threads 1 --ep "$RANKS" \
    --placement "$OUT_DIR/start.json" "$@" >"$OUT_DIR/$name.out" 2>"$log" &
  local group=$!
  for r in $(seq 0 $((RANKS - 1))); do
    for _ in $(seq 1 600); do
      curl -sf "http://127.0.0.1:$((PORT + r))/health" >/dev/null && break
      sleep 0.2
    done
  done
  local clients=()
  for r in $(seq 0 $((RANKS - 1))); do
    timeout "$DURATION" "$MOENGINE" bench serve --base-url "http://127.0.0.1:$((PORT + r))" --model m --dataset random \
      --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --ignore-eos --num-prompts "$NUM_PROMPTS" \
      --max-concurrency "$CONCURRENCY" --seed "$r" --json >"$OUT_DIR/$name-client$r.json" 2>/dev/null &
    clients+=($!)
  done
  wait "${clients[@]}" 2>/dev/null || true
  # SIGTERM to the ranks, which stop together and print the summary; mpirun then ends.
  pkill -TERM -P "$group" -x moengine 2>/dev/null || true
  wait "$group" 2>/dev/null || true
  echo "== $name"
  grep -E "^ep: (re-placement switched|[0-9]+ steps)" "$log" | tail -n 4
}

echo "ep_replacement: $RANKS ranks, $MODEL ($LAYERS MoE layers x $EXPERTS experts), $SPARE spare replicas per rank and layer, ${DURATION}s per run; results in $OUT_DIR"
run_phase fixed
run_phase live --replace-interval-s "$INTERVAL" --replace-max-moves "$MAX_MOVES"
