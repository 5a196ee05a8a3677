#!/usr/bin/env bash
# Builds every libFuzzer target with clang (ASan + UBSan + coverage) and runs each for SECONDS
# from seed corpora taken from the test data. CI runs it briefly through ctest (fuzz_smoke);
# run it long by hand:  bash scripts/fuzz.sh 3600
# A crash leaves its input as crash-* in the fuzzer's work dir and makes the script fail; turn
# it into a regression test before fixing.
set -euo pipefail
seconds=${1:-10}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${2:-$root/build-fuzz}
work=$build/fuzz-work

if [ ! -f "$build/build.ninja" ]; then
  CC=clang-16 CXX=clang++-16 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DLLMRT_BUILD_FUZZERS=ON -DBUILD_TESTING=OFF >/dev/null
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
# A real plan when the main build has llmc (ctest runs this from there).
if [ -x "$root/build/bin/llmc" ] && [ ! -f "$work/seed.plan" ]; then
  mkdir -p "$work"
  "$root/build/bin/llmc" compile "$root/tests/data/stories260K" -o "$work/seed.plan" --quiet || true
fi
seed llmrt_plan_reader_fuzzer "$work/seed.plan"
seed llmrt_template_fuzzer "$root"/tests/data/*.jinja "$root"/../shared/tokenizers/*/chat_template.jinja
seed llmc_tokenizer_fuzzer "$root"/compiler/tokenizer/fuzz_corpus/*

status=0
for fuzzer in "$build"/bin/*_fuzzer; do
  name=$(basename "$fuzzer")
  mkdir -p "$work/corpus/$name" "$work/$name"
  # 64 KiB inputs: past every header and into the data, small enough to mutate quickly.
  if (cd "$work/$name" && "$fuzzer" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 "$work/corpus/$name" >"$work/$name.log" 2>&1); then
    echo "fuzz: $name ok: $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$work/$name.log" | grep -o '[0-9]*$') executions in ${seconds}s"
  else
    echo "fuzz: $name FAILED (log: $work/$name.log)"
    tail -30 "$work/$name.log"
    status=1
  fi
done
exit $status
