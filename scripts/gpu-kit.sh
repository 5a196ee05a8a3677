#!/usr/bin/env bash
# scripts/gpu-kit.sh OUT_DIR [BUILD_DIR] [--reduced]: the GPU kit (docs/cuda.md, "The GPU kit").
#
# Packs, from a built tree (default build/), a self-contained folder for a lent GPU machine that
# has the NVIDIA driver, CUDA 13 and Python but none of this project's libraries:
#   bin/    llmrt, llmrt_backend_cuda_test, llmrt-kit (tests/kit: test, bench, probe, plan;
#           stripped; RUNPATH $ORIGIN/../lib)
#   lib/    every shared library they need that is not glibc's own (from ldd; RUNPATH $ORIGIN,
#           so each finds its own dependencies there too). libcuda.so.1 is the driver's, dlopened.
#   plans/  plans compiled here: stories260K (f32, f16, int8) with --target cpu,cuda:sm_80,sm_90;
#           the transformers fixtures (every architecture option, every --quant mode, the
#           imported GPTQ / AWQ / MXFP4 checkpoints, the mixture-of-experts families) with
#           --target cpu,cuda:sm_90, since each CUDA table costs ~0.25 MB a plan and the lent
#           GPUs (H100, H200) run sm_90 (+ the compute_90 PTX every plan carries)
#   big/    llama-110m- (f16, int4 g32) and TinyLlama-shaped (f16) synthetic models and the
#           mixture-of-experts shapes Qwen3-MoE-1.6B-A0.4B (f16, int4 g32) and gpt-oss-2b-a0.5b
#           (MXFP4 experts) (llmc synth, --target cpu,cuda:sm_80,sm_90) as skeletons (llmrt-kit
#           plan strip): 270 MB, 2.2 GB, 3.3 GB, 1.4 GB and 1.8 GB as plans, ~0.4 MiB each
#           packed, filled in on the device by run.sh. KIT_TINYLLAMA=0 / KIT_MOE=0 leave the
#           TinyLlama / MoE ones out
#   run.sh, report.py, MANIFEST
# OUT_DIR holds these packed into kit.tar.xz, with MANIFEST and a run.sh that unpacks the archive
# under $TMPDIR and runs the kit's run.sh (scripts/kit/unpack-and-run.sh): the lent machine
# receives at most 64 MiB with the working tree (~34 MiB), and the files are ~60 MiB unpacked.
# --reduced (the ctest kit_clean_env): two plans and two small skeletons (stories260K f16 and the
# qwen3_moe fixture, so filling expert stacks and the MoE CPU bench run too), for a quick check
# that the kit is complete and runs in a clean environment.
#
# The packed kit must stay under KIT_MAX_MIB (28: the lent machine receives at most 64 MiB, the
# rest is the working tree); the script measures it and fails above, and warns when the tree
# and the kit together pass 64 MiB. Plans compile with the NVRTC cache in BUILD_DIR/kit-cache,
# so a second build reuses the kernels. Exit status: 0 success, 1 failure, 2 usage error.
set -euo pipefail

usage() {
  echo "usage: scripts/gpu-kit.sh OUT_DIR [BUILD_DIR (default build)] [--reduced]" >&2
  exit 2
}
die() {
  echo "gpu-kit: $*" >&2
  exit 1
}

REDUCED=0
POSITIONAL=()
for argument in "$@"; do
  case "$argument" in
    --reduced) REDUCED=1 ;;
    -h | --help) usage ;;
    -*) echo "gpu-kit: unknown flag $argument" >&2; usage ;;
    *) POSITIONAL+=("$argument") ;;
  esac
done
[[ ${#POSITIONAL[@]} -ge 1 && ${#POSITIONAL[@]} -le 2 ]] || usage
OUT=${POSITIONAL[0]}
BUILD=${POSITIONAL[1]:-build}
SOURCE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KIT_MAX_MIB=${KIT_MAX_MIB:-28}

[[ -d $BUILD/bin ]] || die "$BUILD/bin does not exist: build the tree first (cmake -S . -B $BUILD -G Ninja && cmake --build $BUILD)"
BUILD=$(cd "$BUILD" && pwd)
BINARIES=(llmrt llmrt_backend_cuda_test llmrt-kit)
missing=()
for binary in llmc "${BINARIES[@]}"; do
  [[ -x $BUILD/bin/$binary ]] || missing+=("$binary")
done
[[ ${#missing[@]} -eq 0 ]] ||
  die "$BUILD/bin lacks ${missing[*]}: cmake --build $BUILD --target ${missing[*]}"
for tool in patchelf strip ldd xz; do
  command -v "$tool" > /dev/null || die "$tool not found (apt-get install patchelf xz-utils)"
done
LLMC=$BUILD/bin/llmc

# Built beside OUT and renamed onto it at the end: a failed build leaves no half kit behind.
OUT=$(realpath -m "$OUT")
STAGE="$OUT.partial.$$"
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/gpu-kit.XXXXXX")
trap 'rm -rf "$STAGE" "$SCRATCH"' EXIT
mkdir -p "$STAGE"/{bin,lib,plans,big}
export LLMC_CACHE_DIR=${LLMC_CACHE_DIR:-$BUILD/kit-cache}

# ---- programs and libraries ----
# glibc's own libraries (and the loader) come with every Linux; anything else travels.
is_glibc() {
  case "$1" in
    linux-vdso.so.* | ld-linux-x86-64.so.* | libc.so.* | libm.so.* | libdl.so.* | \
      libpthread.so.* | librt.so.* | libresolv.so.* | libutil.so.* | libmvec.so.*) return 0 ;;
  esac
  return 1
}
declare -A LIBRARIES=()
for binary in "${BINARIES[@]}"; do
  strip --strip-unneeded -o "$STAGE/bin/$binary" "$BUILD/bin/$binary"
  patchelf --set-rpath '$ORIGIN/../lib' "$STAGE/bin/$binary"
  while read -r name arrow path _; do
    [[ $arrow == "=>" ]] || continue
    is_glibc "$name" && continue
    [[ $path == /* ]] || die "ldd: $binary needs $name, which is not found here"
    LIBRARIES[$name]=$path
  done < <(ldd "$BUILD/bin/$binary")
done
for name in "${!LIBRARIES[@]}"; do
  cp -L "${LIBRARIES[$name]}" "$STAGE/lib/$name"
  chmod u+w "$STAGE/lib/$name"
  patchelf --set-rpath '$ORIGIN' "$STAGE/lib/$name"
done

# ---- plans ----
TARGET=cpu,cuda:sm_80,sm_90
PLANS_LOG="$SCRATCH/llmc.log"
# compile_to PLAN MODEL_DIR [llmc flags...]; compile NAME MODEL_DIR [...] -> plans/NAME.plan
compile_to() {
  local plan=$1 model=$2
  shift 2
  if ! "$LLMC" compile "$model" -o "$plan" --target "$TARGET" --quiet "$@" > "$PLANS_LOG" 2>&1; then
    cat "$PLANS_LOG" >&2
    die "llmc compile $model $* failed (above)"
  fi
}
compile() {
  local name=$1
  shift
  compile_to "$STAGE/plans/$name.plan" "$@"
}
# skeleton NAME PLAN [kit-plan flags...] -> big/NAME.skel
skeleton() {
  local name=$1 plan=$2
  shift 2
  "$BUILD/bin/llmrt-kit" plan strip "$plan" "$STAGE/big/$name.skel" "$@" ||
    die "llmrt-kit plan strip $plan failed"
}
FIXTURES=$SOURCE/tests/fixtures
STORIES=$SOURCE/tests/data/stories260K
# A bf16 KV cache rounds K and V to 8 bits, beyond the kernels' 1e-3 tolerance against the CPU
# (EmulatedBackends.h says why): bf16 plans keep an f32 cache, as the emulation tests do.
BF16=(--dtype bf16 --kv-cache f32)

if [[ $REDUCED == 1 ]]; then
  compile stories260K-f32 "$STORIES" --dtype f32
  compile llama_mha-int4-g32-asym "$FIXTURES/llama_mha" --dtype f32 --quant int4 --group-size 32 \
    --scheme asymmetric
  compile_to "$SCRATCH/stories260K-f16.plan" "$STORIES" --dtype f16
  # Small threshold: the skeleton really has its matrices stripped, so fill is exercised.
  skeleton stories260K-f16-synthetic "$SCRATCH/stories260K-f16.plan" --min-bytes 4096
  # The fixture's expert stacks are 16-64 KiB: 512 strips them, the routers and the scales.
  compile_to "$SCRATCH/qwen3_moe-f16.plan" "$FIXTURES/qwen3_moe" --dtype f16
  skeleton qwen3_moe-f16-synthetic "$SCRATCH/qwen3_moe-f16.plan" --min-bytes 512
else
  # stories260K: the real trained model, in a float, a half and a quantized format.
  compile stories260K-f32 "$STORIES" --dtype f32
  compile stories260K-f16 "$STORIES" --dtype f16
  compile stories260K-int8 "$STORIES" --dtype f32 --quant int8
  # The fixtures: every architecture option (GQA, tied embeddings, llama3 and linear rope
  # scaling, sharded bf16 checkpoint, sliding window, qkv bias) in f16, bf16 or f32.
  TARGET=cpu,cuda:sm_90
  compile llama_mha-f16 "$FIXTURES/llama_mha" --dtype f16
  compile llama_gqa_tied-f16 "$FIXTURES/llama_gqa_tied" --dtype f16
  compile llama3_rope-bf16 "$FIXTURES/llama3_rope" "${BF16[@]}"
  compile llama_sharded_bf16-bf16 "$FIXTURES/llama_sharded_bf16" "${BF16[@]}"
  compile mistral_sliding-f16 "$FIXTURES/mistral_sliding" --dtype f16
  compile qwen2_bias-f32 "$FIXTURES/qwen2_bias" --dtype f32
  # Every --quant mode: int8 per channel (stories260K-int8), int8 g32, int8 lm_head, int4 g32 /
  # g64 symmetric (the imported GPTQ) and asymmetric; with bias and sliding windows; the
  # imported GPTQ (act-order too) and AWQ.
  compile llama_mha-int8-lm-head "$FIXTURES/llama_mha" --dtype f32 --quant int8 --lm-head-quant int8
  compile llama_mha-int4-g32-asym "$FIXTURES/llama_mha" --dtype f32 --quant int4 --group-size 32 \
    --scheme asymmetric
  compile llama_mha-int4-g64 "$FIXTURES/llama_mha" --dtype f32 --quant int4 --group-size 64
  compile llama_mha-int4-g64-asym "$FIXTURES/llama_mha" --dtype f32 --quant int4 --group-size 64 \
    --scheme asymmetric
  compile qwen2_bias-int4-g32-asym "$FIXTURES/qwen2_bias" --dtype f32 --quant int4 \
    --group-size 32 --scheme asymmetric
  compile mistral_sliding-int8-g32 "$FIXTURES/mistral_sliding" --dtype f32 --quant int8 \
    --group-size 32
  compile llama_gptq "$FIXTURES/llama_gptq" --dtype f32
  compile llama_gptq_actorder "$FIXTURES/llama_gptq_actorder" --dtype f32
  compile llama_awq "$FIXTURES/llama_awq" --dtype f32
  # Mixture of experts: routing (softmax-top-k with and without renormalisation, top-k-softmax
  # with a router bias), a shared expert, expert biases, the clamped SwiGLU, attention sinks; the
  # expert GEMV/GEMM in a float, int4 and MXFP4 (quantized here and imported from gpt-oss).
  compile qwen3_moe-f16 "$FIXTURES/qwen3_moe" --dtype f16
  compile qwen2_moe_shared-f32 "$FIXTURES/qwen2_moe_shared" --dtype f32
  compile mixtral_moe-bf16 "$FIXTURES/mixtral_moe" "${BF16[@]}"
  compile gpt_oss-bf16 "$FIXTURES/gpt_oss" "${BF16[@]}"
  compile qwen3_moe-int4-g32 "$FIXTURES/qwen3_moe" --dtype f32 --quant int4 --group-size 32
  compile mixtral_moe-mxfp4 "$FIXTURES/mixtral_moe" --dtype f32 --quant mxfp4
  compile gpt_oss_mxfp4 "$FIXTURES/gpt_oss_mxfp4" --dtype f32
  TARGET=cpu,cuda:sm_80,sm_90

  # Synthetic models for speed: random weights, so only their skeletons travel.
  synth() {
    local name=$1 preset=$2
    shift 2
    if [[ ! -d $SCRATCH/$preset ]]; then
      "$LLMC" synth --preset "$preset" -o "$SCRATCH/$preset" --dtype f16 > "$PLANS_LOG" 2>&1 ||
        { cat "$PLANS_LOG" >&2; die "llmc synth --preset $preset failed"; }
    fi
    compile_to "$SCRATCH/$name.plan" "$SCRATCH/$preset" "$@"
    skeleton "$name" "$SCRATCH/$name.plan"
    rm -f "$SCRATCH/$name.plan"
  }
  synth llama-110m-f16 llama-110m --dtype f16
  synth llama-110m-int4-g32 llama-110m --dtype f16 --quant int4 --group-size 32
  rm -rf "$SCRATCH/llama-110m"
  if [[ ${KIT_TINYLLAMA:-1} == 1 ]]; then
    synth tinyllama-1.1b-f16 tinyllama-1.1b --dtype f16
    rm -rf "$SCRATCH/tinyllama-1.1b"
  fi
  # Mixture of experts at real proportions: Qwen3-MoE (64 experts, top-8) in f16 and int4, and
  # gpt-oss (32 experts, top-4, experts MXFP4 as the checkpoint ships them). Their skeletons
  # lack every expert stack and router: ~0.4 MiB each packed, most of it the tokenizer.
  if [[ ${KIT_MOE:-1} == 1 ]]; then
    synth qwen3-moe-1.6b-a0.4b-f16 qwen3-moe-1.6b-a0.4b --dtype f16
    synth qwen3-moe-1.6b-a0.4b-int4-g32 qwen3-moe-1.6b-a0.4b --dtype f16 --quant int4 \
      --group-size 32
    rm -rf "$SCRATCH/qwen3-moe-1.6b-a0.4b"
    synth gpt-oss-2b-a0.5b-mxfp4 gpt-oss-2b-a0.5b --dtype f16
    rm -rf "$SCRATCH/gpt-oss-2b-a0.5b"
  fi
fi

# ---- scripts ----
cp "$SOURCE/scripts/kit/run.sh" "$SOURCE/scripts/kit/report.py" "$STAGE/"
chmod +x "$STAGE/run.sh"
{
  echo "llmrt GPU kit, built $(date -u +%Y-%m-%dT%H:%M:%SZ) from $(git -C "$SOURCE" rev-parse --short HEAD 2> /dev/null || echo unknown)$(git -C "$SOURCE" diff --quiet HEAD 2> /dev/null || echo '+changes') on $(uname -m)"
  echo "run: bash run.sh REPORT_DIR   (docs/cuda.md, \"The GPU kit\")"
  (cd "$STAGE" && find . -type f ! -name MANIFEST -printf '%s %p\n' | sort -k2)
} > "$STAGE/MANIFEST"

# ---- pack ----
# One xz archive (about a quarter of the files' size) and the script that unpacks and runs it.
PACKED="$OUT.packed.$$"
trap 'rm -rf "$STAGE" "$SCRATCH" "$PACKED"' EXIT
mkdir -p "$PACKED"
tar -cf - -C "$STAGE/.." --transform "s|^$(basename "$STAGE")|kit|" "$(basename "$STAGE")" |
  xz -9 -T0 > "$PACKED/kit.tar.xz" || die "packing the kit failed"
cp "$SOURCE/scripts/kit/unpack-and-run.sh" "$PACKED/run.sh"
cp "$STAGE/MANIFEST" "$PACKED/MANIFEST"
chmod +x "$PACKED/run.sh"
unpacked=$(du -sb "$STAGE" | cut -f1)
bytes=$(du -sb "$PACKED" | cut -f1)
mib=$(( (bytes + (1 << 20) - 1) >> 20 ))
if (( bytes > KIT_MAX_MIB << 20 )); then
  du -sh "$STAGE"/* >&2
  die "the kit is $mib MiB packed, over KIT_MAX_MIB=$KIT_MAX_MIB"
fi
# What travels to the lent machine is the working tree plus the carried kit, at most 64 MiB.
tree=$( (cd "$SOURCE" && { git ls-files -z; git ls-files -z --others --exclude-standard; } |
  xargs -0 stat -c %s 2> /dev/null | awk '{s += $1} END {print s + 0}') || echo 0)
if (( tree + bytes > 64 << 20 )); then
  echo "gpu-kit: warning: the working tree ($(( tree >> 20 )) MiB) and the kit ($mib MiB) are" \
    "over the 64 MiB a lent machine receives; build with --reduced or KIT_TINYLLAMA=0" >&2
fi
echo "gpu-kit: $OUT: $mib MiB packed, $(( unpacked >> 20 )) MiB unpacked ($(ls "$STAGE/plans" | wc -l) plans, $(ls "$STAGE/big" | wc -l) skeletons, $(ls "$STAGE/lib" | wc -l) libraries)"
rm -rf "$OUT"
mv "$PACKED" "$OUT"
