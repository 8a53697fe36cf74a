#!/usr/bin/env bash
# The demo: builds moengine, generates a default model (DeepSeek-V2/V3 shaped, random
# weights), runs prompts through it offline, loads the same kind of model from a Hugging Face
# checkpoint directory (FP8) and converts it to GGUF, measures the KV transports, then starts
# a prefill and a decode instance of `moengine serve` behind `moengine proxy`, sends OpenAI API
# requests through the proxy (plain and streamed), load-tests it with `moengine bench serve`
# and shows the metrics of all three. DEMO_PRESET=mid uses the 2.6B parameter model (about 2.8 GB
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
echo "== bench kv-transfer: how fast KV moves between instances (ucx, tcp) against memcpy"
"$bin" bench kv-transfer --seconds 0.05

echo
echo "== serve: a prefill instance and a decode instance behind moengine proxy (1P1D)"
logs="$(mktemp -d)"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null; rm -rf "$logs"' EXIT
# Starts `moengine ARGS...` in the background; started_url is the URL its ready line names.
start() {
  local name="$1"
  shift
  "$bin" "$@" >"$logs/$name.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq 600); do
    local found
    found="$(grep -o 'http://[0-9.]*:[0-9]*' "$logs/$name.log" | head -1 || true)"
    [ -n "$found" ] && { started_url="$found"; return; }
    kill -0 "$pid" 2>/dev/null || { cat "$logs/$name.log" >&2; echo "demo: $name exited" >&2; exit 1; }
    sleep 0.2
  done
  cat "$logs/$name.log" >&2
  echo "demo: $name did not start" >&2
  exit 1
}
start prefill serve --model "$model" --served-model-name demo --port 0 --role prefill --kv-transport ucx
prefill="$started_url"
start decode serve --model "$model" --served-model-name demo --port 0 --role decode --kv-transport ucx
decode="$started_url"
start proxy proxy --port 0 --prefill "$prefill" --decode "$decode"
url="$started_url"
grep -h '^engine: id' "$logs/prefill.log" "$logs/decode.log"
echo "prefill at $prefill, decode at $decode, proxy at $url"

echo
echo "== POST /v1/chat/completions through the proxy (P makes the first token, D the rest)"
curl -sS "$url/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model": "demo", "messages": [{"role": "user", "content": "What is a mixture of experts?"}], "max_tokens": 16, "temperature": 0}'
echo

echo
echo "== POST /v1/completions through the proxy, streamed (server-sent events)"
curl -sS -N "$url/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model": "demo", "prompt": "The experts", "max_tokens": 6, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}}'

echo
echo "== bench serve through the proxy: 32 requests, 8 at a time"
"$bin" bench serve --base-url "$url" --model demo --dataset random --input-len 64 --output-len 32 \
  --num-prompts 32 --max-concurrency 8

echo
echo "== GET /metrics (excerpts): the prefill instance, the decode instance, the proxy"
curl -sS "$prefill/metrics" | grep -E '^moengine:(prompt_tokens_total|kv_leases_(active|released_total|expired_total)|num_kv_blocks_used)'
curl -sS "$decode/metrics" | grep -E '^moengine:(generation_tokens_total|kv_transfer_(bytes_total|pulls_total|duration_seconds_(sum|count))|kv_remote_loads_total|num_kv_blocks_used)'
curl -sS "$url/metrics" | grep -E '^moengine:proxy_(requests_total|time_to_first_token_seconds_(sum|count))'
