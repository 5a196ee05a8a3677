#!/usr/bin/env bash
# run.sh REPORT_DIR, as the GPU kit's top folder holds it (scripts/gpu-kit.sh copies this file there):
# unpacks kit.tar.xz beside nothing else (under $TMPDIR) and runs the kit's own run.sh with the
# same arguments. The kit travels compressed because the lent machine receives at most 64 MiB,
# working tree included (docs/cuda.md, "The GPU kit"). tar with xz where the machine has xz,
# else Python's tarfile (lzma is in its standard library); exit status: the kit's run.sh's.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FILES=$(mktemp -d "${TMPDIR:-/tmp}/llmrt-kit-files.XXXXXX") || exit 1
trap 'rm -rf "$FILES"' EXIT
if command -v xz > /dev/null; then
  tar -xJf "$HERE/kit.tar.xz" -C "$FILES" || exit 1
else
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
    "$HERE/kit.tar.xz" "$FILES" || exit 1
fi
bash "$FILES/kit/run.sh" "$@"
