#!/usr/bin/env bash
# Runs every libFuzzer target (clang, ASan + UBSan + coverage) for SECONDS each, FUZZ_JOBS at a
# time (default one per CPU), from seed corpora taken from the test data. CI runs it briefly
# through ctest (fuzz_smoke). The fuzzers live in the sanitizer build
# (scripts/configure-sanitize.sh, default build-asan/), which `make test-sanitize` builds; when
# it is missing this configures it and builds only the fuzzers. Long runs (docs/reliability.md
# has the figures of the last one):
#
#   nice -n 10 bash scripts/fuzz.sh 3600        # an hour per fuzzer, corpora kept between runs
#
# A crash, leak or timeout leaves its input as crash-*/leak-*/timeout-* in the fuzzer's work dir
# (build-asan/fuzz-work/NAME/) and makes the script fail; add the input to the target's
# regression corpus (tests/fuzz/corpus/regressions/NAME/) with the fix, and fuzz_smoke replays it
# in every CI run.
set -euo pipefail
seconds=${1:-10}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${2:-$root/build-asan}
work=$build/fuzz-work

# Also a build-asan/ from before the fuzzers moved into it.
if ! grep -qs '^LLMRT_BUILD_FUZZERS:BOOL=ON' "$build/CMakeCache.txt"; then
  bash "$root/scripts/configure-sanitize.sh" "$build"
fi
cmake --build "$build" --target fuzzers -j "$(nproc)" >/dev/null

# Seed corpora: small real inputs of each format.
seed() {  # seed NAME FILES...
  local dir=$work/corpus/$1
  shift
  mkdir -p "$dir"
  for f in "$@"; do [ -f "$f" ] && cp "$f" "$dir/$(echo "$f" | md5sum | cut -c1-12)-$(basename "$f")"; done
  return 0
}
seed llmc_hf_config_fuzzer "$root"/tests/fixtures/*/config.json "$root"/tests/data/stories260K/config.json
seed llmc_safetensors_fuzzer "$root"/tests/fuzz/corpus/*.safetensors
seed llmc_checkpoint_index_fuzzer "$root"/tests/fuzz/corpus/checkpoint_index/*
seed llmrt_request_body_fuzzer "$root"/tests/fuzz/corpus/request_body/*
# Real plans when the main build has llmc (ctest runs this from there): stories260K (1088 KiB)
# and the smallest fixture, int4 AWQ (192 KiB). A plan's meta comes after its blobs, so the
# plan reader needs whole plans (its max_len below) to get past the header checks.
llmc=${LLMC:-$root/build/bin/llmc}
mkdir -p "$work"
for model in tests/data/stories260K tests/fixtures/llama_awq; do
  plan=$work/seed-$(basename "$model").plan
  if [ -x "$llmc" ] && [ ! -f "$plan" ]; then
    "$llmc" compile "$root/$model" -o "$plan" --quiet || true
  fi
  seed llmrt_plan_reader_fuzzer "$plan"
done
seed llmrt_template_fuzzer "$root"/tests/data/*.jinja "$root"/../shared/tokenizers/*/chat_template.jinja
seed llmc_tokenizer_fuzzer "$root"/compiler/tokenizer/fuzz_corpus/*
# Inputs that once crashed, leaked or hung a target, kept with their fixes.
for dir in "$root"/tests/fuzz/corpus/regressions/*/; do
  [ -d "$dir" ] && seed "$(basename "$dir")" "$dir"*
done

# FUZZ_JOBS fuzzers at a time (default: one per CPU; fuzz_smoke is RUN_SERIAL, so the CPUs are
# its own). Each stops after SECONDS, so on 2 cores two at a time halve fuzz_smoke's wall time
# (7 fuzzers x 10 s: ~75 s -> ~40 s) and each still has a core for its SECONDS; more jobs than
# CPUs would only split the cores and leave each fuzzer fewer executions.
fuzz_jobs=${FUZZ_JOBS:-$(nproc)}
run_fuzzer() {  # run_fuzzer BINARY: its exit status goes to $work/NAME.status
  local fuzzer=$1 name max_len
  name=$(basename "$fuzzer")
  mkdir -p "$work/corpus/$name" "$work/$name"
  # 64 KiB inputs: past every header and into the data, small enough to mutate quickly; whole
  # plans for the plan reader (1.5 MiB holds the stories260K seed).
  max_len=65536
  [ "$name" = llmrt_plan_reader_fuzzer ] && max_len=1572864
  local result=0
  (cd "$work/$name" && "$fuzzer" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 "$work/corpus/$name" >"$work/$name.log" 2>&1) ||
    result=$?
  echo "$result" >"$work/$name.status"
}
fuzzers=("$build"/bin/*_fuzzer)
for fuzzer in "${fuzzers[@]}"; do
  rm -f "$work/$(basename "$fuzzer").status"
  while [ "$(jobs -rp | wc -l)" -ge "$fuzz_jobs" ]; do wait -n || true; done
  run_fuzzer "$fuzzer" &
done
wait

status=0
for fuzzer in "${fuzzers[@]}"; do
  name=$(basename "$fuzzer")
  if [ "$(cat "$work/$name.status" 2>/dev/null)" = 0 ]; then
    echo "fuzz: $name ok: $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$work/$name.log" | grep -o '[0-9]*$') executions in ${seconds}s"
  else
    echo "fuzz: $name FAILED (log: $work/$name.log)"
    tail -30 "$work/$name.log"
    status=1
  fi
done
exit $status
