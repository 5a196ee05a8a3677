//===- EmitCuda.cpp - CUDA C for every kernel a plan's program needs ------===//

#include "codegen/cuda/EmitCuda.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "codegen/cuda/KernelSources.inc"
#include "runtime/backend/cpu/kernels.h"
#include "runtime/backend/cuda/kernel_backend.h"
#include "runtime/plan/dtype.h"
#include "runtime/plan/program_check.h"
#include "xxhash.h"

namespace llmc::cuda {
namespace {

namespace plan = llmrt::plan;
using Kernel = plan::KernelTable::Kernel;

// GEMV: 8 warps per block (256 threads), 4 activation rows per weight read.
constexpr int kGemvWarps = 8;
constexpr int kGemvRows = 4;
// MMA GEMM block tile (see gemmMma in KernelLibrary.cuh).
constexpr int kGemmTileM = 64;
constexpr int kGemmTileN = 32;
// Attention: 4 warps per split block; one decode token should make ~264 blocks.
constexpr int kAttentionWarps = 4;
constexpr int kTargetBlocks = 264;
constexpr int kMaxSplits = 16;
constexpr int kElementwiseThreads = 256;
// Prefill attention: query tiles of llmrt::cuda::kPrefillTileTokens (64: 4 warps x 16 MMA
// rows; the backend makes the tiles). Q fragments live in registers and K/V tiles of 32 keys
// in shared memory, which bounds head_dim: at 128, 64 registers of Q and 64 of output
// accumulators per thread and 35 KiB of shared memory (under the 48 KiB static limit); larger
// heads use the decode kernel for every step.
constexpr int kPrefillMaxHeadDim = 128;
constexpr int kTopKThreads = 256;
// ROUTER: one warp per token, 4 per block. Expert grouping: one block of 256 threads. MoE
// GEMV/GEMM blocks take tiles of at most kGemmTileM routed rows of one expert.
constexpr int kRouterWarps = 4;
constexpr int kGroupThreads = 256;

// The exact value of `value` as a C float literal (hex float: no decimal rounding).
std::string floatLiteral(double value) { return absl::StrFormat("%af", static_cast<float>(value)); }

const char *typeName(plan::DType dtype) {
  switch (dtype) {
  case plan::F16:
    return "__half";
  case plan::BF16:
    return "__nv_bfloat16";
  default:
    return "float";
  }
}

const char *dtypeSuffix(plan::DType dtype) {
  switch (dtype) {
  case plan::F16:
    return "f16";
  case plan::BF16:
    return "bf16";
  case plan::I8:
    return "i8";
  case plan::I4:
    return "i4";
  case plan::FP4_E2M1:
    return "mxfp4";
  default:
    return "f32";
  }
}

// `text` defined once per translation unit: the GEMV and GEMM of one matmul share a store
// helper, q and k rope share a frequency table, and the emulation module holds every kernel.
std::string guarded(const std::string &name, const std::string &text) {
  return absl::StrCat("#ifndef ", name, "_DEFINED\n#define ", name, "_DEFINED\n", text, "#endif\n");
}

int roundUp(int64_t value, int64_t multiple) {
  return static_cast<int>((value + multiple - 1) / multiple * multiple);
}

class Emitter {
public:
  explicit Emitter(const plan::PlanMeta &meta) : meta(meta), program(meta.program()) {}

  absl::StatusOr<CudaEmission> run() {
    // The one program validator (the meta only: blob contents are the runtime's to check); what
    // follows checks only what the kernels additionally need.
    if (absl::StatusOr<plan::ProgramFacts> facts =
            plan::CheckProgram(meta, {}, plan::ProgramScope::kOps);
        !facts.ok())
      return facts.status();
    emission.prelude = kKernelParamsSource;
    emission.prelude += kKernelLibrarySource;
    findFusedRopes();
    for (int index = 0; index < program.ops_size(); ++index) {
      const plan::Op &op = program.ops(index);
      std::vector<int32_t> kernels;
      if (absl::Status status = emitOp(op, index, kernels); !status.ok())
        return status;
      emission.opKernels.push_back(std::move(kernels));
    }
    return std::move(emission);
  }

private:
  // A ROPE op whose output only an ATTENTION op reads (as q or k) is fused into that op's
  // kernels when both its q and k come from such ROPE ops with the attention's head_dim and one
  // rope config: the ROPE op then launches nothing (an empty op binding) and the attention
  // kernels read the ROPE's input and rotate q (attention) and k (KV-cache write) themselves.
  void findFusedRopes() {
    std::vector<int> producer(program.values_size(), -1);
    std::vector<int> readers(program.values_size(), 0);
    for (int index = 0; index < program.ops_size(); ++index) {
      const plan::Op &op = program.ops(index);
      for (int32_t id : op.inputs())
        if (id >= 0 && id < program.values_size())
          ++readers[id];
      for (int32_t id : op.outputs())
        if (id >= 0 && id < program.values_size())
          producer[id] = index;
    }
    for (int index = 0; index < program.ops_size(); ++index) {
      const plan::Op &op = program.ops(index);
      if (op.kind() != plan::ATTENTION || op.inputs_size() != 3)
        continue;
      int ropes[2];
      bool fusable = true;
      for (int i = 0; i < 2; ++i) {
        const int32_t id = op.inputs(i);
        ropes[i] = id >= 0 && id < program.values_size() ? producer[id] : -1;
        if (ropes[i] < 0 || readers[id] != 1) {
          fusable = false;
          continue;
        }
        const plan::Op &rope = program.ops(ropes[i]);
        const plan::AttentionAttrs &attention = op.attention();
        fusable =
            fusable && rope.kind() == plan::ROPE && rope.outputs_size() == 1 &&
            rope.inputs_size() >= 1 && rope.rope().head_dim() == attention.head_dim() &&
            rope.rope().head_dim() % 2 == 0 &&
            rope.rope().num_heads() ==
                (i == 0 ? attention.num_heads() : attention.num_kv_heads()) &&
            // The attention kernels' ropeElement rotates all of head_dim without a cos/sin
            // scale; a partial or scaled rope (Phi-4-mini's, LongRoPE's) runs as its own kernel.
            plan::RotaryDim(rope.rope().config(), rope.rope().head_dim()) ==
                rope.rope().head_dim() &&
            plan::RopeCosSinScale(rope.rope().config()) == 1.0;
      }
      if (!fusable || program.ops(ropes[0]).rope().config().SerializeAsString() !=
                          program.ops(ropes[1]).rope().config().SerializeAsString())
        continue;
      fusedRopes.insert(ropes[0]);
      fusedRopes.insert(ropes[1]);
      attentionRope[index] = ropes[0];
    }
  }

  // The rope inverse-frequency table of `op` as a `__constant__` array, named by its contents
  // (which is what makes two rope kernels different): returns {definitions, name}.
  std::pair<std::string, std::string> ropeTable(const plan::Op &op) {
    const plan::RopeAttrs &rope = op.rope();
    std::vector<float> inverseFrequencies(plan::RotaryDim(rope.config(), rope.head_dim()) / 2);
    llmrt::cpu::RopeInverseFrequencies(rope.config(), rope.head_dim(), inverseFrequencies.data());
    std::string table = "__constant__ float ROPE_TABLE[] = {";
    for (size_t i = 0; i < inverseFrequencies.size(); ++i)
      absl::StrAppend(&table, i ? ", " : "", floatLiteral(inverseFrequencies[i]));
    table += "};\n";
    const std::string tableName =
        absl::StrFormat("llmc_rope_table_%08x", XXH64(table.data(), table.size(), 0) & 0xffffffffu);
    std::string definitions = guarded(tableName, table);
    definitions.replace(definitions.find("ROPE_TABLE"), 10, tableName);
    return {definitions, tableName};
  }

  absl::Status error(int index, const std::string &message) {
    return absl::UnimplementedError(
        absl::StrFormat("cuda codegen: program op %d (kind %d): %s", index,
                        static_cast<int>(program.ops(index).kind()), message));
  }

  int64_t width(int32_t value) const { return program.values(value).width(); }

  // Rows per panel of a ROW_PANELS weight, 0 for row-major (CheckProgram admits no other layout
  // for a float matrix).
  int panelRows(int32_t tensor) const {
    const plan::Tensor &entry = meta.tensors(tensor);
    return entry.layout() == plan::Tensor::ROW_PANELS ? entry.panel_rows() : 0;
  }

  // Adds a kernel (or finds the identical one already emitted) and returns its index.
  // `minBlocksPerSm` > 0 goes to __launch_bounds__: ptxas then budgets registers for that many
  // resident blocks instead of its own occupancy target.
  int32_t add(const std::string &baseName, const std::string &definitions, const std::string &call,
              Kernel info, int minBlocksPerSm = 0) {
    // The entry name carries a hash of the code, so two different specializations never
    // share a name and identical ones always do.
    const std::string launchBounds =
        minBlocksPerSm > 0
            ? absl::StrFormat("__launch_bounds__(%d, %d) ", info.block_x(), minBlocksPerSm)
            : absl::StrFormat("__launch_bounds__(%d) ", info.block_x());
    const std::string key =
        minBlocksPerSm > 0 ? definitions + launchBounds + call : definitions + call;
    const uint64_t hash = XXH64(key.data(), key.size(), 0);
    const std::string name = absl::StrFormat("llmc_%s_%08x", baseName, hash & 0xffffffffu);
    auto [it, inserted] = index.emplace(name, static_cast<int32_t>(emission.kernels.size()));
    if (!inserted)
      return it->second;
    EmittedKernel kernel;
    kernel.body = absl::StrCat(
        "\n// ---- ", name, "\n", definitions, "extern \"C\" __global__ void ", launchBounds, name,
        "(const LlmcKernelParams p) {\n  ", call, "\n}\nLLMC_REGISTER_KERNEL(", name, ")\n");
    info.set_name(name);
    kernel.info = std::move(info);
    emission.kernels.push_back(std::move(kernel));
    return it->second;
  }

  static Kernel perToken(int threads) {
    Kernel info;
    info.set_block_x(threads);
    info.set_grid_x(1);
    info.set_grid_y(1);
    info.set_grid_z(1);
    info.set_grid_scaled_axis(0);
    info.set_grid_rows(Kernel::GRID_ROWS_TOKENS);
    info.set_grid_row_multiplier(1);
    info.set_grid_rows_per_block(1);
    return info;
  }

  absl::Status emitOp(const plan::Op &op, int index, std::vector<int32_t> &kernels) {
    switch (op.kind()) {
    case plan::EMBED: {
      const plan::DType dtype = meta.tensors(op.weights(0)).dtype();
      if (dtype != plan::F32 && dtype != plan::F16 && dtype != plan::BF16)
        return error(index, absl::StrFormat("embedding dtype %s has no CUDA kernel",
                                            plan::DType_Name(dtype)));
      const int64_t hidden = width(op.outputs(0));
      // plan.proto EmbedAttrs: the scale as the table's dtype holds it (0: none).
      float scale = op.has_embed() ? static_cast<float>(op.embed().scale()) : 0.0f;
      if (dtype == plan::F16)
        scale = plan::F16ToF32(plan::F32ToF16(scale));
      else if (dtype == plan::BF16)
        scale = plan::Bf16ToF32(plan::F32ToBf16(scale));
      kernels.push_back(
          add(absl::StrCat("embed_", hidden, "_", dtypeSuffix(dtype)), "",
              absl::StrFormat("llmc::embed<%d, %s, %d>(p, %s);", hidden, typeName(dtype),
                              panelRows(op.weights(0)), floatLiteral(scale)),
              perToken(128)));
      return absl::OkStatus();
    }
    case plan::RMS_NORM:
    case plan::FUSED_ADD_RMS_NORM: {
      const bool fused = op.kind() == plan::FUSED_ADD_RMS_NORM;
      // A gamma shorter than the row normalizes each group of its length (a per-head norm):
      // the kernel sees [tokens * groups, group] rows, one block each.
      const int64_t group = meta.tensors(op.weights(0)).shape(0);
      const int threads = std::min<int>(256, std::max<int>(32, roundUp(group, 32)));
      Kernel geometry = perToken(threads);
      geometry.set_grid_row_multiplier(width(op.inputs(0)) / group);
      kernels.push_back(
          add(absl::StrCat(fused ? "add_rms_norm_" : "rms_norm_", group), "",
              absl::StrFormat("llmc::rmsNorm<%d, %d, %s>(p, %s);", group, threads,
                              fused ? "true" : "false", floatLiteral(op.norm().eps())),
              geometry));
      return absl::OkStatus();
    }
    case plan::MATMUL:
    case plan::LOGITS:
      return emitMatmul(op, index, kernels);
    case plan::ROPE: {
      const plan::RopeAttrs &rope = op.rope();
      if (fusedRopes.count(index))
        return absl::OkStatus(); // applied by the attention kernels
      const auto [definitions, tableName] = ropeTable(op);
      const int rotaryDim = plan::RotaryDim(rope.config(), rope.head_dim());
      const int pairs = rope.num_heads() * rope.head_dim() / 2;
      const int threads = std::min(256, std::max(32, roundUp(pairs, 32)));
      kernels.push_back(add(
          absl::StrCat("rope_", rope.num_heads(), "x", rope.head_dim(),
                       rotaryDim == rope.head_dim() ? "" : absl::StrCat("_rot", rotaryDim)),
          definitions,
          absl::StrFormat("llmc::rope<%d, %d, %d, %d>(p, %s, %s);", rope.num_heads(),
                          rope.head_dim(), threads, rotaryDim, tableName,
                          floatLiteral(static_cast<float>(plan::RopeCosSinScale(rope.config())))),
          perToken(threads)));
      return absl::OkStatus();
    }
    case plan::ATTENTION:
      return emitAttention(op, index, kernels);
    case plan::SILU_MUL:
    case plan::GELU_TANH_MUL:
    case plan::SILU:
    case plan::MUL:
    case plan::ADD:
    case plan::CLAMPED_SWIGLU: {
      const int64_t elements = width(op.inputs(0));
      static_assert(LLMC_OP_SILU == plan::SILU && LLMC_OP_MUL == plan::MUL &&
                        LLMC_OP_ADD == plan::ADD && LLMC_OP_SILU_MUL == plan::SILU_MUL &&
                        LLMC_OP_GELU_TANH_MUL == plan::GELU_TANH_MUL &&
                        LLMC_OP_CLAMPED_SWIGLU == plan::CLAMPED_SWIGLU,
                    "kernel_params.h's LlmcElementwiseOp must be plan.proto's OpKind numbers");
      std::string name = plan::OpKind_Name(op.kind());
      std::transform(name.begin(), name.end(), name.begin(), ::tolower);
      Kernel info = perToken(kElementwiseThreads);
      info.set_grid_row_multiplier(elements);
      info.set_grid_rows_per_block(kElementwiseThreads);
      // SwigluAttrs (checked finite and > 0 by CheckProgram) as exact f32 literals.
      const std::string attrs = op.kind() == plan::CLAMPED_SWIGLU
                                    ? absl::StrCat(", ", floatLiteral(op.swiglu().alpha()), ", ",
                                                   floatLiteral(op.swiglu().limit()))
                                    : "";
      kernels.push_back(add(
          absl::StrCat(name, "_", elements), "",
          absl::StrFormat("llmc::elementwise<%d, %d>(p%s);", elements, op.kind(), attrs), info));
      return absl::OkStatus();
    }
    case plan::ROUTER: {
      const plan::RouterAttrs &router = op.router();
      Kernel info = perToken(kRouterWarps * 32);
      info.set_grid_rows_per_block(kRouterWarps);
      kernels.push_back(
          add(absl::StrCat("router_", router.num_experts(), "_top", router.top_k()), "",
              absl::StrFormat("llmc::router<%d, %d, %d, %s, %d>(p);", router.num_experts(),
                              router.top_k(), static_cast<int>(router.scoring()),
                              router.normalize() ? "true" : "false", kRouterWarps),
              info));
      return absl::OkStatus();
    }
    case plan::MOE_COMBINE: {
      const int64_t hidden = width(op.outputs(0));
      const int64_t topK = width(op.inputs(1));
      const bool shared = op.inputs_size() == 4;
      const int threads = std::min<int>(256, std::max<int>(32, roundUp(hidden, 32)));
      kernels.push_back(
          add(absl::StrCat("moe_combine_", hidden, "_top", topK, shared ? "_shared" : ""), "",
              absl::StrFormat("llmc::moeCombine<%d, %d, %s, %d>(p);", hidden, topK,
                              shared ? "true" : "false", threads),
              perToken(threads)));
      return absl::OkStatus();
    }
    case plan::EXPERT_MATMUL:
      return emitExpertMatmul(op, index, kernels);
    default:
      return error(index, "no CUDA kernel for this op kind");
    }
  }

  absl::Status emitMatmul(const plan::Op &op, int index, std::vector<int32_t> &kernels) {
    const bool logits = op.kind() == plan::LOGITS;
    if (op.outputs_size() > 3)
      return error(index, "more than 3 fused outputs (LlmcKernelParams holds 3)");
    const plan::DType dtype = meta.tensors(op.weights(0)).dtype();
    const bool quantized = dtype == plan::I8 || dtype == plan::I4 || dtype == plan::FP4_E2M1;
    const bool bias = op.weights_size() == 2;
    const int64_t k = width(op.inputs(0));
    const auto [store, storeName, n] = storeHelper(op, 1);
    if (quantized)
      return emitQuantizedMatmul(op, k, n, bias, store, storeName, kernels);
    const int panels = panelRows(op.weights(0));
    const std::string base =
        absl::StrCat(logits ? "logits_" : "gemv_", k, "x", n, "_", dtypeSuffix(dtype));

    Kernel gemv;
    gemv.set_block_x(kGemvWarps * 32);
    gemv.set_grid_x(static_cast<uint32_t>((n + kGemvWarps - 1) / kGemvWarps));
    gemv.set_grid_y(1);
    gemv.set_grid_z(1);
    gemv.set_grid_scaled_axis(-1);
    kernels.push_back(
        add(base, store,
            absl::StrFormat("llmc::gemv<%d, %d, %s, %d, %s, %s, %d, %d, %s>(p);", k, n,
                            typeName(dtype), panels, bias ? "true" : "false",
                            logits ? "true" : "false", kGemvWarps, kGemvRows, storeName),
            gemv));
    if (!logits && (dtype == plan::F16 || dtype == plan::BF16)) {
      Kernel gemm;
      gemm.set_block_x(128);
      gemm.set_grid_x(static_cast<uint32_t>((n + kGemmTileN - 1) / kGemmTileN));
      gemm.set_grid_y(1);
      gemm.set_grid_z(1);
      gemm.set_grid_scaled_axis(1);
      gemm.set_grid_rows(Kernel::GRID_ROWS_TOKENS);
      gemm.set_grid_row_multiplier(1);
      gemm.set_grid_rows_per_block(kGemmTileM);
      kernels.push_back(
          add(absl::StrCat("gemm_mma_", k, "x", n, "_", dtypeSuffix(dtype)), store,
              absl::StrFormat("llmc::gemmMma<%d, %d, %s, %d, %s, %s>(p);", k, n, typeName(dtype),
                              panels, bias ? "true" : "false", storeName),
              gemm));
    }
    if (logits)
      kernels.push_back(logitsTopK(n));
    return absl::OkStatus();
  }

  // The store helper of a matmul: maps column n of the fused weight to (output, column within
  // it) and writes row `row` there; widths are literals. EXPERT_MATMUL (rowsPerToken = top_k)
  // stores routed rows, so each output is viewed as [T top_k, width / top_k]. Returns
  // {definitions, name, N}.
  std::tuple<std::string, std::string, int64_t> storeHelper(const plan::Op &op,
                                                            int64_t rowsPerToken) {
    std::string store = "struct STORE {\n  static __device__ __forceinline__ void store("
                        "const LlmcKernelParams &p, int row, int n, float value) {\n";
    // LOGITS' soft-cap (plan.proto LogitsAttrs) applies to every logit as it is stored.
    if (op.kind() == plan::LOGITS && op.has_logits())
      absl::StrAppend(&store, "    value = llmc::softCap(value, ",
                      floatLiteral(op.logits().softcap()), ");\n");
    int64_t begin = 0;
    for (int i = 0; i < op.outputs_size(); ++i) {
      const int64_t columns = width(op.outputs(i)) / rowsPerToken;
      const bool last = i + 1 == op.outputs_size();
      absl::StrAppend(&store, "    ", last ? "" : absl::StrFormat("if (n < %d) ", begin + columns),
                      absl::StrFormat("{ ((float *)p.output[%d])[(long long)row * %d + n - %d] "
                                      "= value; return; }\n",
                                      i, columns, begin));
      begin += columns;
    }
    store += "  }\n};\n";
    const std::string storeName =
        absl::StrFormat("llmc_store_%08x", XXH64(store.data(), store.size(), 0) & 0xffffffffu);
    store.replace(store.find("STORE"), 5, storeName);
    return {guarded(storeName, store), storeName, begin};
  }

  // The quantization template arguments (kBits, kFp4, kAsymmetric, kGroup) of an I8 / I4 /
  // FP4_E2M1 matrix and its name tag: {arguments, tag}.
  std::pair<std::string, std::string> quantScheme(const plan::Tensor &weight) {
    const plan::Quantization &quant = weight.quantization();
    const bool fp4 = weight.dtype() == plan::FP4_E2M1;
    const int bits = weight.dtype() == plan::I8 ? 8 : 4;
    const int64_t group = quant.group_size();
    const bool asymmetric = quant.scheme() == plan::Quantization::ASYMMETRIC;
    const std::string tag = absl::StrCat(fp4         ? "mxfp4"
                                         : bits == 4 ? "i4"
                                                     : "i8",
                                         "g", group, asymmetric ? "a" : "");
    return {absl::StrFormat("%d, %s, %s, %d", bits, fp4 ? "true" : "false",
                            asymmetric ? "true" : "false", group),
            tag};
  }

  // EXPERT_MATMUL: [group, gemv, gemm] (KernelLibrary.cuh's expert kernels; gemm for 16-bit and
  // quantized weights, like MATMUL's). CheckProgram checked the shapes: w [E, N, K], ids from a
  // ROUTER with E experts, x of width K or top_k K.
  absl::Status emitExpertMatmul(const plan::Op &op, int index, std::vector<int32_t> &kernels) {
    if (op.outputs_size() > 3)
      return error(index, "more than 3 fused outputs (LlmcKernelParams holds 3)");
    const plan::Tensor &weight = meta.tensors(op.weights(0));
    const int experts = op.expert().num_experts(), topK = op.expert().top_k();
    const int64_t k = weight.shape(2);
    const bool slotInput = width(op.inputs(0)) != k;
    const bool bias = op.weights_size() == 2;
    std::string store, storeName;
    int64_t n = 0;
    std::tie(store, storeName, n) = storeHelper(op, topK);
    const plan::DType dtype = weight.dtype();
    const bool quantized = dtype == plan::I8 || dtype == plan::I4 || dtype == plan::FP4_E2M1;
    if (!quantized && dtype != plan::F32 && dtype != plan::F16 && dtype != plan::BF16)
      return error(index, absl::StrFormat("expert weight dtype %s has no CUDA kernel",
                                          plan::DType_Name(dtype)));
    Kernel group;
    group.set_block_x(kGroupThreads);
    group.set_grid_x(1);
    group.set_grid_y(1);
    group.set_grid_z(1);
    group.set_grid_scaled_axis(-1);
    // KernelLibrary.cuh's ExpertTables: 1 + (E + 1) + 3 (ceil(T k / 64) + E) + T k ints, and
    // ceil(T k / 64) <= T ceil(k / 64).
    group.set_scratch_floats_per_token(topK + 3 * ((topK + kGemmTileM - 1) / kGemmTileM));
    group.set_scratch_floats_fixed(2 + 4 * int64_t{experts});
    kernels.push_back(add(
        absl::StrCat("expert_group_", experts, "_top", topK), "",
        absl::StrFormat("llmc::expertGroup<%d, %d, %d>(p);", experts, topK, kGroupThreads), group));
    // Both matmul kernels take tile y of the grouping: ceil(T k / 64) + E blocks.
    auto tiled = [&](int threads, int64_t columnsPerBlock) {
      Kernel info;
      info.set_block_x(threads);
      info.set_grid_x(static_cast<uint32_t>((n + columnsPerBlock - 1) / columnsPerBlock));
      info.set_grid_y(1);
      info.set_grid_z(1);
      info.set_grid_scaled_axis(1);
      info.set_grid_rows(Kernel::GRID_ROWS_TOKENS);
      info.set_grid_row_multiplier(topK);
      info.set_grid_rows_per_block(kGemmTileM);
      info.set_grid_extra_blocks(experts);
      return info;
    };
    const std::string routing =
        absl::StrFormat("%d, %d, %s, %d, %d", experts, topK, slotInput ? "true" : "false", k, n);
    const std::string shape = absl::StrCat(experts, "x", k, "x", n, slotInput ? "s" : "");
    const char *biasFlag = bias ? "true" : "false";
    if (quantized) {
      const auto [args, tag] = quantScheme(weight);
      kernels.push_back(
          add(absl::StrCat("expert_gemv_", shape, "_", tag), store,
              absl::StrFormat("llmc::expertGemvQuant<%s, %s, %s, %d, %d, %s>(p);", routing, args,
                              biasFlag, kGemvWarps, kGemvRows, storeName),
              tiled(kGemvWarps * 32, kGemvWarps)));
      kernels.push_back(add(absl::StrCat("expert_gemm_mma_", shape, "_", tag), store,
                            absl::StrFormat("llmc::expertGemmMmaQuant<%s, %s, %s, %s>(p);", routing,
                                            args, biasFlag, storeName),
                            tiled(128, kGemmTileN)));
      return absl::OkStatus();
    }
    const int panels = panelRows(op.weights(0));
    kernels.push_back(
        add(absl::StrCat("expert_gemv_", shape, "_", dtypeSuffix(dtype)), store,
            absl::StrFormat("llmc::expertGemv<%s, %s, %d, %s, %d, %d, %s>(p);", routing,
                            typeName(dtype), panels, biasFlag, kGemvWarps, kGemvRows, storeName),
            tiled(kGemvWarps * 32, kGemvWarps)));
    if (dtype == plan::F16 || dtype == plan::BF16)
      kernels.push_back(add(absl::StrCat("expert_gemm_mma_", shape, "_", dtypeSuffix(dtype)), store,
                            absl::StrFormat("llmc::expertGemmMma<%s, %s, %d, %s, %s>(p);", routing,
                                            typeName(dtype), panels, biasFlag, storeName),
                            tiled(128, kGemmTileN)));
    return absl::OkStatus();
  }

  // The prefilter after the logits GEMV (KernelLibrary.cuh logitsTopK): one block per row.
  int32_t logitsTopK(int64_t vocab) {
    Kernel info = perToken(kTopKThreads);
    info.set_grid_rows(Kernel::GRID_ROWS_LOGITS);
    const int64_t topK = std::min<int64_t>(llmrt::cuda::kLogitsTopK, vocab);
    return add(absl::StrCat("logits_top", topK, "_", vocab), "",
               absl::StrFormat("llmc::logitsTopK<%d, %d>(p);", vocab, topK), info);
  }

  // MATMUL / LOGITS over an I8 or I4 matrix (plan.proto's Quantization contract, which
  // plan::CheckProgram checked): gemvQuant, plus gemmMmaQuant for MATMUL.
  absl::Status emitQuantizedMatmul(const plan::Op &op, int64_t k, int64_t n, bool bias,
                                   const std::string &store, const std::string &storeName,
                                   std::vector<int32_t> &kernels) {
    const bool logits = op.kind() == plan::LOGITS;
    const plan::Tensor &weight = meta.tensors(op.weights(0));
    const bool permuted = weight.quantization().has_input_permutation();
    const auto [schemeArgs, schemeTag] = quantScheme(weight);
    const std::string scheme = absl::StrCat(schemeTag, permuted ? "p" : "");
    const std::string quantArgs =
        absl::StrFormat("%s, %s", schemeArgs, permuted ? "true" : "false");
    Kernel gemv;
    gemv.set_block_x(kGemvWarps * 32);
    gemv.set_grid_x(static_cast<uint32_t>((n + kGemvWarps - 1) / kGemvWarps));
    gemv.set_grid_y(1);
    gemv.set_grid_z(1);
    gemv.set_grid_scaled_axis(-1);
    kernels.push_back(
        add(absl::StrCat(logits ? "logits_" : "gemv_", k, "x", n, "_", scheme), store,
            absl::StrFormat("llmc::gemvQuant<%d, %d, %s, %s, %s, %d, %d, %s>(p);", k, n, quantArgs,
                            bias ? "true" : "false", logits ? "true" : "false", kGemvWarps,
                            kGemvRows, storeName),
            gemv));
    if (logits) {
      kernels.push_back(logitsTopK(n));
      return absl::OkStatus();
    }
    Kernel gemm;
    gemm.set_block_x(128);
    gemm.set_grid_x(static_cast<uint32_t>((n + kGemmTileN - 1) / kGemmTileN));
    gemm.set_grid_y(1);
    gemm.set_grid_z(1);
    gemm.set_grid_scaled_axis(1);
    gemm.set_grid_rows(Kernel::GRID_ROWS_TOKENS);
    gemm.set_grid_row_multiplier(1);
    gemm.set_grid_rows_per_block(kGemmTileM);
    kernels.push_back(add(absl::StrCat("gemm_mma_", k, "x", n, "_", scheme), store,
                          absl::StrFormat("llmc::gemmMmaQuant<%d, %d, %s, %s, %s>(p);", k, n,
                                          quantArgs, bias ? "true" : "false", storeName),
                          gemm));
    return absl::OkStatus();
  }

  // The KV cache's element type: KvCacheSpec.dtype F32 (or unset), F16, BF16 or I8 (codes with
  // per-token, per-kv-head scales, KernelLibrary.cuh's llmc::i8).
  absl::StatusOr<const char *> kvType(int index) {
    switch (meta.kv_cache().dtype()) {
    case plan::DTYPE_UNSPECIFIED:
    case plan::F32:
      return "float";
    case plan::F16:
      return "__half";
    case plan::BF16:
      return "__nv_bfloat16";
    case plan::I8:
      return "llmc::i8";
    default:
      return error(index, absl::StrFormat("KV cache dtype %s has no CUDA kernels (F32, F16, "
                                          "BF16 and I8 do)",
                                          plan::DType_Name(meta.kv_cache().dtype())));
    }
  }

  absl::Status emitAttention(const plan::Op &op, int index, std::vector<int32_t> &kernels) {
    const plan::AttentionAttrs &attention = op.attention();
    const int heads = attention.num_heads(), kvHeads = attention.num_kv_heads(),
              headDim = attention.head_dim();
    auto kv = kvType(index);
    if (!kv.ok())
      return kv.status();
    // Fused rope: the table of the q ROPE op (findFusedRopes checked k's is the same).
    std::string definitions, table = "(const float *)0";
    const bool rope = attentionRope.count(index) != 0;
    if (rope)
      std::tie(definitions, table) = ropeTable(program.ops(attentionRope[index]));
    const char *ropeFlag = rope ? "true" : "false";
    // AttentionAttrs.logit_softcap: the kernels' capped variants (no tanh in the others).
    const bool softcap = attention.logit_softcap() > 0;
    const std::string suffix =
        absl::StrCat(rope ? "_rope" : "", "_", dtypeSuffix(meta.kv_cache().dtype()));
    const int splits = std::clamp((kTargetBlocks + heads - 1) / heads, 1, kMaxSplits);
    const int kvWidth = kvHeads * headDim;
    kernels.push_back(add(absl::StrCat("kv_write_", kvWidth, suffix), definitions,
                          absl::StrFormat("llmc::writeKvCache<%d, %d, %s, %s>(p, %s);", kvWidth,
                                          headDim, ropeFlag, *kv, table),
                          perToken(128)));
    Kernel split = perToken(kAttentionWarps * 32);
    split.set_grid_y(heads);
    split.set_grid_z(splits);
    split.set_scratch_floats_per_token(static_cast<int64_t>(heads) * splits * (headDim + 2));
    kernels.push_back(add(
        absl::StrCat("attention_", heads, "x", kvHeads, "x", headDim, suffix), definitions,
        softcap ? absl::StrFormat(
                      "llmc::attentionSplitCapped<%d, %d, %d, %d, %d, %d, %s, %s, true>(p, %s, %s, "
                      "%s);",
                      heads, kvHeads, headDim, splits, attention.sliding_window(), kAttentionWarps,
                      ropeFlag, *kv, floatLiteral(plan::SoftmaxScale(attention)),
                      floatLiteral(attention.logit_softcap()), table)
                : absl::StrFormat(
                      "llmc::attentionSplit<%d, %d, %d, %d, %d, %d, %s, %s>(p, %s, %s);", heads,
                      kvHeads, headDim, splits, attention.sliding_window(), kAttentionWarps,
                      ropeFlag, *kv, floatLiteral(plan::SoftmaxScale(attention)), table),
        split));
    // Sinks (gpt-oss: weights [sinks]) enter where the softmax is completed: the combine and
    // the prefill kernel; the splits are unchanged.
    const bool sinks = op.weights_size() == 1;
    Kernel combine = perToken(32);
    combine.set_grid_y(heads);
    combine.set_scratch_floats_per_token(split.scratch_floats_per_token());
    kernels.push_back(add(
        absl::StrCat("attention_combine_", heads, "x", headDim, sinks ? "_sinks" : ""), "",
        sinks ? absl::StrFormat("llmc::attentionCombine<%d, %d, %d, true>(p);", heads, headDim,
                                splits)
              : absl::StrFormat("llmc::attentionCombine<%d, %d, %d>(p);", heads, headDim, splits),
        combine));
    if (headDim <= kPrefillMaxHeadDim) {
      Kernel prefill = perToken(128);
      prefill.set_grid_y(heads);
      prefill.set_grid_rows_per_block(llmrt::cuda::kPrefillTileTokens);
      kernels.push_back(
          add(absl::StrCat("attention_prefill_", heads, "x", kvHeads, "x", headDim, suffix,
                           sinks ? "_sinks" : ""),
              definitions,
              softcap || sinks
                  ? absl::StrFormat(
                        "llmc::attentionPrefillCapped<%d, %d, %d, %d, %s, %s, %s, %s>(p, %s, %s, "
                        "%s);",
                        heads, kvHeads, headDim, attention.sliding_window(), ropeFlag, *kv,
                        softcap ? "true" : "false", sinks ? "true" : "false",
                        floatLiteral(plan::SoftmaxScale(attention)),
                        floatLiteral(attention.logit_softcap()), table)
                  : absl::StrFormat("llmc::attentionPrefill<%d, %d, %d, %d, %s, %s>(p, %s, %s);",
                                    heads, kvHeads, headDim, attention.sliding_window(), ropeFlag,
                                    *kv, floatLiteral(plan::SoftmaxScale(attention)), table),
              prefill,
              // Over an f32 cache P and V are split in three (KernelLibrary.cuh): ptxas' own
              // register target then left 4-12 bytes of spills around the rope's sin/cos call on
              // sm_80 at head_dim 16 and 32; one resident block lets it take the registers.
              // The sinks' two registers did the same over an f16 cache on sm_90 (8 bytes).
              meta.kv_cache().dtype() == plan::F32 || sinks ? 1 : 0));
    }
    return absl::OkStatus();
  }

  const plan::PlanMeta &meta;
  const plan::Program &program;
  CudaEmission emission;
  std::map<std::string, int32_t> index;
  std::set<int> fusedRopes;         // ROPE ops that launch nothing
  std::map<int, int> attentionRope; // ATTENTION op -> its (q) ROPE op, when fused
};

} // namespace

std::string CudaEmission::moduleSource() const {
  std::string source = prelude;
  for (const EmittedKernel &kernel : kernels)
    source += kernel.body;
  return source;
}

plan::KernelTable CudaEmission::kernelTable(const std::string &target) const {
  plan::KernelTable table;
  table.set_target(target);
  for (const EmittedKernel &kernel : kernels) {
    plan::KernelTable::Kernel *entry = table.add_kernels();
    *entry = kernel.info;
    const std::string source = prelude + kernel.body;
    entry->set_source_hash(XXH64(source.data(), source.size(), 0));
  }
  for (const std::vector<int32_t> &ops : opKernels) {
    plan::KernelTable::OpKernels *entry = table.add_op_kernels();
    for (int32_t kernel : ops)
      entry->add_kernels(kernel);
  }
  return table;
}

absl::StatusOr<CudaEmission> emitCuda(const plan::PlanMeta &meta) { return Emitter(meta).run(); }

} // namespace llmc::cuda
