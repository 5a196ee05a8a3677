#!/usr/bin/env bash
# The test suite under AddressSanitizer + UndefinedBehaviorSanitizer (`make test-sanitize`).
#
# What is sanitized: the whole runtime (every module under runtime/, the HTTP server, the llmrt
# tool) and all their tests, including tests/fault, which runs the sanitized llmrt on damaged
# plans. What is not: the MLIR-based compiler (ir/, passes/, codegen/, compiler/pipeline, llmc).
# Building it a second time with sanitizers costs more than the rest of the suite together on
# a 2-core CI machine; the plans the tests need come from the normal build's llmc instead, and
# the compiler's parsers of untrusted input (safetensors, index, config.json, tokenizer files)
# are built with ASan + UBSan in the fuzzers that ctest's fuzz_smoke runs (scripts/fuzz.sh).
#
#   bash scripts/test-sanitize.sh [BUILD_DIR]      (default build-asan)
#   LLMC=path/to/llmc bash scripts/test-sanitize.sh   (use that llmc, build none)
#
# Uses clang-16 (also the fuzzers' compiler), -O1 (sanitizer reports stay readable and the
# build is faster than -O2). Any sanitizer report fails the test it occurs in, and so this script.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-asan}
normal_build=${NORMAL_BUILD_DIR:-$root/build}
jobs=${JOBS:-$(nproc)}

# The normal build's llmc, which `make test` builds anyway.
llmc=${LLMC:-}
if [ -z "$llmc" ]; then
  if [ ! -f "$normal_build/build.ninja" ]; then
    cmake -S "$root" -B "$normal_build" -G Ninja >/dev/null
  fi
  cmake --build "$normal_build" --target llmc -j "$jobs"
  llmc=$normal_build/bin/llmc
fi

sanitize="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
if [ ! -f "$build/build.ninja" ]; then
  CC=clang-16 CXX=clang++-16 cmake -S "$root" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DCMAKE_C_FLAGS="$sanitize" -DCMAKE_CXX_FLAGS="$sanitize" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DLLMC_BUILD_COMPILER=OFF -DLLMRT_TEST_LLMC="$llmc" >/dev/null
fi
cmake --build "$build" -j "$jobs"

# halt_on_error/abort: the first report ends the test with a failure. detect_leaks: the runtime
# must not leak (LeakSanitizer runs at each test binary's exit).
# Known leaks, each with its owner and reason, are listed in lsan-suppressions.txt.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/scripts/lsan-suppressions.txt:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd "$build"
ctest --output-on-failure -j "$jobs"
