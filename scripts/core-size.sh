#!/usr/bin/env bash
# The size budget of the lean core for phones: libllmrt cross-built for arm64 with the runtime,
# the CPU backend and the tokenizer only (LLMRT_CORE_ONLY: no compiler, server or tools;
# LLMRT_WITH_TEMPLATES=OFF: no chat-template interpreter), Release, stripped, must be at most
# BUDGET_BYTES (default 1,500,000). Also runs llmrt_capi_render_chat_test from that build under
# qemu: the one C API call that needs templates must fail cleanly there.
#
#   scripts/core-size.sh [BUILD_DIR]        (default build-core-size)
#
# Prints the stripped size, what each bundled module adds (text + data of its objects) and the
# shared libraries libllmrt needs with their sizes, which an app ships too unless the platform
# has them (see docs/embedding.md, "Size"). Exit status 77 (ctest's skip) when the aarch64
# toolchain, qemu or an :arm64 library is missing, as scripts/cross-arm64.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source_dir=$PWD
build_dir=$(realpath -m "${1:-build-core-size}")
budget=${BUDGET_BYTES:-1500000}
jobs=${JOBS:-2}

source "$source_dir/scripts/arm64-prerequisites.sh"
arm64_prerequisites core-size

mkdir -p "$build_dir"
cmake -S "$source_dir" -B "$build_dir" -G Ninja \
  -DCMAKE_TOOLCHAIN_FILE="$source_dir/cmake/toolchains/aarch64-linux-gnu.cmake" \
  -DLLMRT_CORE_ONLY=ON -DLLMRT_WITH_TEMPLATES=OFF -DCMAKE_BUILD_TYPE=Release \
  >"$build_dir/configure.log" 2>&1 || { cat "$build_dir/configure.log"; exit 1; }
ninja -C "$build_dir" -j "$jobs" llmrt_shared llmrt_capi_render_chat_test \
  >"$build_dir/build.log" 2>&1 || { tail -50 "$build_dir/build.log"; exit 1; }

library=$(realpath "$build_dir/runtime/capi/libllmrt.so")
stripped=$build_dir/libllmrt.stripped.so
aarch64-linux-gnu-strip -o "$stripped" "$library"
size=$(stat -c %s "$stripped")

echo "core-size: $(grep -o 'libllmrt bundles: .*' "$build_dir/configure.log")"
echo "core-size: text + data of each bundled module's objects (bytes, before linking):"
for module_dir in "$build_dir"/runtime/*/CMakeFiles/*.dir "$build_dir"/runtime/*/*/CMakeFiles/*.dir; do
  [ -d "$module_dir" ] || continue
  module=$(basename "$module_dir" .dir)
  case $module in *_test) continue ;; esac
  bytes=$(find "$module_dir" -name '*.o' -print0 | xargs -0 -r aarch64-linux-gnu-size |
    awk 'NR > 1 { total += $1 + $2 } END { print total + 0 }')
  [ "$bytes" -gt 0 ] && printf '  %-28s %9d\n' "$module" "$bytes"
done | sort -k2 -n -r
echo "core-size: shared libraries libllmrt.so needs (stripped sizes as Debian ships them):"
aarch64-linux-gnu-readelf -d "$library" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' |
  while read -r needed; do
    path=/usr/lib/aarch64-linux-gnu/$needed
    [ -e "$path" ] || path=/lib/aarch64-linux-gnu/$needed
    printf '  %-36s %9s\n' "$needed" "$(stat -L -c %s "$path" 2>/dev/null || echo '?')"
  done
if aarch64-linux-gnu-readelf -d "$library" | grep -q 'libicu'; then
  echo "core-size: FAIL: libllmrt.so links ICU"
  exit 1
fi

# Under qemu with libc6:arm64's loader and libc (see scripts/cross-arm64.sh for why -L /).
test_binary=$build_dir/bin/llmrt_capi_render_chat_test
timeout -k 10 300 "$qemu" -L / "$test_binary" --gtest_brief=1 >"$build_dir/render_chat.log" 2>&1 ||
  { tail -30 "$build_dir/render_chat.log"; exit 1; }
echo "core-size: llmrt_capi_render_chat_test (templates compiled out): $(
  grep -E '^\[  PASSED  \]' "$build_dir/render_chat.log")"

if [ "$size" -gt "$budget" ]; then
  echo "core-size: FAIL: stripped arm64 libllmrt.so is $size bytes, over the budget of $budget"
  exit 1
fi
echo "core-size: OK: stripped arm64 libllmrt.so is $size bytes (budget $budget)"
