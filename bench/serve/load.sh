#!/usr/bin/env bash
# Serving load numbers of issue 6 (docs/performance.md, "Serving"): one `llmrt serve` of a
# TinyLlama-1.1B-shaped plan, driven by `llmrt-bench serve`:
#   1. single stream      1 client, SINGLE_REQUESTS requests      -> TPOT, generation tok/s
#   2. CLIENTS clients    CLIENTS at once, 2 x CLIENTS requests   -> aggregate tok/s, p99 TPOT
#   3. overload           Poisson arrivals at 4x the request rate phase 2 sustained, no
#                         concurrency cap, --accept-429           -> every request 200 or 429
# then checks that KV usage is back to 0. /metrics is scraped around phases 1 and 2 for the
# engine's own figures: decode steps (mean decode batch, step time, achieved bandwidth), which
# say what limits the aggregate (step time at batch 1 vs batch CLIENTS), and where the engine
# thread's time goes (model vs sampling/outputs vs the rest).
#
# Workload (every phase): prompts of INPUT_MIN..INPUT_MAX tokens (uniform, fixed seed, token-id
# prompts), outputs of exactly OUTPUT_LEN tokens (ignore_eos), greedy, streamed.
#
#   bash bench/serve/load.sh [BUILD_DIR (build)] [WORK_DIR (/tmp/llmrt-load)] [PLAN]
#   env: PLAN=(an existing plan; default: synthesize PRESET at DTYPE and compile it)
#        PRESET=tinyllama-1.1b DTYPE=f16 THREADS=2 CLIENTS=16 INPUT_MIN=32 INPUT_MAX=128
#        OUTPUT_LEN=128 SINGLE_REQUESTS=3 OVERLOAD_REQUESTS=48 MAX_BATCHED_TOKENS=512
#        MEM_BANDWIDTH_GBS=(for the MBU gauge)
# Prints the docs/performance.md table rows and ratio lines; the raw JSON of each phase stays in
# WORK_DIR. Exit 1 when a stream failed or was truncated, a request was lost, or KV usage did not
# return to 0.
set -euo pipefail

BUILD=${1:-build}
WORK=${2:-/tmp/llmrt-load}
PLAN=${3:-${PLAN:-}}
PRESET=${PRESET:-tinyllama-1.1b}
DTYPE=${DTYPE:-f16}
THREADS=${THREADS:-2}
CLIENTS=${CLIENTS:-16}
INPUT_MIN=${INPUT_MIN:-32}
INPUT_MAX=${INPUT_MAX:-128}
OUTPUT_LEN=${OUTPUT_LEN:-128}
SINGLE_REQUESTS=${SINGLE_REQUESTS:-3}
OVERLOAD_REQUESTS=${OVERLOAD_REQUESTS:-48}
MAX_BATCHED_TOKENS=${MAX_BATCHED_TOKENS:-512}
LLMC=$BUILD/bin/llmc
LLMRT=$BUILD/bin/llmrt
BENCH=$BUILD/bin/llmrt-bench
mkdir -p "$WORK"

if [[ -z $PLAN ]]; then
  PLAN=$WORK/$PRESET-$DTYPE.plan
elif [[ ! -f $PLAN ]]; then
  echo "PLAN $PLAN: no such file"
  exit 1
fi
if [[ ! -f $PLAN ]]; then
  [[ -d $WORK/$PRESET-$DTYPE ]] || "$LLMC" synth --preset "$PRESET" --dtype "$DTYPE" -o "$WORK/$PRESET-$DTYPE"
  "$LLMC" compile "$WORK/$PRESET-$DTYPE" -o "$PLAN"
fi

extra=()
[[ -n ${MEM_BANDWIDTH_GBS:-} ]] && extra+=(--mem-bandwidth "$MEM_BANDWIDTH_GBS")
# --max-seqs CLIENTS runs every client at once; --max-queued CLIENTS lets the overload phase
# queue one more round before 429s.
"$LLMRT" serve "$PLAN" --port 0 --threads "$THREADS" --max-seqs "$CLIENTS" \
  --max-queued "$CLIENTS" --max-batched-tokens "$MAX_BATCHED_TOKENS" "${extra[@]}" \
  2>"$WORK/server.log" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
URL=
for _ in $(seq 1 600); do
  URL=$(grep -o 'http://[0-9.]*:[0-9]*' "$WORK/server.log" | head -1 || true)
  [[ -n $URL ]] && break
  kill -0 $SERVER 2>/dev/null || { cat "$WORK/server.log"; exit 1; }
  sleep 0.2
done
[[ -n $URL ]] || { echo "the server did not start"; exit 1; }

# Request shapes: prompt lengths uniform in [INPUT_MIN, INPUT_MAX] from a fixed seed (the same
# list in every run), every output OUTPUT_LEN tokens.
python3 - "$WORK/lengths.txt" "$INPUT_MIN" "$INPUT_MAX" "$OUTPUT_LEN" <<'EOF'
import random, sys
path, low, high, output = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(6)
with open(path, 'w') as f:
    for _ in range(256):
        f.write('%d %d\n' % (rng.randint(low, high), output))
EOF

metric() {  # metric PAGE SERIES -> value
  grep "^$2{" "$1" | head -1 | awk '{print $NF}'
}
scrape() { curl -s "$URL/metrics" >"$WORK/$1.metrics"; }
# decode STEP_BEFORE STEP_AFTER -> "steps mean_batch ms_per_step GB/s" over the phase
decode() {
  python3 - "$WORK/$1.metrics" "$WORK/$2.metrics" <<'EOF'
import sys
def read(path):
    values = {}
    for line in open(path):
        if line.startswith('llmrt:decode_') and '{' in line:
            values[line.split('{')[0]] = float(line.split()[-1])
    return values
a, b = read(sys.argv[1]), read(sys.argv[2])
d = {k: b[k] - a.get(k, 0) for k in b}
steps = d.get('llmrt:decode_steps_total', 0)
if steps <= 0:
    print('0 0 0 0'); sys.exit()
print('%d %.2f %.1f %.2f' % (steps, d['llmrt:decode_sequences_total'] / steps,
                             1e3 * d['llmrt:decode_seconds_total'] / steps,
                             d['llmrt:decode_bytes_total'] / d['llmrt:decode_seconds_total'] / 1e9))
EOF
}
# engine BEFORE AFTER -> "steps ms_per_step model_ms sample_ms other_ms" over the phase
engine() {
  python3 - "$WORK/$1.metrics" "$WORK/$2.metrics" <<'EOF'
import sys
def read(path):
    values = {}
    for line in open(path):
        if line.startswith('llmrt:') and '{' in line:
            values[line.split('{')[0]] = float(line.split()[-1])
    return values
a, b = read(sys.argv[1]), read(sys.argv[2])
d = {k: b[k] - a.get(k, 0) for k in b}
steps = d.get('llmrt:engine_steps_total', 0) or 1
step, model, sample = (1e3 * d.get('llmrt:engine_%s_seconds_total' % k, 0) / steps
                       for k in ('step', 'model', 'sample'))
print('%d %.1f %.1f %.2f %.2f' % (steps, step, model, sample, step - model - sample))
EOF
}
bench() {  # bench NAME ARGS...
  local name=$1; shift
  "$BENCH" serve --url "$URL" --lengths "$WORK/lengths.txt" --json "$@" >"$WORK/$name.json" || true
}
field() { python3 -c "import json,sys; d=json.load(open('$WORK/$1.json')); print(eval('d' + sys.argv[1]))" "$2"; }

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
# A warm-up request: page the weights in and fill the allocator before anything is timed.
"$BENCH" serve --url "$URL" --num-requests 1 --concurrency 1 --input-len 8 --output-len 4 >/dev/null || true

scrape single.before
bench single --num-requests "$SINGLE_REQUESTS" --concurrency 1
scrape single.after
bench concurrent --num-requests $((2 * CLIENTS)) --concurrency "$CLIENTS"
scrape concurrent.after

rate=$(field concurrent '["request_throughput"]')
overload_rate=$(python3 -c "print(4 * $rate)")
bench overload --num-requests "$OVERLOAD_REQUESTS" --concurrency "$OVERLOAD_REQUESTS" \
  --rate "$overload_rate" --arrivals poisson --accept-429 --timeout 1800

# Idle afterwards: KV usage back to 0 (cancelled or finished sequences free their blocks).
kv=1
for _ in $(seq 1 100); do
  scrape final
  kv=$(metric "$WORK/final.metrics" llmrt:kv_cache_usage_perc)
  running=$(metric "$WORK/final.metrics" llmrt:num_requests_running)
  [[ $kv == 0 && $running == 0 ]] && break
  sleep 0.1
done

read -r s_steps s_batch s_ms s_gbs < <(decode single.before single.after)
read -r c_steps c_batch c_ms c_gbs < <(decode single.after concurrent.after)
read -r se_steps se_ms se_model se_sample se_other < <(engine single.before single.after)
read -r ce_steps ce_ms ce_model ce_sample ce_other < <(engine single.after concurrent.after)
single_tps=$(field single '["output_token_throughput"]')
conc_tps=$(field concurrent '["output_token_throughput"]')
single_tpot=$(field single '["tpot"]["p50_ms"]')
conc_tpot99=$(field concurrent '["tpot"]["p99_ms"]')

echo
echo "Plan $(basename "$PLAN"), --threads $THREADS, prompts $INPUT_MIN-$INPUT_MAX tokens (uniform)," \
  "outputs $OUTPUT_LEN tokens, greedy, streamed, --max-batched-tokens $MAX_BATCHED_TOKENS;" \
  "load average $load_before before, $(cut -d' ' -f1-3 /proc/loadavg) after"
echo
echo "| run | requests | done | 429 | failed | gen tok/s | TTFT p50 ms | TPOT p50 ms | TPOT p99 ms | ITL p99 ms |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for run in single concurrent overload; do
  case $run in
    single) label="single stream" ;;
    concurrent) label="$CLIENTS clients" ;;
    overload) label="overload, 4x the $CLIENTS-client rate" ;;
  esac
  python3 - "$WORK/$run.json" "$label" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print('| %s | %d | %d | %d | %d | %.2f | %.0f | %.0f | %.0f | %.0f |' % (
    sys.argv[2], d['requests'], d['completed'], d.get('rejected_429', 0), d['failed'],
    d['output_token_throughput'], d['ttft']['p50_ms'], d['tpot']['p50_ms'], d['tpot']['p99_ms'],
    d['itl']['p99_ms']))
EOF
done
echo
python3 -c "print('- Aggregate / single-stream generation: **%.2fx** (target 6x). p99 TPOT at %d clients / single-stream TPOT p50: **%.2fx** (target 3x).' % ($conc_tps / $single_tps, $CLIENTS, $conc_tpot99 / $single_tpot))"
echo
echo "| phase | decode steps | mean batch | ms per decode step | bytes read per second | engine steps | ms per step | model ms | sampling+outputs ms | rest ms |"
echo "|---|---|---|---|---|---|---|---|---|---|"
echo "| single stream | $s_steps | $s_batch | $s_ms | $s_gbs GB/s | $se_steps | $se_ms | $se_model | $se_sample | $se_other |"
echo "| $CLIENTS clients | $c_steps | $c_batch | $c_ms | $c_gbs GB/s | $ce_steps | $ce_ms | $ce_model | $ce_sample | $ce_other |"
echo
echo "- After the overload: KV usage $kv, running ${running:-?}."

failed=$(( $(field single '["failed"]') + $(field concurrent '["failed"]') + $(field overload '["failed"]') ))
kill -TERM $SERVER
wait $SERVER || { echo "the server did not exit 0"; exit 1; }
trap - EXIT
[[ $failed == 0 && $kv == 0 ]] || { echo "FAILED: $failed failed requests, KV usage $kv"; exit 1; }
