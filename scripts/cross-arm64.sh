#!/usr/bin/env bash
# Cross-builds the runtime core for arm64 and runs it under qemu-aarch64:
#   1. libllmrt (static and shared) and a set of unit tests (plan format, tokenizer UTF-8 and
#      Unicode normalization, session files, the thread pool, and the CPU float and quantized
#      kernel conformance suites) with Debian's aarch64 toolchain against multiarch :arm64 libraries
#      (scripts/install-deps.sh installs both);
#   2. the kernel suites at every arm64 tier (dispatch.h: neon, neon_dotprod with sdot,
#      neon_i8mm with smmla; LLMRT_CPU_TARGET forces each, and a tier the emulated CPU cannot
#      run is an error, never a silent fallback; the toolchain file compiles NEON only, see there
#      why not SVE) on qemu's "max" CPU, which has both extensions; then on models without them,
#      the phone case: the plain Armv8.0 build on a Cortex-A76 (dotprod, no i8mm) and a
#      Cortex-A53 (neither) picks the best tier the CPU has, passes the quantized suite there
#      (no instruction of a missing extension runs outside its tier), and refuses the tier it
#      lacks with an error that names the missing extension;
#   3. examples/embed_c, built for arm64 against the cross-installed package as an outside
#      project, replying to one chat turn from a stories260K plan compiled on this (x86) machine:
#      with HOST_BUILD_DIR (a native build with llmc and llmrt) the reply must equal the native
#      `llmrt chat` reply token for token.
#
#   scripts/cross-arm64.sh [BUILD_DIR [HOST_BUILD_DIR]]     (default build-arm64, no host check)
#
# Exit status 77 (ctest's skip) with the reason when the toolchain, qemu or an :arm64 library is
# missing. Builds at -j2 through ccache and runs the programs under qemu two at a time (JOBS);
# see docs/embedding.md for its cost. Each program under qemu gets RUN_SECONDS (default 300; the
# slowest, the quantized kernel suite, takes ~30-40 s a tier) so a hang fails in minutes, naming
# the program, instead of running into ctest's timeout.
# qemu runs the code, it does not time it: nothing here measures speed.
set -euo pipefail
cd "$(dirname "$0")/.."
source_dir=$PWD
build_dir=$(realpath -m "${1:-build-arm64}")
host_build_dir=${2:+$(realpath -m "$2")}
jobs=${JOBS:-2}
run_seconds=${RUN_SECONDS:-300}

source "$source_dir/scripts/arm64-prerequisites.sh"
arm64_prerequisites cross-arm64

start=$(date +%s)
mkdir -p "$build_dir"
cmake -S "$source_dir" -B "$build_dir" -G Ninja \
  -DCMAKE_TOOLCHAIN_FILE="$source_dir/cmake/toolchains/aarch64-linux-gnu.cmake" \
  -DLLMRT_CORE_ONLY=ON -DCMAKE_BUILD_TYPE=Release >"$build_dir/cross-configure.log" 2>&1 ||
  { cat "$build_dir/cross-configure.log"; exit 1; }
# Not llmrt_plan_dtype_test: its reference conversion uses _Float16, which g++ 12 has in C++
# only on x86.
tests=(llmrt_plan_test llmrt_tokenizer_utf8_test llmrt_tokenizer_unicode_normalize_test
  llmrt_capi_session_file_test
  llmrt_threading_thread_pool_test llmrt_backend_cpu_test llmrt_backend_cpu_quant_test)
ninja -C "$build_dir" -j "$jobs" llmrt_static llmrt_shared "${tests[@]}" >"$build_dir/cross-build.log" 2>&1 ||
  { tail -50 "$build_dir/cross-build.log"; exit 1; }
built=$(date +%s)
file -L "$build_dir/runtime/capi/libllmrt.so" | grep -q "ARM aarch64" ||
  { echo "cross-arm64: libllmrt.so is not an arm64 library"; exit 1; }

# The loader and libc of one package, libc6:arm64 (as on an arm64 Debian machine), not the
# cross toolchain's loader with the multiarch libc: that pair made every pthread_create spin
# forever (see LLMRT_QEMU_AARCH64 in cmake/toolchains/aarch64-linux-gnu.cmake).
# The emulated CPU model is the caller's $qemu_cpu (qemu-aarch64 -cpu help lists them).
run() {
  local status=0
  timeout -k 10 "$run_seconds" "$qemu" -L / -cpu "$qemu_cpu" "$@" || status=$?
  if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    echo "cross-arm64: TIMEOUT: $(basename -- "$1") ran past $run_seconds s under qemu" >&2
  fi
  return "$status"
}
binary_of() { find "$build_dir" -name "$1" -type f -perm -u+x | head -1; }

# kernel_suite TEST TARGET EXPECTED CPU: TEST at LLMRT_CPU_TARGET=TARGET ("" for the default
# dispatch) on qemu's CPU model CPU passes, and the quantized suite reports that its kernels ran
# at EXPECTED (ActiveCpuTarget).
kernel_suite() {
  local test=$1 target=$2 expected=$3 qemu_cpu=$4
  local log=$build_dir/$test.${target:-best}.$qemu_cpu.log
  LLMRT_CPU_TARGET=$target run "$(binary_of "$test")" --gtest_brief=1 >"$log" 2>&1 ||
    { tail -40 "$log"; echo "cross-arm64: FAIL: $test (LLMRT_CPU_TARGET=$target, -cpu $qemu_cpu)"; exit 1; }
  if [[ $test == llmrt_backend_cpu_quant_test ]] &&
    ! grep -q "quantized kernels run at target $expected\$" "$log"; then
    echo "cross-arm64: FAIL: $test (LLMRT_CPU_TARGET=$target, -cpu $qemu_cpu) ran at" \
      "$(grep -o 'run at target .*' "$log"), expected $expected"
    exit 1
  fi
  echo "cross-arm64: $test (LLMRT_CPU_TARGET=${target:-<unset>}, -cpu $qemu_cpu, $expected):" \
    "$(grep -E '^\[  PASSED  \]' "$log")"
}

# refused TARGET MISSING CPU: on qemu's CPU model CPU, LLMRT_CPU_TARGET=TARGET fails the
# quantized suite with an error naming MISSING, the extension the CPU lacks.
refused() {
  local target=$1 missing=$2 qemu_cpu=$3 log=$build_dir/refused.$1.$3.log
  if LLMRT_CPU_TARGET=$target run "$(binary_of llmrt_backend_cpu_quant_test)" --gtest_brief=1 \
    >"$log" 2>&1; then
    echo "cross-arm64: FAIL: LLMRT_CPU_TARGET=$target ran on -cpu $qemu_cpu, which lacks $missing"
    exit 1
  fi
  grep -q "LLMRT_CPU_TARGET=$target: this CPU lacks $missing" "$log" ||
    { tail -20 "$log"; echo "cross-arm64: FAIL: LLMRT_CPU_TARGET=$target on -cpu $qemu_cpu" \
      "did not name the missing $missing"; exit 1; }
  echo "cross-arm64: LLMRT_CPU_TARGET=$target on -cpu $qemu_cpu refused:" \
    "$(grep -o "this CPU lacks $missing" "$log")"
}

# unit_suite TEST: TEST passes on qemu's "max" CPU.
unit_suite() {
  local log=$build_dir/$1.log qemu_cpu=max
  run "$(binary_of "$1")" --gtest_brief=1 >"$log" 2>&1 || { tail -40 "$log"; exit 1; }
  echo "cross-arm64: $1: $(grep -E '^\[  PASSED  \]' "$log")"
}

# The checks are independent programs under qemu, each on one core most of the time: $jobs run
# at once (ctest gives this test the machine, RUN_SERIAL). Each one's report goes to its own
# file, printed in order once all have finished; any failure fails the script.
checks=()
rm -f "$build_dir"/check.*.out "$build_dir"/check.*.status
check() {  # check COMMAND ARGS...: starts one check in the background
  local index=${#checks[@]}
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  (
    status=0
    ("$@") >"$build_dir/check.$index.out" 2>&1 || status=$?
    echo "$status" >"$build_dir/check.$index.status"
  ) &
  checks+=("$*")
}
# The slowest first (the quantized kernel suite, ~40 s a tier), so the last to start are short.
for tier in neon:NEON neon_dotprod:NEON_DOTPROD neon_i8mm:NEON_I8MM; do
  check kernel_suite llmrt_backend_cpu_quant_test "${tier%%:*}" "${tier#*:}" max
done
# Without the extensions: the default dispatch falls back to the best tier the CPU has, and the
# tiers above it are refused by name.
check kernel_suite llmrt_backend_cpu_quant_test "" NEON_DOTPROD cortex-a76
check kernel_suite llmrt_backend_cpu_quant_test "" NEON cortex-a53
for tier in neon:NEON neon_dotprod:NEON_DOTPROD neon_i8mm:NEON_I8MM; do
  check kernel_suite llmrt_backend_cpu_test "${tier%%:*}" "${tier#*:}" max
done
check refused neon_i8mm "the int8 matrix multiply instructions (i8mm)" cortex-a76
check refused neon_dotprod "the dot product instructions (asimddp)" cortex-a53
for test in "${tests[@]}"; do
  [[ $test == llmrt_backend_cpu* ]] || check unit_suite "$test"
done
wait
failed=0
for index in "${!checks[@]}"; do
  cat "$build_dir/check.$index.out"
  if [ "$(cat "$build_dir/check.$index.status")" != 0 ]; then
    echo "cross-arm64: FAILED: ${checks[$index]}"
    failed=1
  fi
done
[ "$failed" = 0 ] || exit 1
tested=$(date +%s)

# The example, as an outside project, against the arm64 package installed to a prefix.
prefix=$build_dir/prefix
cmake --install "$build_dir" --prefix "$prefix" --component llmrt >/dev/null
cmake -S "$source_dir/examples/embed_c" -B "$build_dir/embed_c" -G Ninja \
  -DCMAKE_TOOLCHAIN_FILE="$source_dir/cmake/toolchains/aarch64-linux-gnu.cmake" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_ROOT_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$build_dir/embed_c.log" 2>&1 || { cat "$build_dir/embed_c.log"; exit 1; }
cmake --build "$build_dir/embed_c" >>"$build_dir/embed_c.log" 2>&1 ||
  { cat "$build_dir/embed_c.log"; exit 1; }
file -L "$build_dir/embed_c/embed_c" | grep -q "ARM aarch64" ||
  { echo "cross-arm64: embed_c is not an arm64 program"; exit 1; }

if [ -n "$host_build_dir" ]; then
  plan=$build_dir/stories_chat.plan
  "$host_build_dir/bin/llmc" compile tests/data/stories260K -o "$plan" --quiet \
    --chat-template tests/data/chatml_test.jinja
  message="Once upon a time"
  expected=$(printf '%s\n' "$message" | "$host_build_dir/bin/llmrt" chat "$plan" -n 40 2>/dev/null)
  actual=$(printf '%s\n' "$message" |
    qemu_cpu=max LD_LIBRARY_PATH="$prefix/lib" run "$build_dir/embed_c/embed_c" "$plan" 40)
  if [ "$actual" != "$expected" ]; then
    echo "cross-arm64: FAIL: embed_c on arm64 replied"; echo "$actual"
    echo "llmrt chat on this machine replied"; echo "$expected"
    exit 1
  fi
  echo "cross-arm64: embed_c (arm64, x86-compiled plan) equals llmrt chat: $actual"
fi
end=$(date +%s)
echo "cross-arm64: OK: build $((built - start)) s, tests $((tested - built)) s," \
  "example $((end - tested)) s"
