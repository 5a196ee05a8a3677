#!/usr/bin/env bash
# `llmc compile --quant mxfp4` on a mixture of experts (qwen3_moe) and a dense model (qwen2_bias),
# and the MXFP4 gpt-oss checkpoint imported as it is: `llmrt inspect` must show the plan's
# FP4_E2M1 codes with their E8M0 scales and PlanMeta.quantization.
# Usage: mxfp4_cli_test.sh LLMC LLMRT FIXTURES_DIR
set -u
llmc=$1
llmrt=$2
fixtures=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failed=0

# check FIXTURE QUANTIZATION EXPERT_TENSOR [llmc options...]
check() {
  local fixture=$1 quantization=$2 tensor=$3
  shift 3
  if ! "$llmc" compile "$fixtures/$fixture" -o "$dir/$fixture.plan" --quiet "$@"; then
    echo "FAIL: llmc compile $fixture $*" >&2
    failed=1
    return
  fi
  local out
  out=$("$llmrt" inspect "$dir/$fixture.plan")
  if ! grep -qF "quantization: $quantization" <<<"$out" ||
    ! grep -qE "^ +[0-9]+ $tensor +fp4_e2m1 " <<<"$out" ||
    ! grep -qE "^ +[0-9]+ $tensor\.scales +e8m0 " <<<"$out"; then
    echo "FAIL: llmrt inspect of $fixture lacks $quantization / $tensor fp4_e2m1 + e8m0 scales" >&2
    failed=1
  fi
}

check qwen3_moe "mxfp4 g32 rtn" 'model\.layers\.0\.mlp\.experts\.gate_up_proj\.weight' --quant mxfp4
check qwen2_bias "mxfp4 g32 rtn, lm_head int8" 'model\.layers\.0\.mlp\.gate_up_proj\.weight' \
  --quant mxfp4 --lm-head-quant int8
check gpt_oss_mxfp4 "mxfp4 g32 mxfp4 (experts; other matmuls float)" \
  'model\.layers\.1\.mlp\.experts\.down_proj'
# An MXFP4 checkpoint is not quantized again.
if "$llmc" compile "$fixtures/gpt_oss_mxfp4" -o "$dir/again.plan" --quiet --quant mxfp4 \
  2>"$dir/err" || ! grep -q "already quantized" "$dir/err"; then
  echo "FAIL: --quant on an MXFP4 checkpoint was not refused" >&2
  failed=1
fi
# A hand-broken copy: modules_to_not_convert naming the experts contradicts their _blocks.
cp -r "$fixtures/gpt_oss_mxfp4" "$dir/broken"
sed -i 's/"lm_head"$/"lm_head", "mlp.experts"/' "$dir/broken/config.json"
if "$llmc" compile "$dir/broken" -o "$dir/broken.plan" --quiet 2>"$dir/err" ||
  ! grep -q 'modules_to_not_convert entry "mlp.experts" matches model.layers.0.mlp.experts' \
    "$dir/err"; then
  echo "FAIL: modules_to_not_convert matching the MXFP4 experts was not refused:" >&2
  cat "$dir/err" >&2
  failed=1
fi
exit $failed
