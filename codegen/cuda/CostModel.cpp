//===- CostModel.cpp - Bytes, FLOPs and expected GPU time per kernel ------===//

#include "codegen/cuda/CostModel.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codegen/cuda/EmitCuda.h"
#include "runtime/backend/cuda/kernel_backend.h"
#include "runtime/plan/plan_reader.h"

namespace llmc::cuda {

namespace plan = llmrt::plan;

double KernelCost::seconds(const GpuSpec &gpu) const {
  return std::max(bytes / gpu.bandwidth, flops / (mma ? gpu.mmaFlops : gpu.vectorFlops));
}

namespace {

// The emitted entry name without its hash: "llmc_gemv_64x128_f16_1a2b3c4d" -> "gemv_64x128_f16".
std::string kernelKind(const std::string &name) {
  std::string kind = name.rfind("llmc_", 0) == 0 ? name.substr(5) : name;
  const size_t hash = kind.rfind('_');
  return hash == std::string::npos ? kind : kind.substr(0, hash);
}

// Bytes of an [n, k] matrix tensor with its quantization side tensors.
double matrixBytes(const plan::PlanMeta &meta, int32_t tensor) {
  const plan::Tensor &w = meta.tensors(tensor);
  double elements = 1;
  for (int64_t extent : w.shape())
    elements *= static_cast<double>(extent);
  double bytes = elements * plan::DTypeBits(w.dtype()) / 8;
  if (w.dtype() == plan::I8 || w.dtype() == plan::I4 || w.dtype() == plan::FP4_E2M1) {
    const plan::Quantization &q = w.quantization();
    const double groups = elements / std::max(1, q.group_size());
    // f16 scales; MXFP4's E8M0 scales are one byte.
    bytes += groups * (w.dtype() == plan::FP4_E2M1 ? 1 : 2) + (q.has_zero_points() ? groups : 0) +
             (q.has_input_permutation() && w.shape_size() == 2 ? w.shape(1) * 4.0 : 0);
  }
  return bytes;
}

// MMAs per 16-bit product of the GEMMs (KernelLibrary.cuh gemmMma, gemmMmaQuant): activations
// split hi + lo for f16 weights, in three parts for bf16 and quantized weights.
double mmaParts(plan::DType weight) { return weight == plan::F16 ? 2 : 3; }

} // namespace

absl::StatusOr<std::vector<KernelCost>> estimateStep(const plan::PlanMeta &meta, int tokens,
                                                     int context) {
  if (tokens <= 0 || context < tokens)
    return absl::InvalidArgumentError(
        absl::StrFormat("cost model: %d tokens in a context of %d", tokens, context));
  absl::StatusOr<CudaEmission> emission = emitCuda(meta);
  if (!emission.ok())
    return emission.status();
  const plan::Program &program = meta.program();
  const double t = tokens;
  const plan::DType kvDtype = meta.kv_cache().dtype();
  const double kvElementBytes = kvDtype == plan::F16 || kvDtype == plan::BF16 ? 2
                                : kvDtype == plan::I8                         ? 1
                                                                              : 4;
  std::vector<KernelCost> rows;
  std::map<std::string, size_t> rowOf; // kernel kind -> row
  auto add = [&](const std::string &kernel, const std::string &what, double bytes, double flops,
                 bool mma) {
    const std::string kind = kernelKind(kernel);
    auto [it, inserted] = rowOf.emplace(kind, rows.size());
    if (!inserted) {
      ++rows[it->second].count;
      return;
    }
    KernelCost cost;
    cost.what = absl::StrCat(what, ": ", kind);
    cost.bytes = bytes;
    cost.flops = flops;
    cost.mma = mma;
    rows.push_back(cost);
  };
  for (int index = 0; index < program.ops_size(); ++index) {
    const plan::Op &op = program.ops(index);
    const std::vector<int32_t> &kernels = emission->opKernels[index];
    auto name = [&](size_t i) { return emission->kernels[kernels[i]].info.name(); };
    auto width = [&](int32_t value) { return static_cast<double>(program.values(value).width()); };
    const std::string weightName = op.weights_size() > 0 ? meta.tensors(op.weights(0)).name() : "";
    // "model.layers.0.self_attn.qkv_proj.weight" -> "qkv_proj"
    std::string what = weightName;
    if (const size_t end = what.rfind(".weight"); end != std::string::npos)
      what = what.substr(0, end);
    if (const size_t dot = what.rfind('.'); dot != std::string::npos)
      what = what.substr(dot + 1);
    switch (op.kind()) {
    case plan::EMBED: {
      const double hidden = width(op.outputs(0));
      add(name(0), "embed",
          t * hidden * (plan::DTypeBits(meta.tensors(op.weights(0)).dtype()) / 8 + 4), 0, false);
      break;
    }
    case plan::RMS_NORM:
    case plan::FUSED_ADD_RMS_NORM: {
      const double w = width(op.inputs(0));
      const int streams = op.kind() == plan::FUSED_ADD_RMS_NORM ? 4 : 2; // reads + writes
      add(name(0), op.kind() == plan::RMS_NORM ? "rms_norm" : "add_rms_norm",
          t * w * 4 * streams + w * 4, t * w * 5, false);
      break;
    }
    case plan::MATMUL:
    case plan::LOGITS: {
      const double k = width(op.inputs(0));
      double n = 0;
      for (int32_t out : op.outputs())
        n += width(out);
      const double rowsOut = op.kind() == plan::LOGITS ? 1 : t; // one logit row per sequence
      const double weights = matrixBytes(meta, op.weights(0));
      const bool gemm =
          op.kind() == plan::MATMUL && kernels.size() == 2 && tokens > llmrt::cuda::kGemvMaxTokens;
      if (gemm) {
        // Weights from DRAM once per 64-token row tile (a matrix of tens of MB does not stay in
        // L2); the activations (T x K f32: 4 MB at T = 512, K = 2048) are re-read by every
        // 32-column tile but from L2, so DRAM sees them once. Two or three MMAs (the activation
        // parts) per product.
        const double rowTiles = std::ceil(t / 64);
        add(name(1), what, rowTiles * weights + t * k * 4 + t * n * 4,
            mmaParts(meta.tensors(op.weights(0)).dtype()) * 2 * t * n * k, true);
      } else {
        add(name(0), what, weights + rowsOut * k * 4 + rowsOut * n * 4, 2 * rowsOut * n * k, false);
      }
      if (op.kind() == plan::LOGITS && kernels.size() == 2) {
        // Five passes over the row (4 radix-select histograms, the compaction), from L2.
        add(name(1), "logits top-k", 5 * n * 4 + 2 * 64 * 4, 5 * n, false);
      }
      break;
    }
    case plan::ROPE: {
      if (kernels.empty())
        break; // fused into attention
      const double w = width(op.inputs(0));
      add(name(0), "rope", t * w * 8, t * w * 4, false);
      break;
    }
    case plan::ATTENTION: {
      const double heads = op.attention().num_heads(), kvHeads = op.attention().num_kv_heads(),
                   d = op.attention().head_dim();
      const double kvWidth = kvHeads * d;
      // Bytes per cached element; an int8 cache adds one f32 scale per head_dim elements.
      const double kvBytes = kvElementBytes + (kvDtype == plan::I8 ? 4 / d : 0);
      add(name(0), "kv_write", t * kvWidth * (2 * 4 + 2 * kvBytes), t * kvWidth * 8, false);
      // Keys visible to the step's query i (its index in the sequence is context - tokens + i).
      auto visible = [&](double query) {
        const double keys = query + 1;
        return op.attention().sliding_window() > 0
                   ? std::min<double>(keys, op.attention().sliding_window())
                   : keys;
      };
      const bool prefill = kernels.size() == 4 && tokens > llmrt::cuda::kPrefillMinTokens;
      if (prefill) {
        // Per 64-query tile: each kv head's visible K and V read once (the heads of a group
        // share them through L2), Q read and O written once; QK^T and PV are 3 MMAs each.
        double kvRead = 0, flops = 0;
        for (int first = 0; first < tokens; first += 64) {
          const int last = std::min(tokens, first + 64) - 1;
          const double lastQuery = context - tokens + last;
          const double firstKey =
              op.attention().sliding_window() > 0
                  ? std::max(0.0, context - tokens + first - op.attention().sliding_window() + 1.0)
                  : 0.0;
          const double keys = lastQuery + 1 - firstKey;
          kvRead += kvHeads * keys * d * kvBytes * 2;
          flops += 3 * 2 * 2 * 64 * keys * d * heads;
        }
        add(name(3), "attention (prefill, tiled)", kvRead + 2 * t * heads * d * 4, flops, true);
      } else {
        double kvRead = 0, flops = 0;
        for (int i = 0; i < tokens; ++i) {
          const double keys = visible(context - tokens + i);
          kvRead += kvHeads * keys * d * kvBytes * 2;
          flops += 4 * heads * keys * d;
        }
        const auto &split = emission->kernels[kernels[1]].info;
        const double splits = split.grid_z();
        const double partials = t * heads * splits * (d + 2) * 4;
        add(name(1), absl::StrFormat("attention split (%d splits)", split.grid_z()),
            kvRead + t * heads * d * 4 + partials, flops, false);
        add(name(2), "attention_combine", partials + t * heads * d * 4, t * heads * splits * d * 2,
            false);
      }
      break;
    }
    case plan::ROUTER: {
      const double experts = op.router().num_experts(), topK = op.router().top_k();
      add(name(0), "router", t * experts * 4 + t * topK * 8, t * experts * (4 + topK), false);
      break;
    }
    case plan::EXPERT_MATMUL: {
      const double experts = op.expert().num_experts(), topK = op.expert().top_k();
      const double k = static_cast<double>(meta.tensors(op.weights(0)).shape(2));
      double n = 0;
      for (int32_t out : op.outputs())
        n += width(out) / topK;
      const double routed = t * topK;
      // Grouping: ids read twice, the sorted rows and tiles written.
      add(name(0), "expert grouping", routed * 12 + experts * 16, routed * 2, false);
      // Uniform routing: the step's distinct experts, E (1 - (1 - k/E)^T); only their bytes
      // are read (weights, scales, bias).
      const double distinct = experts * (1 - std::pow(1 - topK / experts, t));
      const double perExpert = (matrixBytes(meta, op.weights(0)) +
                                (op.weights_size() == 2 ? matrixBytes(meta, op.weights(1)) : 0)) /
                               experts;
      const double activations = (width(op.inputs(0)) * t + routed * n) * 4;
      const bool gemm = kernels.size() == 3 && tokens > llmrt::cuda::kGemvMaxTokens;
      if (gemm) {
        // Each chosen expert's weights once per 64-row tile of its routed rows.
        const double tiles = distinct * std::ceil(routed / distinct / 64);
        add(name(2), what, tiles * perExpert + activations,
            mmaParts(meta.tensors(op.weights(0)).dtype()) * 2 * routed * n * k, true);
      } else {
        add(name(1), what, distinct * perExpert + activations, 2 * routed * n * k, false);
      }
      break;
    }
    case plan::MOE_COMBINE: {
      const double hidden = width(op.outputs(0)), topK = width(op.inputs(1));
      const double shared = op.inputs_size() == 4 ? hidden + 1 : 0;
      add(name(0), "moe_combine", t * (topK * hidden + topK + shared + hidden) * 4,
          t * (topK + (shared > 0 ? 1 : 0)) * hidden * 2, false);
      break;
    }
    case plan::SILU_MUL:
    case plan::GELU_TANH_MUL:
    case plan::CLAMPED_SWIGLU:
    case plan::SILU:
    case plan::MUL:
    case plan::ADD: {
      const double w = width(op.inputs(0));
      const int inputs = op.kind() == plan::SILU ? 1 : 2;
      add(name(0), plan::OpKind_Name(op.kind()), t * w * 4 * (inputs + 1), t * w * 4, false);
      break;
    }
    default:
      break;
    }
  }
  return rows;
}

absl::StatusOr<std::string> costTable(const plan::PlanMeta &meta, int tokens, int context) {
  absl::StatusOr<std::vector<KernelCost>> rows = estimateStep(meta, tokens, context);
  if (!rows.ok())
    return rows.status();
  std::string table = absl::StrFormat(
      "#### %d token%s, context %d\n\n| kernel | launches | bytes moved | FLOPs | %s | %s |\n"
      "|---|---|---|---|---|---|\n",
      tokens, tokens == 1 ? "" : "s", context, kH200.name, kA100.name);
  double total[2] = {0, 0};
  for (const KernelCost &row : *rows) {
    const double h200 = row.seconds(kH200), a100 = row.seconds(kA100);
    const auto time = [&](double seconds, const GpuSpec &gpu) {
      const bool compute =
          row.flops / (row.mma ? gpu.mmaFlops : gpu.vectorFlops) > row.bytes / gpu.bandwidth;
      return absl::StrFormat("%.2f us%s", seconds * 1e6, compute ? " (c)" : "");
    };
    absl::StrAppendFormat(&table, "| %s | %d | %.3f MB | %.4f GFLOP%s | %s | %s |\n", row.what,
                          row.count, row.bytes / 1e6, row.flops / 1e9, row.mma ? " (mma)" : "",
                          time(h200, kH200), time(a100, kA100));
    total[0] += row.count * h200;
    total[1] += row.count * a100;
  }
  absl::StrAppendFormat(&table,
                        "\n(c): compute-bound. Whole step, every launch at its bound, no launch "
                        "overhead: %s %.1f us, %s %.1f us.\n",
                        kH200.name, total[0] * 1e6, kA100.name, total[1] * 1e6);
  return table;
}

} // namespace llmc::cuda
