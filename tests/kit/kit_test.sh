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
# The MoE skeleton's CPU bench (llmrt-kit bench --backend cpu): one token chooses exactly top_k
# distinct experts, so batch 1 reads top_k a layer; 16 sequences of random tokens spread over
# more; the experts' bytes are those experts' (bytes_per_expert each). llmrt bench feeds its
# batch-16 sessions random tokens too, so its union exceeds top_k as well.
python3 - "$WORK/report/report.json" << 'EOF' || { echo "kit_test: the MoE bench figures are wrong"; exit 1; }
import json
import sys

report = json.load(open(sys.argv[1]))
bench = report["kitbench"]["qwen3_moe-f16-synthetic"]
layers = bench["moe"]
top_k = layers[0]["top_k"]
assert [d["batch"] for d in bench["decode"]] == [1, 16], bench["decode"]
for decode in bench["decode"]:
    active = decode["active_experts"]
    assert len(active) == len(layers), active
    if decode["batch"] == 1:
        assert all(a == top_k for a in active), active
    else:
        assert all(top_k < a <= l["experts"] for a, l in zip(active, layers)), active
    expected = sum(a * l["bytes_per_expert"] for a, l in zip(active, layers))
    assert abs(decode["expert_bytes_per_step"] - expected) <= 1e-6 * expected, decode
    assert decode["bytes_per_step"] > decode["expert_bytes_per_step"] and decode["mbu"] > 0, decode
rows = [r for r in report["bench"] if r["plan"] == "qwen3_moe-f16-synthetic"]
assert sorted(r["batch"] for r in rows) == [1, 16], rows
assert all((r["active_experts"] == top_k) == (r["batch"] == 1) for r in rows), rows
assert all(r["active_experts"] >= top_k for r in rows), rows
EOF
echo "kit_test: passed"
