#!/usr/bin/env bash
# bench/serve_vs_llamacpp.sh — `moengine serve` against llama.cpp's `llama-server` under the
# same load, measured with `moengine bench serve` in one session.
#
# usage: bench/serve_vs_llamacpp.sh [MODEL.gguf]
#   MODEL defaults to models/mid-q8_0.gguf, generated with gen-model when missing.
#
# For each concurrency level c, first moengine and then llama-server (never both at once:
# they would share the same cores) is started on the model with THREADS compute threads,
# sent NUM_PROMPTS = max(PROMPTS_PER_C * c, MIN_PROMPTS) random requests of INPUT_LEN token
# ids and OUTPUT_LEN output tokens (ignore_eos, greedy, /v1/completions, streamed) with at
# most c in flight, and stopped. Every request must complete with exactly OUTPUT_LEN
# tokens by the server's own usage count; a row where that fails is marked and the script
# exits non-zero. llama-server gets c slots (-np c) of CTX tokens each (-c c*CTX).
#
# env: CONCURRENCY ("1 4 16 32"), INPUT_LEN (128), OUTPUT_LEN (128), PROMPTS_PER_C (2),
#      MIN_PROMPTS (4), THREADS (2), PORT (18080), CTX (INPUT_LEN + OUTPUT_LEN + 64),
#      MOENGINE (build/moengine), OUT_DIR (.cache/bench-serve/<UTC time>),
#      MOENGINE_SERVE_ARGS, LLAMA_SERVER_ARGS (extra flags for each server),
#      READY_TIMEOUT (600 s for a server to load the model).
# stdout: the comparison table (also written to OUT_DIR/summary.md); the JSON result of
# every run, and each server's log, are in OUT_DIR.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODEL=${1:-$ROOT/models/mid-q8_0.gguf}
CONCURRENCY=${CONCURRENCY:-"1 4 16 32"}
INPUT_LEN=${INPUT_LEN:-128}
OUTPUT_LEN=${OUTPUT_LEN:-128}
PROMPTS_PER_C=${PROMPTS_PER_C:-2}
MIN_PROMPTS=${MIN_PROMPTS:-4}
THREADS=${THREADS:-2}
PORT=${PORT:-18080}
CTX=${CTX:-$((INPUT_LEN + OUTPUT_LEN + 64))}
MOENGINE=${MOENGINE:-$ROOT/build/moengine}
OUT_DIR=${OUT_DIR:-$ROOT/.cache/bench-serve/$(date -u +%Y%m%d-%H%M%S)}
READY_TIMEOUT=${READY_TIMEOUT:-600}
read -r -a MOE_EXTRA <<<"${MOENGINE_SERVE_ARGS:-}"
read -r -a LLAMA_EXTRA <<<"${LLAMA_SERVER_ARGS:-}"

log() { echo "serve_vs_llamacpp: $*" >&2; }
die() { echo "serve_vs_llamacpp: ERROR: $*" >&2; exit 1; }

[ -x "$MOENGINE" ] || die "$MOENGINE not found; build it first (scripts/build.sh)"
if [ ! -f "$MODEL" ]; then
  [ "$MODEL" = "$ROOT/models/mid-q8_0.gguf" ] || die "model $MODEL not found"
  log "generating $MODEL (about 2.8 GB)"
  mkdir -p "$(dirname "$MODEL")"
  "$MOENGINE" gen-model --arch deepseek2 --preset mid --type q8_0 --out "$MODEL" >&2
fi
eval "$(LLAMACPP_SERVER=1 "$ROOT/scripts/llamacpp.sh" build)"
[ -x "${LLAMA_SERVER:-}" ] || die "llama-server was not built (see scripts/llamacpp.sh)"
command -v node >/dev/null || die "node is needed to read the JSON results (scripts/setup.sh installs it)"
mkdir -p "$OUT_DIR"

SERVER_PID=
stop_server() {
  if [ -n "$SERVER_PID" ]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
  fi
}
trap stop_server EXIT

# bench NAME C N: one `bench serve` run against the server on $PORT, which is then stopped.
bench() {
  local name=$1 c=$2 n=$3
  log "$name, concurrency $c: $n requests"
  if ! "$MOENGINE" bench serve --base-url "http://127.0.0.1:$PORT" --endpoint /v1/completions \
      --dataset random --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --ignore-eos --temperature 0 \
      --num-prompts "$n" --max-concurrency "$c" --request-rate inf --seed 1 --ready-timeout "$READY_TIMEOUT" \
      --result-file "$OUT_DIR/$name-c$c.json" >"$OUT_DIR/$name-c$c.txt"; then
    log "$name at concurrency $c failed; its log: $OUT_DIR/$name-c$c.log"
    rm -f "$OUT_DIR/$name-c$c.json"
  fi
  stop_server
}

# field FILE KEY...: values of top-level keys of a result file, tab-separated.
field() {
  node -e 'const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
           console.log(process.argv.slice(2).map(k => r[k]).join("\t"))' "$@"
}

rows=()
status=0
for c in $CONCURRENCY; do
  n=$((PROMPTS_PER_C * c))
  [ "$n" -ge "$MIN_PROMPTS" ] || n=$MIN_PROMPTS

  "$MOENGINE" serve --model "$MODEL" --host 127.0.0.1 --port "$PORT" --threads "$THREADS" \
      --max-num-seqs "$c" "${MOE_EXTRA[@]}" >"$OUT_DIR/moengine-c$c.log" 2>&1 &
  SERVER_PID=$!
  bench moengine "$c" "$n"

  "$LLAMA_SERVER" -m "$MODEL" --host 127.0.0.1 --port "$PORT" -t "$THREADS" -np "$c" -c "$((c * CTX))" \
      --no-webui "${LLAMA_EXTRA[@]}" >"$OUT_DIR/llamacpp-c$c.log" 2>&1 &
  SERVER_PID=$!
  bench llamacpp "$c" "$n"

  row="| $c | $n"
  declare -A tput=() ttft=() tpot=()
  for name in moengine llamacpp; do
    f=$OUT_DIR/$name-c$c.json
    if [ ! -f "$f" ]; then
      tput[$name]="failed"; ttft[$name]="-"; tpot[$name]="-"; status=1
      continue
    fi
    IFS=$'\t' read -r completed out_tok out_tps m_ttft m_tpot < <(field "$f" completed total_output_tokens \
        output_throughput mean_ttft_ms mean_tpot_ms)
    tput[$name]=$(printf '%.1f' "$out_tps")
    ttft[$name]=$(printf '%.0f' "$m_ttft")
    tpot[$name]=$(printf '%.1f' "$m_tpot")
    if [ "$completed" != "$n" ] || [ "$out_tok" != "$((n * OUTPUT_LEN))" ]; then
      tput[$name]="${tput[$name]} (!: $completed/$n requests, $out_tok/$((n * OUTPUT_LEN)) tokens)"
      status=1
    fi
  done
  ratio="-"
  if [[ ${tput[moengine]} =~ ^[0-9.]+$ && ${tput[llamacpp]} =~ ^[0-9.]+$ ]]; then
    ratio=$(awk -v a="${tput[moengine]}" -v b="${tput[llamacpp]}" 'BEGIN { printf "%.2fx", a / b }')
  fi
  rows+=("$row | ${tput[moengine]} | ${tput[llamacpp]} | $ratio | ${ttft[moengine]} | ${ttft[llamacpp]} | ${tpot[moengine]} | ${tpot[llamacpp]} |")
  unset tput ttft tpot
done

{
  echo "model: $(basename "$MODEL"); threads: $THREADS; input $INPUT_LEN / output $OUTPUT_LEN tokens (ignore_eos);"
  echo "moengine $(git -C "$ROOT" rev-parse --short HEAD), llama.cpp $(git -C "$LLAMACPP_SRC" rev-parse --short HEAD)"
  echo
  echo "| concurrency | requests | moengine out tok/s | llama.cpp out tok/s | ratio | moengine TTFT ms | llama.cpp TTFT ms | moengine TPOT ms | llama.cpp TPOT ms |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
} | tee "$OUT_DIR/summary.md"
log "results in $OUT_DIR"
exit $status
