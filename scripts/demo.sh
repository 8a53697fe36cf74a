#!/usr/bin/env bash
# The demo: builds moengine, generates a default model (DeepSeek-V2/V3 shaped, random
# weights), runs prompts through it offline, loads the same kind of model from a Hugging Face
# checkpoint directory (FP8) and converts it to GGUF, then starts `moengine serve` on it, sends
# OpenAI API requests (plain and streamed), load-tests it with `moengine bench serve` and
# shows the server's metrics. DEMO_PRESET=mid uses the 2.6B parameter model (about 2.8 GB
# at q8_0) instead of the tiny one.
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
echo "== checkpoints: a Hugging Face directory (tiny, FP8 with block scales) served as it is, and converted to GGUF"
hf="$root/models/deepseek2-tiny-hf-fp8"
[ -f "$hf/config.json" ] || "$bin" gen-model --arch deepseek2 --preset tiny --format hf --type fp8 --out "$hf"
"$bin" generate --model "$hf" --weight-type fp8 --prompt "The mixture of experts model" --max-tokens 8 --ignore-eos --json
"$bin" convert "$hf" --out "$root/models/deepseek2-tiny-from-hf-q8_0.gguf" --type q8_0

echo
echo "== bench model: prefill and decode speed, and the decode roofline"
"$bin" bench model --model "$model" --pp 128 --tg 32 --reps 2

echo
echo "== serve: one engine instance with the OpenAI API"
log="$(mktemp)"
"$bin" serve --model "$model" --served-model-name demo --port 0 >"$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -f "$log"' EXIT
url=""
for _ in $(seq 600); do
  url="$(grep -o 'http://[0-9.]*:[0-9]*' "$log" | head -1 || true)"
  [ -n "$url" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$log"; echo "demo: the server exited" >&2; exit 1; }
  sleep 0.2
done
[ -n "$url" ] || { cat "$log"; echo "demo: the server did not start" >&2; exit 1; }
echo "server at $url"

echo
echo "== POST /v1/chat/completions"
curl -sS "$url/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model": "demo", "messages": [{"role": "user", "content": "What is a mixture of experts?"}], "max_tokens": 16, "temperature": 0}'
echo

echo
echo "== POST /v1/completions, streamed (server-sent events)"
curl -sS -N "$url/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model": "demo", "prompt": "The experts", "max_tokens": 6, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}}'

echo
echo "== bench serve: 32 requests, 8 at a time"
"$bin" bench serve --base-url "$url" --model demo --dataset random --input-len 64 --output-len 32 \
  --num-prompts 32 --max-concurrency 8

echo
echo "== GET /metrics (excerpt)"
curl -sS "$url/metrics" | grep -E '^moengine:(generation_tokens_total|prompt_tokens_total|num_requests_running|kv_cache_usage_perc|prefix_cache_(queries|hits)_total|time_to_first_token_seconds_(sum|count))'
