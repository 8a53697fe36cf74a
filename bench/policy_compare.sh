#!/usr/bin/env bash
# bench/policy_compare.sh — the proxy's routing policies side by side on a workload with
# shared system prompts and mixed prompt lengths, 2 prefill + 2 decode instances, in one run.
#
# usage: bench/policy_compare.sh
#
# For each policy in POLICIES: a fresh 2P2D topology from `moengine launch` (new processes,
# so every prefix cache starts empty), the same `bench serve --dataset generated-shared-prefix`
# run against the proxy (same prompts, same arrival times), the prefill instances' prefix
# cache counters read before and after, then everything stopped before the next policy.
# Prints one markdown table: goodput under the TTFT/TPOT SLO, TTFT and TPOT p50/p99, the
# prefix hit rate (prompt tokens found cached over prompt tokens looked up, both P
# instances, this run only) and how the prefills split between the two P instances.
#
# The workload and why (defaults; each an environment variable):
# - Model: the generated tiny DeepSeek-V2 shape (q8_0, seed 1; 4096-token context). On one
#   thread of this 2-vCPU machine it prefills a 512-token prompt in about 40 ms and a
#   3000-token one in 0.5-0.7 s (attention grows with the square), and decodes at
#   thousands of tokens/s: prefill is the scarce resource, as in the P/D setting the
#   policies are for. The mid preset would take seconds to tens of seconds per prompt here.
# - NUM_GROUPS=8 system prompts of SYSTEM_LEN=1536 tokens, popularity Zipf ZIPF=1 (the hot
#   group gets 37% of the requests, the coldest 5%): whether a prompt finds its prefix
#   decides between a ~35 ms prefill and a ~300 ms one.
# - Questions of QUESTION_LEN=128 +- 50%, and LONG_FRACTION=10% long ones of LONG_LEN=1024
#   +- 50% (prompts up to 3072 tokens): long prefills that queue whatever is cached.
# - P_KV_GIB=0.006 GiB of KV per prefill instance: about 5,600 tokens, three system
#   prompts at most, fewer while prompts are being prefilled. Neither P can hold every
#   group's prefix (8 x 1536 = 12,288 tokens), so where a group's requests go decides the
#   hit rate. Decode instances get a pool that is never the limit (D_KV_GIB).
# - One compute thread per instance (4 on 2 vCPUs, with the proxy and the client): the
#   instances compete for the cores, as co-located instances do.
# - REQUEST_RATE=8 req/s Poisson, NUM_PROMPTS=300 (under a minute per policy). By the
#   prefill times the proxy fits in this setup (about 35 ms for a short question after a
#   cached system prompt, 0.3 s for the same prompt uncached, 0.3-0.6 s for long ones), the
#   two P instances would be busy about a quarter of the time if every system prompt were
#   found and more than all of it if none were: the policies' hit rates and balance decide
#   whether queues build. At 5 req/s every policy met the SLO for 97-100% of requests.
# - SLO: TTFT_SLO_MS=1000 (several times an uncached prefill, what queueing behind a few long
#   prompts costs) and TPOT_SLO_MS=50 (it does not bind here: the tiny model decodes in
#   about a millisecond a token, so TTFT is what separates the policies).
#
# env: POLICIES ("round_robin least_load power_of_two cache_aware cost"), NUM_PROMPTS (300),
#      REQUEST_RATE (8), SEED (1), NUM_GROUPS (8), SYSTEM_LEN (1536), QUESTION_LEN (128),
#      QUESTION_RANGE (0.5), LONG_LEN (1024), LONG_FRACTION (0.1), ZIPF (1), OUTPUT_LEN (64),
#      TTFT_SLO_MS (1000), TPOT_SLO_MS (50), P_KV_GIB (0.006), D_KV_GIB (0.25), THREADS (1),
#      KV_TRANSPORT (ucx), PORT (18500: the proxy; P on PORT+1, PORT+2, D on PORT+3, PORT+4),
#      MOENGINE (build/moengine), OUT_DIR (.cache/bench-policy/<UTC time>),
#      READY_TIMEOUT (120 s for the topology to start), STOP_TIMEOUT (20 s for it to stop).
# stdout: the table (also OUT_DIR/summary.md). OUT_DIR/results.json has every policy's
# summary; per policy: POLICY.json (bench serve's result, per request), POLICY/ (the
# topology file, every process's log, the proxy's access log, metrics and final /health with
# its fitted prefill latency models).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
POLICIES=${POLICIES:-"round_robin least_load power_of_two cache_aware cost"}
NUM_PROMPTS=${NUM_PROMPTS:-300}
REQUEST_RATE=${REQUEST_RATE:-8}
SEED=${SEED:-1}
NUM_GROUPS=${NUM_GROUPS:-8}
SYSTEM_LEN=${SYSTEM_LEN:-1536}
QUESTION_LEN=${QUESTION_LEN:-128}
QUESTION_RANGE=${QUESTION_RANGE:-0.5}
LONG_LEN=${LONG_LEN:-1024}
LONG_FRACTION=${LONG_FRACTION:-0.1}
ZIPF=${ZIPF:-1}
OUTPUT_LEN=${OUTPUT_LEN:-64}
TTFT_SLO_MS=${TTFT_SLO_MS:-1000}
TPOT_SLO_MS=${TPOT_SLO_MS:-50}
P_KV_GIB=${P_KV_GIB:-0.006}
D_KV_GIB=${D_KV_GIB:-0.25}
THREADS=${THREADS:-1}
KV_TRANSPORT=${KV_TRANSPORT:-ucx}
PORT=${PORT:-18500}
MOENGINE=${MOENGINE:-$ROOT/build/moengine}
OUT_DIR=${OUT_DIR:-$ROOT/.cache/bench-policy/$(date -u +%Y%m%d-%H%M%S)}
READY_TIMEOUT=${READY_TIMEOUT:-120}
STOP_TIMEOUT=${STOP_TIMEOUT:-20}
PROXY_URL="http://127.0.0.1:$PORT"
P_URLS=("http://127.0.0.1:$((PORT + 1))" "http://127.0.0.1:$((PORT + 2))")

log() { echo "policy_compare: $*" >&2; }
die() { echo "policy_compare: ERROR: $*" >&2; exit 1; }

[ -x "$MOENGINE" ] || die "$MOENGINE not found; build it first (scripts/build.sh)"
command -v node >/dev/null || die "node is needed to read the JSON results (scripts/setup.sh installs it)"
command -v curl >/dev/null || die "curl is needed to read the instances' metrics"
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)

LAUNCH_PID=
BENCH_PID=
# launch stops its children on SIGTERM, and they die with it (PR_SET_PDEATHSIG) even when
# it has to be killed, so stopping launch leaves nothing running.
stop_topology() {
  [ -n "$LAUNCH_PID" ] || return 0
  kill -TERM "$LAUNCH_PID" 2>/dev/null || true
  for _ in $(seq $((STOP_TIMEOUT * 10))); do
    kill -0 "$LAUNCH_PID" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$LAUNCH_PID" 2>/dev/null || true
  wait "$LAUNCH_PID" 2>/dev/null || true
  LAUNCH_PID=
}
# The client runs in the background so that a signal reaches this script at once (bash
# waits for a foreground child before handling one), and is stopped with the rest.
stop_all() {
  [ -z "$BENCH_PID" ] || kill "$BENCH_PID" 2>/dev/null || true
  stop_topology
}
trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

write_topology() {
  cat >"$1/topology.yaml" <<EOF
# Written by bench/policy_compare.sh for the '$2' run.
model:
  generate: {arch: deepseek2, preset: tiny, type: q8_0, seed: 1}
  name: tiny
defaults:
  host: 127.0.0.1
  threads: $THREADS
  kv_transport: $KV_TRANSPORT
instances:
  - {name: prefill, role: prefill, count: 2, port: $((PORT + 1)), args: [--kv-cache-memory, $P_KV_GIB]}
  - {name: decode, role: decode, count: 2, port: $((PORT + 3)), args: [--kv-cache-memory, $D_KV_GIB]}
proxy:
  host: 127.0.0.1
  port: $PORT
  policy: $2
  args: [--access-log, $1/access.log]
timeouts: {ready_s: $READY_TIMEOUT, stop_s: 10}
EOF
}

# start_topology DIR POLICY: until launch says it is ready (every instance and the proxy healthy).
start_topology() {
  "$MOENGINE" launch "$1/topology.yaml" --log-dir "$1" >"$1/launch.out" 2>&1 &
  LAUNCH_PID=$!
  for _ in $(seq $((READY_TIMEOUT * 2 * 10))); do
    grep -q '^launch: ready on' "$1/launch.out" && return
    kill -0 "$LAUNCH_PID" 2>/dev/null || break
    sleep 0.1
  done
  tail -n 20 "$1/launch.out" >&2
  die "the 2P2D topology for '$2' did not become ready (see $1)"
}

# prefix_counters: "hits queries", summed over the P instances.
prefix_counters() {
  local hits=0 queries=0 metrics
  for url in "${P_URLS[@]}"; do
    metrics=$(curl -sf --max-time 5 "$url/metrics") || die "cannot read $url/metrics"
    hits=$((hits + $(awk '/^moengine:prefix_cache_hits_total/ { s += $NF } END { printf "%d", s }' <<<"$metrics")))
    queries=$((queries + $(awk '/^moengine:prefix_cache_queries_total/ { s += $NF } END { printf "%d", s }' <<<"$metrics")))
  done
  echo "$hits $queries"
}

run_policy() {
  local policy=$1 dir="$OUT_DIR/$1" before after
  mkdir -p "$dir"
  # The proxy and launch append to their logs; a rerun into the same OUT_DIR starts afresh.
  rm -f "$dir"/*.log "$dir/launch.out"
  write_topology "$dir" "$policy"
  log "$policy: starting 2P2D"
  start_topology "$dir" "$policy"
  before=$(prefix_counters)
  log "$policy: $NUM_PROMPTS requests at $REQUEST_RATE req/s (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  "$MOENGINE" bench serve --base-url "$PROXY_URL" --endpoint /v1/completions --dataset generated-shared-prefix \
    --gsp-num-groups "$NUM_GROUPS" --gsp-system-prompt-len "$SYSTEM_LEN" --gsp-question-len "$QUESTION_LEN" \
    --gsp-question-range-ratio "$QUESTION_RANGE" --gsp-long-question-len "$LONG_LEN" \
    --gsp-long-question-fraction "$LONG_FRACTION" --gsp-zipf "$ZIPF" --output-len "$OUTPUT_LEN" --ignore-eos \
    --temperature 0 --num-prompts "$NUM_PROMPTS" --request-rate "$REQUEST_RATE" --seed "$SEED" \
    --goodput "ttft:$TTFT_SLO_MS" "tpot:$TPOT_SLO_MS" --percentiles 50,99 --save-detailed \
    --result-file "$OUT_DIR/$policy.json" >"$dir/bench.txt" 2>"$dir/bench.err" &
  BENCH_PID=$!
  wait "$BENCH_PID" || { tail -n 5 "$dir/bench.err" >&2; die "bench serve failed for '$policy'"; }
  BENCH_PID=
  after=$(prefix_counters)
  curl -sf --max-time 5 "$PROXY_URL/metrics" >"$dir/proxy-metrics.txt" || true
  curl -sf --max-time 5 "$PROXY_URL/health" >"$dir/proxy-health.json" || true
  echo "$before $after $(cut -d' ' -f1 /proc/loadavg)" >"$dir/counters.txt"
  stop_topology
}

for policy in $POLICIES; do run_policy "$policy"; done

# One row per policy from its bench result, its prefix counters and its access log (which
# P took each prefill), with the settings, into results.json.
node - "$OUT_DIR" "$POLICIES" NUM_PROMPTS="$NUM_PROMPTS" REQUEST_RATE="$REQUEST_RATE" SEED="$SEED" \
  NUM_GROUPS="$NUM_GROUPS" SYSTEM_LEN="$SYSTEM_LEN" QUESTION_LEN="$QUESTION_LEN" QUESTION_RANGE="$QUESTION_RANGE" \
  LONG_LEN="$LONG_LEN" LONG_FRACTION="$LONG_FRACTION" ZIPF="$ZIPF" OUTPUT_LEN="$OUTPUT_LEN" \
  TTFT_SLO_MS="$TTFT_SLO_MS" TPOT_SLO_MS="$TPOT_SLO_MS" P_KV_GIB="$P_KV_GIB" THREADS="$THREADS" <<'EOF'
const fs = require("fs"), path = require("path");
const [dir, policies] = [process.argv[2], process.argv[3].split(/\s+/).filter(Boolean)];
const settings = Object.fromEntries(process.argv.slice(4).map(kv => kv.split("=")));
const rows = policies.map(policy => {
  const r = JSON.parse(fs.readFileSync(path.join(dir, policy + ".json"), "utf8"));
  const [h0, q0, h1, q1, load] = fs.readFileSync(path.join(dir, policy, "counters.txt"), "utf8").trim().split(/\s+/).map(Number);
  const split = {};
  for (const line of fs.readFileSync(path.join(dir, policy, "access.log"), "utf8").split("\n")) {
    if (!line) continue;
    for (const e of JSON.parse(line).events || [])
      if (e.leg === "prefill" && e.event === "routed") split[e.instance] = (split[e.instance] || 0) + 1;
  }
  return {policy, completed: r.completed, failed: r.failed, good_requests: r.good_requests,
          request_goodput: r.request_goodput, goodput_fraction: r.good_requests / r.num_prompts,
          p50_ttft_ms: r.p50_ttft_ms, p99_ttft_ms: r.p99_ttft_ms, p50_tpot_ms: r.p50_tpot_ms, p99_tpot_ms: r.p99_tpot_ms,
          prefix_hit_rate: q1 > q0 ? (h1 - h0) / (q1 - q0) : null, prefill_routings: split, load_average_after: load};
});
fs.writeFileSync(path.join(dir, "results.json"), JSON.stringify({settings, policies: rows}, null, 2) + "\n");
EOF
{
  echo "2P2D, tiny q8_0, $THREADS thread(s) per instance, P KV $P_KV_GIB GiB; $NUM_PROMPTS requests at $REQUEST_RATE req/s" \
    "(seed $SEED): $NUM_GROUPS system prompts of $SYSTEM_LEN tokens (Zipf $ZIPF), questions $QUESTION_LEN +-" \
    "$QUESTION_RANGE, $LONG_FRACTION of them $LONG_LEN; $OUTPUT_LEN output tokens; SLO TTFT $TTFT_SLO_MS ms, TPOT $TPOT_SLO_MS ms"
  echo
  echo "| policy | completed | goodput req/s | met SLO | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | prefix hit rate | prefills P0/P1 |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  node -e 'const {policies} = require(process.argv[1]); const p1 = process.argv[2], p2 = process.argv[3];
    const f = (x, d) => x == null ? "-" : x.toFixed(d);
    for (const r of policies)
      console.log(`| ${r.policy} | ${r.completed} | ${f(r.request_goodput, 2)} | ${f(100 * r.goodput_fraction, 1)}% | ` +
                  `${f(r.p50_ttft_ms, 0)} | ${f(r.p99_ttft_ms, 0)} | ${f(r.p50_tpot_ms, 2)} | ${f(r.p99_tpot_ms, 2)} | ` +
                  `${r.prefix_hit_rate == null ? "-" : f(100 * r.prefix_hit_rate, 1) + "%"} | ` +
                  `${r.prefill_routings[p1] || 0}/${r.prefill_routings[p2] || 0} |`);' \
    "$OUT_DIR/results.json" prefill-0 prefill-1
} | tee "$OUT_DIR/summary.md"
log "results in $OUT_DIR"
