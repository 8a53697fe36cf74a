#!/usr/bin/env bash
# The demo: builds moengine, generates a default model (DeepSeek-V2/V3 shaped, random
# weights), runs prompts through it offline (also with speculative decoding), loads the same kind of model from a Hugging Face
# checkpoint directory (FP8) and converts it to GGUF, measures the KV transports, then starts
# two prefill instances and an expert-parallel decode group of two ranks (`serve --ep 2` under
# mpirun) behind `moengine proxy` with `moengine launch`, sends OpenAI API requests through the
# proxy (plain, streamed, and two that share a prefix), load-tests it with `moengine bench
# serve` and shows the metrics. DEMO_PRESET=mid uses the 2.6B parameter model (about 2.8 GB at
# q8_0) instead of the tiny one.
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
echo "== speculative decoding: the greedy prompt again, each step verifying 3 tokens drafted by n-gram lookup"
echo "   and then by the model's own MTP layer (written by gen-model --nextn-layers 1); the output is the same"
"$bin" generate --model "$model" --prompt "The mixture of experts model" --max-tokens 16 --ignore-eos --json \
  --speculative-config '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1}'
mtp_model="$root/models/deepseek2-$preset-$type-mtp.gguf"
[ -f "$mtp_model" ] || "$bin" gen-model --arch deepseek2 --preset "$preset" --type "$type" --nextn-layers 1 --out "$mtp_model"
"$bin" generate --model "$mtp_model" --prompt "The mixture of experts model" --max-tokens 16 --ignore-eos --json \
  --speculative-config '{"method": "mtp", "num_speculative_tokens": 3}'

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
echo "== launch: two prefill instances and a decode group of 2 expert-parallel ranks behind moengine proxy, from one file"
logs="$(mktemp -d)"
launch_pid=""
trap '[ -n "$launch_pid" ] && kill "$launch_pid" 2>/dev/null && wait "$launch_pid" 2>/dev/null; rm -rf "$logs"' EXIT
cat >"$logs/demo.yaml" <<EOF
model:
  path: $model
  name: demo
defaults:
  threads: 1
  kv_transport: ucx
  args: [--kv-cache-memory, 0.25]
instances:
  - {name: prefill, role: prefill, count: 2, port: 0}
  - {name: decode, role: decode, ep: 2, port: 0}
proxy:
  port: 0
EOF
cat "$logs/demo.yaml"
"$bin" launch "$logs/demo.yaml" --log-dir "$logs/run" >"$logs/launch.out" 2>"$logs/launch.err" &
launch_pid=$!
url=""
for _ in $(seq 600); do
  url="$(grep -o 'launch: ready on http://[0-9.]*:[0-9]*' "$logs/launch.out" | grep -o 'http://.*' || true)"
  [ -n "$url" ] && break
  kill -0 "$launch_pid" 2>/dev/null || { cat "$logs/launch.err" >&2; echo "demo: launch exited" >&2; exit 1; }
  sleep 0.2
done
[ -n "$url" ] || { cat "$logs/launch.err" >&2; echo "demo: launch did not get ready" >&2; exit 1; }
cat "$logs/launch.out"
instance_url() { awk -v n="$1" '$1 == n { print $4 }' "$logs/launch.out"; }
prefill="$(instance_url prefill-0)"
decode="$(instance_url decode-0-rank0)"

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
echo "== two requests sharing a long prefix: the second goes to the prefill instance that cached it"
shared="$(printf 'The experts of a mixture each take the tokens routed to them. %.0s' $(seq 12))"
for tail in "First question." "Second question."; do
  curl -sS "$url/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"model\": \"demo\", \"prompt\": \"$shared $tail\", \"max_tokens\": 4, \"temperature\": 0}" >/dev/null
  sleep 0.3
done
for name in prefill-0 prefill-1; do
  echo "$name: $(curl -sS "$(instance_url "$name")/metrics" | grep -E '^moengine:prefix_cache_hits_total' | awk '{print "prefix-cache hits", $2}')"
done

echo
echo "== bench serve through the proxy: 32 requests, 8 at a time"
"$bin" bench serve --base-url "$url" --model demo --dataset random --input-len 64 --output-len 32 \
  --num-prompts 32 --max-concurrency 8

echo
echo "== GET /metrics (excerpts): a prefill instance, rank 0 of the decode group, the proxy"
curl -sS "$prefill/metrics" | grep -E '^moengine:(prompt_tokens_total|kv_leases_(active|released_total|expired_total)|num_kv_blocks_used)'
curl -sS "$decode/metrics" | grep -E '^moengine:(generation_tokens_total|kv_transfer_(bytes_total|pulls_total|duration_seconds_(sum|count))|kv_remote_loads_total|num_kv_blocks_used)'
curl -sS "$url/metrics" | grep -E '^moengine:proxy_(group_up|group_ranks|requests_total|time_to_first_token_seconds_(sum|count)|routing_decisions_total)'

echo
echo "== GET /dashboard/state (what $url/dashboard draws): instances and the last periods"
curl -sS "$url/dashboard/state" | node -e '
  const s = JSON.parse(require("fs").readFileSync(0, "utf8"));
  for (const i of s.instances)
    console.log(`${i.name.padEnd(16)} ${i.role.padEnd(8)} ${i.routable ? "up" : "down"}  running ${i.reported.running}  KV ${i.reported.kv_tokens}/${i.reported.kv_capacity_tokens} tokens`);
  const ms = v => v == null ? "-" : (1000 * v).toFixed(1) + " ms";
  for (const p of s.window.series.slice(-4))
    console.log(`t=${p.t_s}s  ${p.requests} requests  TTFT p50 ${ms(p.ttft_s.p50)} p99 ${ms(p.ttft_s.p99)}  TPOT p50 ${ms(p.tpot_s.p50)}`);'
