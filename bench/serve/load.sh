#!/usr/bin/env bash
# Serving load numbers of issue 6 (docs/performance.md, "Serving"): one `llmrt serve` of a
# TinyLlama-1.1B-shaped plan, driven by `llmrt-bench serve`:
#   1. single stream      1 client, SINGLE_REQUESTS requests      -> TPOT, generation tok/s
#   2. CLIENTS clients    CLIENTS at once, 2 x CLIENTS requests   -> aggregate tok/s, p99 TPOT
#   3. overload           Poisson arrivals at 4x the request rate phase 2 sustained, no
#                         concurrency cap, --accept-429           -> every request 200 or 429
# then checks that KV usage is back to 0. /metrics is scraped around phases 1 and 2 for the
# engine's own decode-step figures (mean decode batch, step time, achieved bandwidth), which
# say what limits the aggregate: step time at batch 1 vs batch CLIENTS.
#
#   bash bench/serve/load.sh [BUILD_DIR (build)] [WORK_DIR (/tmp/llmrt-load)]
#   env: PRESET=tinyllama-1.1b DTYPE=f16 THREADS=2 CLIENTS=16 INPUT_LEN=32 OUTPUT_LEN=64
#        SINGLE_REQUESTS=3 OVERLOAD_REQUESTS=48 MEM_BANDWIDTH_GBS=(for the MBU gauge)
#        PLAN=(an existing plan instead of synth + compile)
# Prints a markdown table; the raw JSON of each phase stays in WORK_DIR. Exit 1 when a stream
# failed or was truncated, a request was lost, or KV usage did not return to 0.
set -euo pipefail

BUILD=${1:-build}
WORK=${2:-/tmp/llmrt-load}
PRESET=${PRESET:-tinyllama-1.1b}
DTYPE=${DTYPE:-f16}
THREADS=${THREADS:-2}
CLIENTS=${CLIENTS:-16}
INPUT_LEN=${INPUT_LEN:-32}
OUTPUT_LEN=${OUTPUT_LEN:-64}
SINGLE_REQUESTS=${SINGLE_REQUESTS:-3}
OVERLOAD_REQUESTS=${OVERLOAD_REQUESTS:-48}
LLMC=$BUILD/bin/llmc
LLMRT=$BUILD/bin/llmrt
BENCH=$BUILD/bin/llmrt-bench
mkdir -p "$WORK"

PLAN=${PLAN:-$WORK/$PRESET-$DTYPE.plan}
if [[ ! -f $PLAN ]]; then
  [[ -d $WORK/$PRESET-$DTYPE ]] || "$LLMC" synth --preset "$PRESET" --dtype "$DTYPE" -o "$WORK/$PRESET-$DTYPE"
  "$LLMC" compile "$WORK/$PRESET-$DTYPE" -o "$PLAN"
fi

extra=()
[[ -n ${MEM_BANDWIDTH_GBS:-} ]] && extra+=(--mem-bandwidth "$MEM_BANDWIDTH_GBS")
# --max-seqs CLIENTS runs every client at once; --max-queued CLIENTS lets the overload phase
# queue one more round before 429s.
"$LLMRT" serve "$PLAN" --port 0 --threads "$THREADS" --max-seqs "$CLIENTS" \
  --max-queued "$CLIENTS" --max-batched-tokens 512 "${extra[@]}" 2>"$WORK/server.log" &
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
bench() {  # bench NAME ARGS...
  local name=$1; shift
  "$BENCH" serve --url "$URL" --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --json "$@" \
    >"$WORK/$name.json" || true
}
field() { python3 -c "import json,sys; d=json.load(open('$WORK/$1.json')); print(eval('d' + sys.argv[1]))" "$2"; }

echo "load: $(uptime)" >&2
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
single_tps=$(field single '["output_token_throughput"]')
conc_tps=$(field concurrent '["output_token_throughput"]')
single_tpot=$(field single '["tpot"]["p50_ms"]')
conc_tpot99=$(field concurrent '["tpot"]["p99_ms"]')

echo
echo "Plan: $(basename "$PLAN"), $THREADS threads, prompts $INPUT_LEN tokens, outputs $OUTPUT_LEN tokens"
echo
echo "| run | requests | done | 429 | failed | gen tok/s | TTFT p50 ms | TPOT p50 ms | TPOT p99 ms | ITL p99 ms |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for run in single concurrent overload; do
  python3 - "$WORK/$run.json" "$run" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print('| %s | %d | %d | %d | %d | %.2f | %.0f | %.0f | %.0f | %.0f |' % (
    sys.argv[2], d['requests'], d['completed'], d.get('rejected_429', 0), d['failed'],
    d['output_token_throughput'], d['ttft']['p50_ms'], d['tpot']['p50_ms'], d['tpot']['p99_ms'],
    d['itl']['p99_ms']))
EOF
done
echo
python3 -c "print('aggregate / single-stream generation: %.2fx; p99 TPOT (%d clients) / single TPOT: %.2fx' % ($conc_tps / $single_tps, $CLIENTS, $conc_tpot99 / $single_tpot))"
echo "decode steps, single stream: $s_steps steps, mean batch $s_batch, $s_ms ms/step, $s_gbs GB/s read"
echo "decode steps, $CLIENTS clients: $c_steps steps, mean batch $c_batch, $c_ms ms/step, $c_gbs GB/s read"
echo "after the overload: KV usage $kv, running ${running:-?}"

failed=$(( $(field single '["failed"]') + $(field concurrent '["failed"]') + $(field overload '["failed"]') ))
kill -TERM $SERVER
wait $SERVER || { echo "the server did not exit 0"; exit 1; }
trap - EXIT
[[ $failed == 0 && $kv == 0 ]] || { echo "FAILED: $failed failed requests, KV usage $kv"; exit 1; }
