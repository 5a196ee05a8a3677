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
# The build (scripts/configure-sanitize.sh: clang-16, -O1) also holds the libFuzzer targets, so
# CI compiles the runtime with clang once; ctest's fuzz_smoke in `make test` runs them from here.
# Any sanitizer report fails the test it occurs in, and so this script.
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

bash "$root/scripts/configure-sanitize.sh" "$build" "$llmc"
cmake --build "$build" -j "$jobs"

# halt_on_error/abort: the first report ends the test with a failure. detect_leaks: the runtime
# must not leak (LeakSanitizer runs at each test binary's exit); there are no suppressions.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd "$build"
ctest --output-on-failure -j "$jobs"
