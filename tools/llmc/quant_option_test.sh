#!/usr/bin/env bash
# llmc compile's refusals of --quant combinations it does not implement: each must exit with the
# given status, name the option in its message and write no plan.
# Usage: quant_option_test.sh LLMC MOE_FIXTURE_DIR
set -u
llmc=$1
moe=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failed=0

# expect STATUS MESSAGE_REGEX ARGS...
expect() {
  local status=$1 pattern=$2
  shift 2
  local out rc
  out=$("$llmc" compile "$moe" -o "$dir/plan" "$@" 2>&1)
  rc=$?
  if [[ $rc -ne $status ]] || ! grep -qE -- "$pattern" <<<"$out" || [[ -e $dir/plan ]]; then
    echo "FAIL: llmc compile $* exited $rc (want $status), output:" >&2
    echo "$out" | head -5 >&2
    failed=1
  fi
}

expect 2 '--group-size: --quant mxfp4 has one scale per 32 columns, found 64' \
  --quant mxfp4 --group-size 64
expect 2 '--scheme: --quant mxfp4 is symmetric' --quant mxfp4 --scheme asymmetric
expect 2 '--gptq: not available with --quant mxfp4' --quant mxfp4 --gptq
expect 2 '--awq: not available with --quant mxfp4' --quant mxfp4 --awq
expect 1 '--awq: .*describes a mixture of experts \(8 experts\)' --quant int4 --awq
exit $failed
