#!/usr/bin/env bash
# tools/llamacpp/check_convert.sh — `moengine convert` output checked with llama.cpp.
#
# For each architecture (deepseek2 as DeepSeek-V3, qwen3moe) and type, writes a tiny
# Hugging Face checkpoint (gen-model --format hf, BF16 and FP8), converts it with
# `moengine convert` to f32, bf16 and q8_0, then loads each GGUF file in llama.cpp
# (dump_logits from scripts/llamacpp.sh) and in moengine. For f32 files, where both engines
# compute in f32, the greedy tokens must be the same and llama.cpp's logits, teacher-forced
# on moengine's tokens, within RTOL of moengine's. For bf16 and q8_0 llama.cpp rounds the
# activations too, and tiny random models turn near-ties into different tokens: those rows
# are reported (see docs/llamacpp-peer.md for the scale), a file that fails to load fails.
#
# usage: tools/llamacpp/check_convert.sh [OUT_DIR]   (default .cache/check-convert)
# env:   MOENGINE (build/moengine), RTOL (1e-4)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${1:-$ROOT/.cache/check-convert}
MOENGINE=${MOENGINE:-$ROOT/build/moengine}
RTOL=${RTOL:-1e-4}
eval "$("$ROOT/scripts/llamacpp.sh" paths)"
mkdir -p "$OUT"

prompt=1,2,3,4,5,6,7,8
status=0
for arch in deepseek2 qwen3moe; do
  for src in bf16 fp8; do
    dir="$OUT/$arch-hf-$src"
    rm -rf "$dir"
    "$MOENGINE" gen-model --arch "$arch" --preset tiny --format hf --type "$src" --out "$dir" >/dev/null 2>&1
    for type in f32 bf16 q8_0; do
      gguf="$OUT/$arch-$src-to-$type.gguf"
      "$MOENGINE" convert "$dir" --out "$gguf" --type "$type" >/dev/null 2>&1
      ours=$("$MOENGINE" generate --model "$gguf" --prompt-ids $prompt --max-tokens 8 --threads 1 --ignore-eos \
             --json --logits-out "$OUT/ours.npy" 2>/dev/null)
      ids=$(python3 -c 'import json,sys;print(",".join(map(str,json.loads(sys.argv[1])["output_ids"])))' "$ours")
      theirs=$("$LLAMA_DUMP_LOGITS" --model "$gguf" --prompt-ids $prompt --max-tokens 8 --threads 1 2>/dev/null)
      their_ids=$(python3 -c 'import json,sys;print(",".join(map(str,json.loads(sys.argv[1])["generated_ids"])))' "$theirs")
      "$LLAMA_DUMP_LOGITS" --model "$gguf" --prompt-ids $prompt --decode-ids "$ids" --threads 1 \
        --logits-out "$OUT/llama.npy" >/dev/null 2>&1
      verdict=ok
      summary=$(python3 "$ROOT/tools/llamacpp/compare_logits.py" "$OUT/llama.npy" "$OUT/ours.npy" --rtol "$RTOL" | tail -1) ||
        verdict="logits beyond $RTOL"
      [ "$ids" = "$their_ids" ] || verdict="llama.cpp's tokens: $their_ids"
      if [ "$type" = f32 ] && [ "$verdict" != ok ]; then
        verdict="FAILED: $verdict"
        status=1
      fi
      printf '%-10s %-5s -> %-5s tokens %-32s %s | %s\n' "$arch" "$src" "$type" "$ids" "$verdict" "$summary"
    done
  done
done
exit "$status"
