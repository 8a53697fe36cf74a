#!/usr/bin/env bash
# bench/kv_dtype_vs_llamacpp.sh — decode speed at a context depth for each KV cache dtype,
# `moengine bench model --context` against `llama-bench -d` with its f16 and q8_0 caches,
# one after the other in one session (never both at once: they would share the cores).
#
# usage: bench/kv_dtype_vs_llamacpp.sh [MODEL.gguf ...]
#   MODEL defaults to models/mid-q8_0.gguf (generated with gen-model when missing).
#
# env: DEPTHS (4096,16384,32704), TG (16 tokens decoded at each depth), THREADS (2),
#      DTYPES (moengine's: "f32 bf16 f16 fp8_e4m3 q8_0"), LLAMA_KV (llama.cpp's cache
#      types, flash attention on: "f16 q8_0"; empty: moengine only), LLAMA_DEPTHS (DEPTHS:
#      llama-bench prefills each depth before it decodes, so deep ones take minutes),
#      MOENGINE (build/moengine), LLAMA_BENCH (from scripts/llamacpp.sh paths),
#      OUT_DIR (.cache/bench-kv-dtype/<UTC time>).
# stdout: one table per model, tokens/s by depth, and each moengine run's fraction of the
# bandwidth roofline (weights + KV read per token); the JSON of every run is in OUT_DIR.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEPTHS=${DEPTHS:-4096,16384,32704}
TG=${TG:-16}
THREADS=${THREADS:-2}
DTYPES=${DTYPES:-"f32 bf16 f16 fp8_e4m3 q8_0"}
LLAMA_KV=${LLAMA_KV-"f16 q8_0"}
LLAMA_DEPTHS=${LLAMA_DEPTHS:-$DEPTHS}
MOENGINE=${MOENGINE:-$ROOT/build/moengine}
OUT_DIR=${OUT_DIR:-$ROOT/.cache/bench-kv-dtype/$(date -u +%Y%m%d-%H%M%S)}
MODELS=("$@")
[ ${#MODELS[@]} -gt 0 ] || MODELS=("$ROOT/models/mid-q8_0.gguf")
mkdir -p "$OUT_DIR"

log() { echo "kv-dtype-bench: $*" >&2; }

[ -x "$MOENGINE" ] || "$ROOT/scripts/build.sh" moengine
if [ -n "$LLAMA_KV" ]; then
  LLAMA_BENCH=${LLAMA_BENCH:-$("$ROOT/scripts/llamacpp.sh" paths | sed -n 's/^LLAMA_BENCH=//p')}
  [ -x "$LLAMA_BENCH" ] || { log "no llama-bench (run scripts/llamacpp.sh build, or LLAMA_KV= for moengine only)"; exit 1; }
fi
log "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $THREADS threads; results in $OUT_DIR"

for model in "${MODELS[@]}"; do
  if [ ! -f "$model" ]; then
    [ "$(basename "$model")" = mid-q8_0.gguf ] || { log "no such model: $model"; exit 1; }
    "$MOENGINE" gen-model --arch deepseek2 --preset mid --type q8_0 --out "$model"
  fi
  name=$(basename "$model" .gguf)
  for d in $DTYPES; do
    log "$name: moengine, KV $d, depths $DEPTHS"
    "$MOENGINE" bench model --model "$model" --pp 64 --tg "$TG" --reps 1 --threads "$THREADS" --context "$DEPTHS" \
      --kv-cache-dtype "$d" --json >"$OUT_DIR/$name-moengine-$d.json"
  done
  for k in $LLAMA_KV; do
    log "$name: llama-bench, cache $k, depths $LLAMA_DEPTHS"
    "$LLAMA_BENCH" -m "$model" -t "$THREADS" -p 0 -n "$TG" -d "$LLAMA_DEPTHS" -r 1 -fa 1 -ctk "$k" -ctv "$k" -o json \
      >"$OUT_DIR/$name-llama-$k.json" 2>"$OUT_DIR/$name-llama-$k.log"
  done
  python3 - "$OUT_DIR" "$name" "$DTYPES" "$LLAMA_KV" <<'EOF'
import json, sys, os
out, name, dtypes, llama_kv = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4].split()
rows = {}  # depth -> {column: text}
cols = []
for d in dtypes:
    j = json.load(open(os.path.join(out, f"{name}-moengine-{d}.json")))
    col = f"moengine {d}"
    cols.append(col)
    for r in j["decode_at_depth"]:
        rows.setdefault(r["context"], {})[col] = f'{r["tokens_per_s"]:.2f} ({100 * r["roofline_fraction"]:.0f}%)'
for k in llama_kv:
    col = f"llama.cpp {k}"
    cols.append(col)
    for r in json.load(open(os.path.join(out, f"{name}-llama-{k}.json"))):
        rows.setdefault(r["n_depth"], {})[col] = f'{r["avg_ts"]:.2f}'
print(f"\n{name}: decode tok/s after N positions (moengine: % of the roofline of weights + KV)\n")
print("| context | " + " | ".join(cols) + " |")
print("|---" * (len(cols) + 1) + "|")
for depth in sorted(rows):
    print(f"| {depth} | " + " | ".join(rows[depth].get(c, "-") for c in cols) + " |")
EOF
done
