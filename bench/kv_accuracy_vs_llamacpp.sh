#!/usr/bin/env bash
# bench/kv_accuracy_vs_llamacpp.sh — what a KV cache below f32 costs in accuracy, moengine
# against llama.cpp on the same model file and the same prompt: per engine, the KL
# divergence of each position's next-token distribution from that engine's own f32-KV run.
#
# usage: bench/kv_accuracy_vs_llamacpp.sh [MODEL.gguf ...]
#   MODEL defaults to models/mid-q8_0.gguf (generated with gen-model when missing).
#
# moengine: `bench kv-accuracy --prompt-ids ... --gen 1` (the prompt's rows) for DTYPES;
# llama.cpp de3ff81: tools/llamacpp/dump_logits with --kv-type f32 and each of LLAMA_KV, then
# tools/llamacpp/kl_divergence.py. Flash attention stays off except for a quantized cache,
# which needs it: its CPU kernel rounds to f16 inside (an f32 cache with it on gives the
# very logits of an f16 one), so it would hide what the f16 cache costs.
# env: PROMPT_LEN (2048 token ids drawn in [0, 500) by a fixed LCG), THREADS (2),
#      DTYPES ("f16,bf16,fp8_e4m3,q8_0"), LLAMA_KV ("f16 q8_0"), MOENGINE (build/moengine),
#      OUT_DIR (.cache/bench-kv-accuracy/<UTC time>).
# stdout: one table per model.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PROMPT_LEN=${PROMPT_LEN:-2048}
THREADS=${THREADS:-2}
DTYPES=${DTYPES:-f16,bf16,fp8_e4m3,q8_0}
LLAMA_KV=${LLAMA_KV:-"f16 q8_0"}
MOENGINE=${MOENGINE:-$ROOT/build/moengine}
OUT_DIR=${OUT_DIR:-$ROOT/.cache/bench-kv-accuracy/$(date -u +%Y%m%d-%H%M%S)}
MODELS=("$@")
[ ${#MODELS[@]} -gt 0 ] || MODELS=("$ROOT/models/mid-q8_0.gguf")
mkdir -p "$OUT_DIR"

log() { echo "kv-accuracy-bench: $*" >&2; }

[ -x "$MOENGINE" ] || "$ROOT/scripts/build.sh" moengine
DUMP=${LLAMA_DUMP_LOGITS:-$("$ROOT/scripts/llamacpp.sh" paths | sed -n 's/^LLAMA_DUMP_LOGITS=//p')}
[ -x "$DUMP" ] || { log "no dump_logits (run scripts/llamacpp.sh build)"; exit 1; }
ids=$(awk -v n="$PROMPT_LEN" 'BEGIN { s = 12345; for (i = 0; i < n; ++i) { s = (s * 1103515245 + 12345) % 2147483648;
  printf "%s%d", (i ? "," : ""), int(s / 65536) % 500 } }')

for model in "${MODELS[@]}"; do
  if [ ! -f "$model" ]; then
    [ "$(basename "$model")" = mid-q8_0.gguf ] || { log "no such model: $model"; exit 1; }
    "$MOENGINE" gen-model --arch deepseek2 --preset mid --type q8_0 --out "$model"
  fi
  name=$(basename "$model" .gguf)
  log "$name: moengine kv-accuracy, $PROMPT_LEN tokens, $DTYPES"
  "$MOENGINE" bench kv-accuracy --model "$model" --prompt-len "$PROMPT_LEN" --gen 1 --prompt-ids "$ids" --dtypes "$DTYPES" \
    --threads "$THREADS" --json >"$OUT_DIR/$name-moengine.json"
  for k in f32 $LLAMA_KV; do
    log "$name: llama.cpp logits, cache $k"
    fa=off
    case $k in q*) fa=on ;; esac
    "$DUMP" --model "$model" --prompt-ids "$ids" --threads "$THREADS" --kv-type "$k" --flash-attn "$fa" \
      --n-ctx $((PROMPT_LEN + 64)) --logits-out "$OUT_DIR/$name-llama-$k.npy" >"$OUT_DIR/$name-llama-$k.json" 2>"$OUT_DIR/$name-llama-$k.log"
  done
  for k in $LLAMA_KV; do
    python3 "$ROOT/tools/llamacpp/kl_divergence.py" "$OUT_DIR/$name-llama-f32.npy" "$OUT_DIR/$name-llama-$k.npy" --json \
      >"$OUT_DIR/$name-llama-$k-kl.json"
  done
  python3 - "$OUT_DIR" "$name" "$LLAMA_KV" <<'PY'
import json, os, sys
out, name, llama_kv = sys.argv[1], sys.argv[2], sys.argv[3].split()
rows = [("moengine " + d["dtype"], d) for d in json.load(open(os.path.join(out, f"{name}-moengine.json")))["dtypes"]]
rows += [("llama.cpp " + k, json.load(open(os.path.join(out, f"{name}-llama-{k}-kl.json")))) for k in llama_kv]
print(f"\n{name}: KL(f32 KV || dtype KV) of the next-token distribution, each engine against its own f32 run\n")
print("| engine, KV dtype | mean KL | p99 KL | max KL | top-1 = f32 |")
print("|---|---|---|---|---|")
for label, r in rows:
    print(f"| {label} | {r['kl_mean']:.3g} | {r['kl_p99']:.3g} | {r['kl_max']:.3g} | {100 * r['top1_agreement']:.2f}% |")
PY
done
