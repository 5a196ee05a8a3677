#!/usr/bin/env bash
# examples/embed_c built as an outside project against an installed llmrt, with the shared and
# the static library, and run on stories260K: its reply must equal `llmrt chat`'s, and a Ctrl-C
# must stop it cleanly.
#
#   embed_example_test.sh BUILD_DIR SOURCE_DIR CHAT_PLAN
set -euo pipefail
build_dir=$1
source_dir=$2
plan=$3
scratch=$(mktemp -d "${TMPDIR:-/tmp}/llmrt-embed.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
prefix=$scratch/prefix

cmake --install "$build_dir" --prefix "$prefix" --component llmrt >/dev/null
for file in include/llmrt/llmrt.h lib/libllmrt.a lib/libllmrt.so lib/cmake/llmrt/llmrtConfig.cmake; do
  [ -e "$prefix/$file" ] || { echo "FAIL: the install has no $file"; exit 1; }
done

message="Once upon a time"
tokens=40
# The reference: the CLI's greedy reply to the same one-message conversation.
expected=$(printf '%s\n' "$message" | "$build_dir/bin/llmrt" chat "$plan" -n $tokens 2>/dev/null)
[ -n "$expected" ] || { echo "FAIL: llmrt chat gave no reply"; exit 1; }

for mode in shared static; do
  static=OFF
  [ $mode = static ] && static=ON
  cmake -S "$source_dir/examples/embed_c" -B "$scratch/build-$mode" -G Ninja \
    -DCMAKE_PREFIX_PATH="$prefix" -DLLMRT_USE_STATIC_LIBS=$static -DCMAKE_BUILD_TYPE=Release \
    >"$scratch/configure-$mode.log" 2>&1 || { cat "$scratch/configure-$mode.log"; exit 1; }
  cmake --build "$scratch/build-$mode" >"$scratch/build-$mode.log" 2>&1 ||
    { cat "$scratch/build-$mode.log"; exit 1; }
  binary=$scratch/build-$mode/embed_c
  if [ $mode = static ] && ldd "$binary" | grep -q libllmrt; then
    echo "FAIL: the static build loads libllmrt.so"; exit 1
  fi
  # The shared build finds libllmrt.so through the install's RPATH that CMake sets.
  actual=$(printf '%s\n' "$message" | "$binary" "$plan" $tokens)
  if [ "$actual" != "$expected" ]; then
    echo "FAIL ($mode): embed_c replied"; echo "$actual"; echo "llmrt chat replied"; echo "$expected"
    exit 1
  fi
  echo "ok ($mode): $actual"
done

# Ctrl-C: SIGINT while the message is still being read; the reply stops after its first token
# and the program exits 0 having freed everything.
fifo=$scratch/stdin
mkfifo "$fifo"
"$scratch/build-shared/embed_c" "$plan" 200 <"$fifo" >"$scratch/out" 2>"$scratch/err" &
pid=$!
exec 3>"$fifo"
sleep 0.5
kill -INT $pid
printf '%s\n' "$message" >&3
exec 3>&-
status=0
wait $pid || status=$?
if [ $status -ne 0 ] || ! grep -q "interrupted after 1 tokens" "$scratch/err"; then
  echo "FAIL: after Ctrl-C: exit $status, stderr:"; cat "$scratch/err"; exit 1
fi
echo "ok (Ctrl-C): $(cat "$scratch/err")"
