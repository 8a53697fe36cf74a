#!/usr/bin/env bash
# The demo: builds moengine, generates a default model (DeepSeek-V2/V3 shaped, random
# weights), runs prompts through it and benchmarks it. DEMO_PRESET=mid uses the 2.6B
# parameter model (about 2.8 GB at q8_0) instead of the tiny one.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
preset="${DEMO_PRESET:-tiny}"
type="${DEMO_TYPE:-q8_0}"
"$root/scripts/setup.sh"
"$root/scripts/build.sh" moengine
bin="$root/build/moengine"
mkdir -p "$root/models"
model="$root/models/deepseek2-$preset-$type.gguf"
[ -f "$model" ] || "$bin" gen-model --arch deepseek2 --preset "$preset" --type "$type" --out "$model"

echo
echo "== generate: greedy continuation of a text prompt (random weights: the answer is noise)"
"$bin" generate --model "$model" --prompt "The mixture of experts model" --max-tokens 16 --ignore-eos --json

echo
echo "== generate: the same from token ids, with sampling"
"$bin" generate --model "$model" --prompt-ids 300,301,302,303,304 --max-tokens 16 --ignore-eos --temperature 0.8 --seed 1 --json

echo
echo "== bench model: prefill and decode speed, and the decode roofline"
"$bin" bench model --model "$model" --pp 128 --tg 32 --reps 2
