#!/usr/bin/env bash
# Configures the one clang build that CI compiles: the runtime, its tests and the libFuzzer
# targets, all with clang-16, ASan + UBSan and libFuzzer's coverage instrumentation
# (-fsanitize=fuzzer-no-link on every object; the fuzzers link with -fsanitize=fuzzer).
# `make test-sanitize` (scripts/test-sanitize.sh) builds everything in it and runs the tests;
# scripts/fuzz.sh (ctest's fuzz_smoke) builds only the fuzzers when the build is missing.
# Before, the fuzzers had a clang build of their own, compiling the runtime a second time.
#
#   bash scripts/configure-sanitize.sh BUILD_DIR [LLMC]
#
# LLMC: the llmc binary the tests take their plans from (the compiler, MLIR-based, is not built
# here, except its parsers of untrusted input, which the fuzzers drive). Configuring again with
# the same settings is a no-op.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$1
llmc=${2:-}

# -O1: sanitizer reports stay readable and the build is faster than -O2.
sanitize="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
# Highway compiles each CPU kernel once per x86 target a tier names (CMakeLists.txt: SCALAR,
# SSE4, AVX2, AVX3). The sanitized tests run the ones this CPU can run
# (LLMRT_CPU_RUNNABLE_TARGETS), so AVX3 on a CPU without AVX-512 (F, VL, DQ, BW: what Highway's
# AVX3 needs) would be instrumented for no check, and instrumented SIMD code is what makes this
# build slow: it is left out here (LLMRT_HWY_DISABLED_TARGETS, bits from hwy/detect_targets.h,
# Highway 1.0.3, SSSE3 kept out as in every build). The gcc build compiles every tier's target.
if [ "$(uname -m)" = x86_64 ]; then
  disabled=$((1 << 12))  # HWY_SSSE3
  for flag in avx512f avx512vl avx512dq avx512bw; do
    grep -qw "$flag" /proc/cpuinfo || { disabled=$((disabled | 1 << 8)); break; }  # HWY_AVX3
  done
fi
args=(-DCMAKE_C_COMPILER=clang-16 -DCMAKE_CXX_COMPILER=clang++-16
  -DCMAKE_BUILD_TYPE=RelWithDebInfo
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only"
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only"
  -DCMAKE_C_FLAGS="$sanitize" -DCMAKE_CXX_FLAGS="$sanitize"
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined"
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined"
  -DLLMC_BUILD_COMPILER=OFF -DLLMRT_BUILD_FUZZERS=ON)
if [ -n "${disabled:-}" ]; then args+=(-DLLMRT_HWY_DISABLED_TARGETS="$disabled"); fi
if [ -n "$llmc" ]; then args+=(-DLLMRT_TEST_LLMC="$llmc"); fi
cmake -S "$root" -B "$build" -G Ninja "${args[@]}" >/dev/null
