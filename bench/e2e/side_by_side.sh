#!/usr/bin/env bash
# Side-by-side decode/prefill benchmark: llmrt vs llama.cpp on the same synthetic checkpoint.
#
#   bench/e2e/side_by_side.sh [--format f16|int8|int4] [--reps 3] [--threads 1,2]
#                             [--max-load 1.5] [--dtype f16] [-p 512] [-n 128]
#                             [--preset tinyllama-1.1b|gemma2-2b|phi3-mini|mixtral-1.5b-a0.4b|
#                                       qwen2-moe-1.5b-a0.4b|...]
#
# --format picks the pair: f16 plan vs F16 GGUF; int8 (`llmc --quant int8 --lm-head-quant int8`)
# vs Q8_0; int4 (`--quant int4 --lm-head-quant int8`, g32 symmetric) vs Q4_0 — the int8 lm_head
# is the like-for-like of llama-quantize's quantized output matrix (docs/quantization.md). MODEL,
# PLAN and GGUF may be set in the environment to reuse existing files.
#
# Needs: llmc and llmrt built in $BUILD (default build/), a CPU build of llama.cpp in $LLAMA_CPP
# (default /work/llamacpp, with build/bin/llama-bench) and its converter's Python packages
# (numpy torch safetensors sentencepiece protobuf transformers; $PYTHON, default python3). Writes everything
# under $WORK_DIR (default /tmp/llmrt-side-by-side): the synthetic checkpoint of `llmc synth
# --preset` (TinyLlama-1.1B by default), our plan, the GGUF, and results-PRESET-FORMAT.jsonl (this
# run's: one line per program, rep and thread count, with the load average at the start).
# llama.cpp and its outputs never go into the repository.
#
# The machine is shared and has 2 cores: each rep waits (up to 10 minutes) for the 1-minute load
# average to fall below --max-load, then runs llama-bench and llmrt bench back to back, so both
# see the same conditions; reps alternate which program goes first. The summary prints medians
# and our/llama.cpp ratios, and flags reps that started at a load of 1.5 or more as noisy.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$REPO/build}
LLAMA_CPP=${LLAMA_CPP:-/work/llamacpp}
WORK_DIR=${WORK_DIR:-/tmp/llmrt-side-by-side}
REPS=3
THREADS=1,2
MAX_LOAD=1.5
DTYPE=f16
FORMAT=f16
PROMPT=512
GEN=128
PRESET=tinyllama-1.1b
PYTHON=${PYTHON:-python3}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --reps) REPS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --max-load) MAX_LOAD=$2; shift 2 ;;
    --dtype) DTYPE=$2; shift 2 ;;
    --format) FORMAT=$2; shift 2 ;;
    -p) PROMPT=$2; shift 2 ;;
    -n) GEN=$2; shift 2 ;;
    --preset) PRESET=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

mkdir -p "$WORK_DIR"
case "$FORMAT" in
  f16) compile_flags=(); gguf_type="" ;;
  int8) compile_flags=(--quant int8 --lm-head-quant int8); gguf_type=Q8_0 ;;
  int4) compile_flags=(--quant int4 --lm-head-quant int8); gguf_type=Q4_0 ;;
  *) echo "--format $FORMAT: expected f16, int8 or int4" >&2; exit 2 ;;
esac
MODEL=${MODEL:-$WORK_DIR/$PRESET-$DTYPE}
FLOAT_GGUF=$WORK_DIR/$PRESET-$DTYPE.gguf
if [[ $FORMAT == f16 ]]; then
  PLAN=${PLAN:-$WORK_DIR/$PRESET-$DTYPE.plan}
  GGUF=${GGUF:-$FLOAT_GGUF}
else
  PLAN=${PLAN:-$WORK_DIR/$PRESET-$FORMAT.plan}
  GGUF=${GGUF:-$WORK_DIR/$PRESET-$gguf_type.gguf}
fi
RESULTS=$WORK_DIR/results-$PRESET-$FORMAT.jsonl

[[ -d $MODEL ]] || "$BUILD/bin/llmc" synth --preset "$PRESET" --dtype "$DTYPE" -o "$MODEL"
[[ -f $PLAN ]] || "$BUILD/bin/llmc" compile "$MODEL" -o "$PLAN" "${compile_flags[@]}" --quiet
if [[ ! -f $GGUF ]]; then
  # llama.cpp reads Gemma's and Phi-3's vocabulary from a SentencePiece model only.
  if [[ $PRESET == gemma* || $PRESET == phi3* ]] && [[ ! -f $MODEL/tokenizer.model ]]; then
    "$PYTHON" "$REPO/bench/e2e/spm_from_tokenizer_json.py" "$MODEL"
  fi
  # --model-name: llama.cpp gives models named "phi3" its Phi-3 token attributes, which look up
  # "<|endoftext|>", a token the synthetic vocabulary does not have. convert_gguf.py is the
  # converter itself, except that Qwen2-MoE reads the SentencePiece vocabulary (see there).
  [[ -f $FLOAT_GGUF ]] || "$PYTHON" "$REPO/bench/e2e/convert_gguf.py" "$LLAMA_CPP" "$MODEL" \
    --outtype "$DTYPE" --outfile "$FLOAT_GGUF" --model-name "llmc-synth-$DTYPE"
  [[ $FORMAT == f16 ]] || "$LLAMA_CPP/build/bin/llama-quantize" "$FLOAT_GGUF" "$GGUF" "$gguf_type"
fi
# A MoE checkpoint must reach llama.cpp as one: the GGUF's expert count, and ours from the plan.
"$PYTHON" - "$LLAMA_CPP" "$GGUF" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1] + "/gguf-py")
from gguf import GGUFReader
reader = GGUFReader(sys.argv[2])
arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
field = reader.fields.get(f"{arch}.expert_count")
experts = int(field.parts[-1][0]) if field is not None else 0
print(f"{sys.argv[2]}: architecture {arch}, expert_count {experts}")
EOF
"$BUILD/bin/llmrt" inspect "$PLAN" | grep -E "^model:|moe:|decode step reads" || true

load1() { cut -d' ' -f1 /proc/loadavg; }
wait_for_quiet() {
  local waited=0
  while awk -v l="$(load1)" -v m="$MAX_LOAD" 'BEGIN { exit !(l >= m) }'; do
    (( waited >= 600 )) && { echo "load still $(load1) after 10 min; running anyway" >&2; return; }
    sleep 15; waited=$((waited + 15))
  done
}

"$BUILD/bin/llmrt" bench --bandwidth -t "$THREADS"

# This run's rows only: the medians below must not mix in an earlier run's (another build's).
: > "$RESULTS"

run_llama() {
  local load=$1 rep=$2
  "$LLAMA_CPP/build/bin/llama-bench" -m "$GGUF" -p "$PROMPT" -n "$GEN" -t "$THREADS" -r 1 \
    -o jsonl | while read -r line; do
      echo "{\"program\": \"llama.cpp\", \"rep\": $rep, \"load\": $load, \"result\": $line}"
    done >> "$RESULTS"
}
run_ours() {
  local load=$1 rep=$2
  "$BUILD/bin/llmrt" bench "$PLAN" -p "$PROMPT" -n "$GEN" -t "$THREADS" --reps 1 --json |
    while read -r line; do
      echo "{\"program\": \"llmrt\", \"rep\": $rep, \"load\": $load, \"result\": $line}"
    done >> "$RESULTS"
}

for rep in $(seq 1 "$REPS"); do
  wait_for_quiet
  load=$(load1)
  echo "rep $rep/$REPS, load $load" >&2
  if (( rep % 2 )); then run_llama "$load" "$rep"; run_ours "$load" "$rep"
  else run_ours "$load" "$rep"; run_llama "$load" "$rep"; fi
done

python3 - "$RESULTS" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
# 2 cores: a 1-minute load of 1.5 or more means another process held a core for much of the run.
noisy_load = 1.5
table = {}  # (threads, metric) -> program -> [values]
for row in rows:
    r, program = row["result"], row["program"]
    if program == "llmrt":
        t = r["threads"]
        table.setdefault((t, "pp"), {}).setdefault(program, []).append(r["pp_tok_s"])
        table.setdefault((t, "tg"), {}).setdefault(program, []).append(r["tg_tok_s"])
        table.setdefault((t, "mbu"), {}).setdefault(program, []).append(r["mbu"])
    else:
        t = r["n_threads"]
        metric = "pp" if r["n_prompt"] > 0 else "tg"
        table.setdefault((t, metric), {}).setdefault(program, []).append(r["avg_ts"])
noisy = sorted({row["rep"] for row in rows if row["load"] >= noisy_load})
print(f"{len(rows)} rows; reps started at load >= {noisy_load} (noisy): {noisy or 'none'}")
print(f"{'threads':>7} {'metric':>6} {'llmrt':>10} {'llama.cpp':>10} {'ratio':>7}  (medians)")
for (t, metric) in sorted(table):
    values = table[(t, metric)]
    ours = statistics.median(values["llmrt"]) if "llmrt" in values else float("nan")
    if metric == "mbu":
        print(f"{t:>7} {metric:>6} {ours:>10.3f}")
        continue
    theirs = statistics.median(values["llama.cpp"]) if "llama.cpp" in values else float("nan")
    print(f"{t:>7} {metric:>6} {ours:>10.2f} {theirs:>10.2f} {ours / theirs:>7.2f}")
EOF
