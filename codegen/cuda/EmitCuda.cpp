//===- EmitCuda.cpp - CUDA C for every kernel a plan's program needs ------===//

#include "codegen/cuda/EmitCuda.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codegen/cuda/KernelSources.inc"
#include "runtime/backend/cpu/kernels.h"
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
    emission.prelude = kKernelParamsSource;
    emission.prelude += kKernelLibrarySource;
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
  absl::Status error(int index, const std::string &message) {
    return absl::UnimplementedError(
        absl::StrFormat("cuda codegen: program op %d (kind %d): %s", index,
                        static_cast<int>(program.ops(index).kind()), message));
  }

  absl::StatusOr<const plan::Value *> value(int index, int32_t id) {
    if (id < 0 || id >= program.values_size())
      return error(index, absl::StrFormat("value %d outside [0, %d)", id, program.values_size()));
    return &program.values(id);
  }

  // Rows per panel of a ROW_PANELS weight, 0 for row-major.
  absl::StatusOr<int> panelRows(int index, int32_t tensor) {
    const plan::Tensor &entry = meta.tensors(tensor);
    if (entry.layout() == plan::Tensor::ROW_MAJOR)
      return 0;
    if (entry.layout() == plan::Tensor::ROW_PANELS && entry.panel_rows() > 0)
      return entry.panel_rows();
    return error(index, absl::StrFormat("tensor %s has layout %d (panel rows %d), which the CUDA "
                                        "kernels cannot read",
                                        entry.name(), static_cast<int>(entry.layout()),
                                        entry.panel_rows()));
  }

  absl::StatusOr<plan::DType> weightDtype(int index, int32_t tensor) {
    if (tensor < 0 || tensor >= meta.tensors_size())
      return error(index, absl::StrFormat("weight %d outside the tensor table [0, %d)", tensor,
                                          meta.tensors_size()));
    return meta.tensors(tensor).dtype();
  }

  // Adds a kernel (or finds the identical one already emitted) and returns its index.
  int32_t add(const std::string &baseName, const std::string &definitions, const std::string &call,
              Kernel info) {
    // The entry name carries a hash of the code, so two different specializations never
    // share a name and identical ones always do.
    const std::string key = definitions + call;
    const uint64_t hash = XXH64(key.data(), key.size(), 0);
    const std::string name = absl::StrFormat("llmc_%s_%08x", baseName, hash & 0xffffffffu);
    auto [it, inserted] = index.emplace(name, static_cast<int32_t>(emission.kernels.size()));
    if (!inserted)
      return it->second;
    EmittedKernel kernel;
    kernel.body = absl::StrCat(
        "\n// ---- ", name, "\n", definitions, "extern \"C\" __global__ void ",
        absl::StrFormat("__launch_bounds__(%d) ", info.block_x()), name,
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
      if (op.outputs_size() != 1 || op.weights_size() != 1)
        return error(index, "EMBED needs one output and one weight");
      auto out = value(index, op.outputs(0));
      if (!out.ok())
        return out.status();
      auto dtype = weightDtype(index, op.weights(0));
      if (!dtype.ok())
        return dtype.status();
      auto panels = panelRows(index, op.weights(0));
      if (!panels.ok())
        return panels.status();
      const int64_t hidden = (*out)->width();
      kernels.push_back(
          add(absl::StrCat("embed_", hidden, "_", dtypeSuffix(*dtype)), "",
              absl::StrFormat("llmc::embed<%d, %s, %d>(p);", hidden, typeName(*dtype), *panels),
              perToken(128)));
      return absl::OkStatus();
    }
    case plan::RMS_NORM:
    case plan::FUSED_ADD_RMS_NORM: {
      const bool fused = op.kind() == plan::FUSED_ADD_RMS_NORM;
      if (op.inputs_size() < 1 || op.weights_size() != 1)
        return error(index, "norm needs an input and a gamma");
      auto dtype = weightDtype(index, op.weights(0));
      if (!dtype.ok())
        return dtype.status();
      if (*dtype != plan::F32)
        return error(index, "norm weights must be F32");
      auto in = value(index, op.inputs(0));
      if (!in.ok())
        return in.status();
      const int64_t width = (*in)->width();
      const int threads = std::min<int>(256, std::max<int>(32, roundUp(width, 32)));
      kernels.push_back(add(absl::StrCat(fused ? "add_rms_norm_" : "rms_norm_", width), "",
                            absl::StrFormat("llmc::rmsNorm<%d, %d, %s>(p, %s);", width, threads,
                                            fused ? "true" : "false", floatLiteral(op.eps())),
                            perToken(threads)));
      return absl::OkStatus();
    }
    case plan::MATMUL:
    case plan::LOGITS:
      return emitMatmul(op, index, kernels);
    case plan::ROPE: {
      if (op.head_dim() <= 0 || op.head_dim() % 2 != 0 || op.num_heads() <= 0)
        return error(index, "ROPE needs positive heads and an even head_dim");
      std::vector<float> inverseFrequencies(op.head_dim() / 2);
      llmrt::cpu::RopeInverseFrequencies(op.rope(), op.head_dim(), inverseFrequencies.data());
      std::string table = "__constant__ float ROPE_TABLE[] = {";
      for (size_t i = 0; i < inverseFrequencies.size(); ++i)
        absl::StrAppend(&table, i ? ", " : "", floatLiteral(inverseFrequencies[i]));
      table += "};\n";
      const int pairs = op.num_heads() * op.head_dim() / 2;
      const int threads = std::min(256, std::max(32, roundUp(pairs, 32)));
      // The table's name must be unique in a module holding every kernel: derive it from the
      // contents, which is what makes two rope kernels different at all.
      const std::string tableName = absl::StrFormat(
          "llmc_rope_table_%08x", XXH64(table.data(), table.size(), 0) & 0xffffffffu);
      std::string definitions = guarded(tableName, table);
      definitions.replace(definitions.find("ROPE_TABLE"), 10, tableName);
      kernels.push_back(add(absl::StrCat("rope_", op.num_heads(), "x", op.head_dim()), definitions,
                            absl::StrFormat("llmc::rope<%d, %d, %d>(p, %s);", op.num_heads(),
                                            op.head_dim(), threads, tableName),
                            perToken(threads)));
      return absl::OkStatus();
    }
    case plan::ATTENTION:
      return emitAttention(op, index, kernels);
    case plan::SILU_MUL:
    case plan::SILU:
    case plan::MUL:
    case plan::ADD: {
      if (op.inputs_size() < 1)
        return error(index, "elementwise op without input");
      auto in = value(index, op.inputs(0));
      if (!in.ok())
        return in.status();
      const int64_t width = (*in)->width();
      const int code = op.kind() == plan::SILU_MUL ? 0
                       : op.kind() == plan::SILU   ? 1
                       : op.kind() == plan::MUL    ? 2
                                                   : 3;
      const char *names[] = {"silu_mul_", "silu_", "mul_", "add_"};
      Kernel info = perToken(kElementwiseThreads);
      info.set_grid_row_multiplier(width);
      info.set_grid_rows_per_block(kElementwiseThreads);
      kernels.push_back(add(absl::StrCat(names[code], width), "",
                            absl::StrFormat("llmc::elementwise<%d, %d>(p);", width, code), info));
      return absl::OkStatus();
    }
    default:
      return error(index, "no CUDA kernel for this op kind");
    }
  }

  absl::Status emitMatmul(const plan::Op &op, int index, std::vector<int32_t> &kernels) {
    const bool logits = op.kind() == plan::LOGITS;
    if (op.inputs_size() != 1 || op.outputs_size() < 1 || op.weights_size() < 1 ||
        op.weights_size() > 2 || (logits && op.outputs_size() != 1))
      return error(index, "matmul needs one input, outputs, and [w] or [w, bias]");
    if (op.outputs_size() > 3)
      return error(index, "more than 3 fused outputs (LlmcKernelParams holds 3)");
    auto in = value(index, op.inputs(0));
    if (!in.ok())
      return in.status();
    auto dtype = weightDtype(index, op.weights(0));
    if (!dtype.ok())
      return dtype.status();
    if (*dtype != plan::F32 && *dtype != plan::F16 && *dtype != plan::BF16)
      return error(index, absl::StrFormat("weight dtype %d has no CUDA matmul", *dtype));
    auto panels = panelRows(index, op.weights(0));
    if (!panels.ok())
      return panels.status();
    const bool bias = op.weights_size() == 2;
    const int64_t k = (*in)->width();
    // The store helper maps column n to (output, column within it); widths are literals.
    std::string store = "struct STORE {\n  static __device__ __forceinline__ void store("
                        "const LlmcKernelParams &p, int row, int n, float value) {\n";
    int64_t begin = 0;
    for (int i = 0; i < op.outputs_size(); ++i) {
      auto out = value(index, op.outputs(i));
      if (!out.ok())
        return out.status();
      const int64_t width = (*out)->width();
      const bool last = i + 1 == op.outputs_size();
      absl::StrAppend(&store, "    ", last ? "" : absl::StrFormat("if (n < %d) ", begin + width),
                      absl::StrFormat("{ ((float *)p.output[%d])[(long long)row * %d + n - %d] "
                                      "= value; return; }\n",
                                      i, width, begin));
      begin += width;
    }
    store += "  }\n};\n";
    const int64_t n = begin;
    const std::string storeName =
        absl::StrFormat("llmc_store_%08x", XXH64(store.data(), store.size(), 0) & 0xffffffffu);
    store.replace(store.find("STORE"), 5, storeName);
    store = guarded(storeName, store);
    const std::string base =
        absl::StrCat(logits ? "logits_" : "gemv_", k, "x", n, "_", dtypeSuffix(*dtype));

    Kernel gemv;
    gemv.set_block_x(kGemvWarps * 32);
    gemv.set_grid_x(static_cast<uint32_t>((n + kGemvWarps - 1) / kGemvWarps));
    gemv.set_grid_y(1);
    gemv.set_grid_z(1);
    gemv.set_grid_scaled_axis(-1);
    kernels.push_back(
        add(base, store,
            absl::StrFormat("llmc::gemv<%d, %d, %s, %d, %s, %s, %d, %d, %s>(p);", k, n,
                            typeName(*dtype), *panels, bias ? "true" : "false",
                            logits ? "true" : "false", kGemvWarps, kGemvRows, storeName),
            gemv));
    if (!logits && (*dtype == plan::F16 || *dtype == plan::BF16)) {
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
          add(absl::StrCat("gemm_mma_", k, "x", n, "_", dtypeSuffix(*dtype)), store,
              absl::StrFormat("llmc::gemmMma<%d, %d, %s, %d, %s, %s>(p);", k, n, typeName(*dtype),
                              *panels, bias ? "true" : "false", storeName),
              gemm));
    }
    return absl::OkStatus();
  }

  absl::Status emitAttention(const plan::Op &op, int index, std::vector<int32_t> &kernels) {
    const int heads = op.num_heads(), kvHeads = op.num_kv_heads(), headDim = op.head_dim();
    if (heads <= 0 || kvHeads <= 0 || headDim <= 0 || heads % kvHeads != 0)
      return error(index, "ATTENTION needs heads a positive multiple of kv heads");
    if (op.sliding_window() < 0 || op.sliding_window() > (int64_t{1} << 30))
      return error(index,
                   absl::StrFormat("sliding_window %d outside [0, 2^30]", op.sliding_window()));
    const int splits = std::clamp((kTargetBlocks + heads - 1) / heads, 1, kMaxSplits);
    const int kvWidth = kvHeads * headDim;
    kernels.push_back(add(absl::StrCat("kv_write_", kvWidth), "",
                          absl::StrFormat("llmc::writeKvCache<%d>(p);", kvWidth), perToken(128)));
    Kernel split = perToken(kAttentionWarps * 32);
    split.set_grid_y(heads);
    split.set_grid_z(splits);
    split.set_scratch_floats_per_token(static_cast<int64_t>(heads) * splits * (headDim + 2));
    kernels.push_back(add(absl::StrCat("attention_", heads, "x", kvHeads, "x", headDim), "",
                          absl::StrFormat("llmc::attentionSplit<%d, %d, %d, %d, %d, %d>(p, %s);",
                                          heads, kvHeads, headDim, splits, op.sliding_window(),
                                          kAttentionWarps, floatLiteral(op.scale())),
                          split));
    Kernel combine = perToken(32);
    combine.set_grid_y(heads);
    combine.set_scratch_floats_per_token(split.scratch_floats_per_token());
    kernels.push_back(
        add(absl::StrCat("attention_combine_", heads, "x", headDim), "",
            absl::StrFormat("llmc::attentionCombine<%d, %d, %d>(p);", heads, headDim, splits),
            combine));
    return absl::OkStatus();
  }

  const plan::PlanMeta &meta;
  const plan::Program &program;
  CudaEmission emission;
  std::map<std::string, int32_t> index;
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
