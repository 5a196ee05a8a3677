#!/usr/bin/env bash
# ctest kit_clean_env: builds a reduced GPU kit from BUILD_DIR and runs its run.sh under env -i
# with nothing but the kit and the base system's /usr/bin:/bin on PATH (no LD_LIBRARY_PATH), so
# a shared library the kit lacks makes a program fail to start. Without a GPU run.sh takes the
# no-device path and must still exit 0; the output must say so.
set -euo pipefail
BUILD=$(cd "${1:?usage: kit_test.sh BUILD_DIR}" && pwd)
SOURCE=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WORK=$BUILD/kit-test
rm -rf "$WORK"
mkdir -p "$WORK"
bash "$SOURCE/scripts/gpu-kit.sh" "$WORK/kit" "$BUILD" --reduced
# The kit must not depend on where it was built: move it before running it.
mv "$WORK/kit" "$WORK/moved-kit"
set +e
env -i PATH=/usr/bin:/bin TMPDIR="$WORK" bash "$WORK/moved-kit/run.sh" "$WORK/report" \
  2>&1 | tee "$WORK/run.log"
rc=${PIPESTATUS[0]}
set -e
[[ $rc == 0 ]] || { echo "kit_test: run.sh exited $rc"; exit 1; }
[[ -s $WORK/report/report.json && -s $WORK/report/report.txt && -s $WORK/report/details.tar.gz ]] ||
  { echo "kit_test: run.sh wrote no report"; exit 1; }
if ! grep -q "device: " "$WORK/run.log"; then
  grep -q "no CUDA device" "$WORK/run.log" ||
    { echo "kit_test: neither a device nor \"no CUDA device\" reported"; exit 1; }
fi
echo "kit_test: passed"
