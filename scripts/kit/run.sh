#!/usr/bin/env bash
# run.sh REPORT_DIR: the GPU kit's one command (docs/cuda.md, "The GPU kit"). Lives in the kit
# that scripts/gpu-kit.sh builds; needs only the kit, the NVIDIA driver and bash, coreutils and
# python3 (for the report; without it the report is the plain check list).
#
#   1. device     kit-bench --probe: the GPU, or "no CUDA device: <reason>"
#   2. fill       the synthetic models' skeletons (big/*.skel) into plans under $TMPDIR
#                 (without a GPU not TinyLlama, nor the int4 / MXFP4 MoE shapes, whose CPU
#                 references take minutes on a small machine: the f16 MoE shape stands for them)
#   3. tests      llmrt_backend_cuda_test; llmrt_kit_gpu_test over every plan: the step script
#                 on the device against the CPU, every kernel launched, greedy tokens equal
#   4. e2e        llmrt run --backend cuda against --backend cpu on stories260K: the same text
#                 (without a GPU: --backend cuda must refuse with "CUDA backend unavailable")
#   5. bench      llmrt bench --backend cuda at --batch 1 and 16, and kit-bench (device copy
#                 bandwidth, MBU, CUDA-event kernel times; MoE plans: the chosen experts' bytes
#                 and the active experts per layer) on the synthetic models and stories260K
#                 (without a GPU: a short CPU bench of stories260K and of each MoE plan, with
#                 llmrt bench and llmrt-kit bench --backend cpu)
#   6. report     REPORT_DIR/report.json and report.txt; the summary table is printed last
# Each step's log and the programs' JSON go to REPORT_DIR/details/, bundled at the end into
# REPORT_DIR/details.tar.gz (the lent machine returns at most 8 files from $OUT), so REPORT_DIR
# holds three files. Exit status: 0 when every check passed (with or without a GPU), 1 when one
# failed, 2 on a usage error.
set -u -o pipefail

if [[ $# -ne 1 || $1 == -* ]]; then
  echo "usage: run.sh REPORT_DIR" >&2
  exit 2
fi
KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BIN=$KIT/bin
mkdir -p "$1" || exit 2
REPORT=$(cd "$1" && pwd)
DETAILS=$REPORT/details
rm -rf "$DETAILS" "$REPORT/details.tar.gz"
mkdir -p "$DETAILS" || exit 1
WORK=$(mktemp -d "${TMPDIR:-/tmp}/llmrt-kit.XXXXXX") || exit 1
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/plans"
# Caches (the bench's bandwidth probe) stay out of $HOME, which a clean environment may lack.
export LLMRT_BANDWIDTH_CACHE=$WORK/bandwidth.txt
export HOME=${HOME:-$WORK}
STARTED=$(date +%s)
CHECKS=$DETAILS/checks.tsv
: > "$CHECKS"
FAILED=0

# check NAME DETAIL COMMAND...: runs COMMAND into DETAILS/NAME.log and records pass/fail.
check() {
  local name=$1 detail=$2
  shift 2
  local start=$(date +%s)
  "$@" > "$DETAILS/$name.log" 2>&1
  local rc=$?
  local result=pass
  if [[ $rc != 0 ]]; then
    result=fail
    FAILED=1
  fi
  printf '%s\t%s\t%s\t%s\n' "$name" "$result" "$(( $(date +%s) - start ))" "$detail" >> "$CHECKS"
  printf '%-28s %s (%ss)\n' "$name" "$result" "$(( $(date +%s) - start ))"
  [[ $result == fail ]] && tail -n 15 "$DETAILS/$name.log" | sed 's/^/    /'
  return $rc
}

# ---- 1. device ----
PROBE=$("$BIN/llmrt-kit" probe 2>&1)
case $? in
  0) DEVICE=1; echo "device: $PROBE" ;;
  3) DEVICE=0; echo "$PROBE"; echo "no CUDA device: running the CPU half of every check" ;;
  *) echo "llmrt-kit probe failed: $PROBE" >&2; exit 1 ;;
esac
echo "$PROBE" > "$DETAILS/device.txt"

# ---- 2. fill the skeletons ----
fill_all() {
  local skeleton name
  for skeleton in "$KIT"/big/*.skel; do
    [[ -e $skeleton ]] || continue
    name=$(basename "$skeleton" .skel)
    if [[ $DEVICE == 0 ]]; then
      case $name in
        tinyllama* | *moe*-int4* | gpt-oss*)
          echo "skipping $name without a GPU"
          continue
          ;;
      esac
    fi
    echo "llmrt-kit plan fill $name"
    "$BIN/llmrt-kit" plan fill "$skeleton" "$WORK/plans/$name.plan" || return 1
  done
}
check fill "synthetic plans from big/*.skel" fill_all

# ---- 3. tests ----
check backend_cuda_test "table selection, clean refusal without a driver" \
  "$BIN/llmrt_backend_cuda_test" --gtest_output="json:$DETAILS/backend_cuda_test.json"
check kit_gpu_test "every plan: step script vs CPU, kernels launched, greedy tokens" \
  env LLMRT_KIT_PLANS="$KIT/plans:$WORK/plans" "$BIN/llmrt-kit" test \
  --gtest_output="json:$DETAILS/kit_gpu_test.json"

# ---- 4. end to end through the CLI ----
e2e() {
  local plan name cpu cuda
  for plan in "$KIT"/plans/stories260K-f32.plan "$KIT"/plans/stories260K-f16.plan; do
    [[ -e $plan ]] || continue
    name=$(basename "$plan" .plan)
    cpu=$("$BIN/llmrt" run "$plan" -p "Once upon a time" -n 48 --temp 0 --backend cpu \
      --quant-activations f32 2> /dev/null) || { echo "$name: llmrt run --backend cpu failed"; return 1; }
    echo "$name cpu:  $cpu"
    if [[ $DEVICE == 1 ]]; then
      cuda=$("$BIN/llmrt" run "$plan" -p "Once upon a time" -n 48 --temp 0 --backend cuda) ||
        { echo "$name: llmrt run --backend cuda failed"; return 1; }
      echo "$name cuda: $cuda"
      [[ $cpu == "$cuda" ]] || { echo "$name: the CUDA text differs from the CPU's"; return 1; }
    else
      cuda=$("$BIN/llmrt" run "$plan" -p "Once upon a time" -n 8 --temp 0 --backend cuda 2>&1) &&
        { echo "$name: --backend cuda succeeded without a device"; return 1; }
      echo "$name cuda: $cuda"
      [[ $cuda == *"CUDA backend unavailable"* ]] ||
        { echo "$name: --backend cuda did not say why it is unavailable"; return 1; }
    fi
  done
}
check e2e "llmrt run: CUDA text equals CPU text (stories260K)" e2e

# ---- 5. bench ----
# is_moe PLAN: whether the plan routes tokens to experts (llmrt inspect prints its MoeConfig).
# grep reads to the end: with -q it would stop early and pipefail would see llmrt's SIGPIPE.
is_moe() {
  "$BIN/llmrt" inspect "$1" 2> /dev/null | grep '^  moe: ' > /dev/null
}
bench() {
  local plan name batch bandwidth
  if [[ $DEVICE == 1 ]]; then
    # Dense skeletons, then the MoE ones (the fill order is the names'), then stories260K.
    for plan in "$WORK"/plans/tinyllama-1.1b-f16.plan "$WORK"/plans/llama-110m-f16.plan \
      "$WORK"/plans/llama-110m-int4-g32.plan "$WORK"/plans/qwen3-moe-1.6b-a0.4b-f16.plan \
      "$WORK"/plans/qwen3-moe-1.6b-a0.4b-int4-g32.plan "$WORK"/plans/gpt-oss-2b-a0.5b-mxfp4.plan \
      "$KIT"/plans/stories260K-f32.plan; do
      [[ -e $plan ]] || continue
      name=$(basename "$plan" .plan)
      for batch in 1 16; do
        echo "llmrt bench $name --batch $batch"
        "$BIN/llmrt" bench "$plan" --backend cuda -p 512 -n 64 --reps 3 --batch "$batch" --json \
          > "$DETAILS/bench-$name-b$batch.jsonl" || return 1
      done
      echo "llmrt-kit bench $name"
      "$BIN/llmrt-kit" bench "$plan" --batch 1,16 > "$DETAILS/kitbench-$name.json" || return 1
    done
  else
    plan=$KIT/plans/stories260K-f32.plan
    for batch in 1 16; do
      echo "llmrt bench stories260K-f32 --backend cpu --batch $batch"
      "$BIN/llmrt" bench "$plan" --backend cpu -p 64 -n 16 --reps 1 -t 1 --batch "$batch" \
        --bandwidth-mib 64 --json > "$DETAILS/bench-stories260K-f32-b$batch.jsonl" || return 1
    done
    # The MoE plans: llmrt bench's and llmrt-kit bench's accounting of the chosen experts on
    # the CPU, kit-bench's MBU against the read bandwidth llmrt bench measures.
    bandwidth=$("$BIN/llmrt" bench --bandwidth -t 1 --bandwidth-mib 64 --json |
      sed -n 's/.*"read_bytes_per_s":\([0-9.e+]*\).*/\1/p')
    [[ -n $bandwidth ]] || { echo "llmrt bench --bandwidth printed no read_bytes_per_s"; return 1; }
    for plan in "$WORK"/plans/*.plan; do
      is_moe "$plan" || continue
      name=$(basename "$plan" .plan)
      for batch in 1 16; do
        echo "llmrt bench $name --backend cpu --batch $batch"
        "$BIN/llmrt" bench "$plan" --backend cpu -p 32 -n 8 --reps 1 -t 1 --batch "$batch" \
          --bandwidth-mib 64 --json > "$DETAILS/bench-$name-b$batch.jsonl" || return 1
      done
      echo "llmrt-kit bench $name --backend cpu"
      "$BIN/llmrt-kit" bench "$plan" --backend cpu --threads 1 --bandwidth "$bandwidth" \
        --batch 1,16 --context 16 --steps 4 --prefill 32 --reps 1 \
        > "$DETAILS/kitbench-$name.json" || return 1
    done
  fi
}
check bench "llmrt bench at batch 1 and 16; kit-bench" bench

# ---- 6. report ----
SECONDS_TOTAL=$(( $(date +%s) - STARTED ))
if command -v python3 > /dev/null; then
  python3 "$KIT/report.py" "$DETAILS" "$REPORT" --device "$DEVICE" --seconds "$SECONDS_TOTAL" ||
    FAILED=1
else
  echo "python3 not found: the report is the check list"
  cat "$CHECKS" | tee "$REPORT/report.txt"
fi
tar -czf "$REPORT/details.tar.gz" -C "$REPORT" details && rm -rf "$DETAILS"
exit $FAILED
