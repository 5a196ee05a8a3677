#include "runtime/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/backend/cpu/dispatch.h"
#include "runtime/backend/cpu/kernels.h"
#include "runtime/backend/cpu/quant_kv_attention.h"
#include "runtime/backend/cpu/quant_matmul.h"
#include "runtime/backend/cpu/quant_matmul_exact.h"
#include "runtime/backend/step_batch_check.h"
#include "runtime/kv/kv_storage.h"
#include "runtime/plan/plan_reader.h"
#include "runtime/threading/thread_pool.h"

namespace llmrt::cpu {

bool CpuSupports(plan::OpKind kind, plan::DType weight_dtype) {
  const bool matrix_dtype = weight_dtype == plan::F32 || weight_dtype == plan::F16 ||
                            weight_dtype == plan::BF16 || IsQuantizedMatrix(weight_dtype);
  switch (kind) {
    case plan::EMBED:
    case plan::MATMUL:
    case plan::LOGITS:
      return matrix_dtype;
    case plan::RMS_NORM:
    case plan::FUSED_ADD_RMS_NORM:
      return weight_dtype == plan::F32;
    case plan::ROPE:
    case plan::ATTENTION:
    case plan::SILU:
    case plan::MUL:
    case plan::ADD:
    case plan::SILU_MUL:
      return weight_dtype == plan::DTYPE_UNSPECIFIED;
    default:
      return false;
  }
}

namespace {

// 64 bytes: a cache line, and the widest SIMD register (AVX-512) the kernels use.
constexpr size_t kArenaAlignment = 64;

struct AlignedFree {
  void operator()(float* pointer) const {
    ::operator delete[](pointer, std::align_val_t(kArenaAlignment));
  }
};
using AlignedFloats = std::unique_ptr<float[], AlignedFree>;

AlignedFloats AllocateFloats(int64_t count) {
  void* memory = ::operator new[](static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(float),
                                  std::align_val_t(kArenaAlignment), std::nothrow);
  return AlignedFloats(static_cast<float*>(memory));
}

// An op with every value and weight resolved to a pointer.
struct CompiledOp {
  plan::OpKind kind = plan::OP_UNSPECIFIED;
  int32_t index = 0;  // in program.ops, for messages
  // Activation inputs/outputs; the integer inputs (token ids, positions) come from the batch.
  const float* input[3] = {nullptr, nullptr, nullptr};
  float* output[2] = {nullptr, nullptr};
  int64_t width = 0;  // row width of input[0] (the K of a matmul)
  MatrixView weight;
  const float* vector_weight = nullptr;  // gamma of a norm, bias of a matmul
  std::vector<MatMulOutput> matmul_outputs;
  float eps = 0.0f;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t layer = 0;
  int64_t sliding_window = 0;
  float scale = 0.0f;
  std::vector<float> inv_freq;
};

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  bool Supports(plan::OpKind kind, plan::DType weight_dtype) const override {
    return CpuSupports(kind, weight_dtype);
  }
  absl::Status AllocateKvCache(int32_t num_blocks, int32_t block_size) override;
  absl::Status RunStep(const StepBatch& batch, float* logits) override;
  absl::Status CopyKvBlock(int32_t source, int32_t destination) override;
  int32_t max_tokens_per_step() const override { return max_tokens_; }
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t arena_bytes() const override { return arena_bytes_; }
  int64_t kv_cache_bytes() const override {
    return kv_ == nullptr ? 0 : static_cast<int64_t>(kv_->size_bytes());
  }

  absl::Status Compile(const plan::PlanMeta& meta, const BlobLookup& blobs,
                       const BackendOptions& options);

 private:
  absl::Status CheckBatch(const StepBatch& batch) const;
  void RunAttention(const CompiledOp& op, const StepBatch& batch);
  void RunMatMul(const CompiledOp& op, int64_t num_rows, const int32_t* input_rows,
                 const MatMulOutput* outputs, int32_t num_outputs);

  int32_t max_tokens_ = 0;
  MatmulObserver matmul_observer_;  // BackendOptions::matmul_observer
  QuantizedActivations quantized_mode_ = QuantizedActivations::kInt8;  // BackendOptions'
  int64_t vocab_size_ = 0;
  int64_t max_token_id_ = std::numeric_limits<int64_t>::max();  // exclusive, from EMBED tables
  int64_t arena_bytes_ = 0;
  AlignedFloats arena_;
  std::vector<CompiledOp> ops_;
  std::unique_ptr<threading::ThreadPool> pool_;
  AlignedFloats scratch_;  // per thread: rope cos/sin
  int64_t scratch_stride_ = 0;
  AlignedFloats attention_scratch_;  // per thread: AttentionScratchFloats
  // Quantized activations of the widest quantized matmul at max_tokens_ rows
  // (QuantizedActivationBytes); empty when no matmul is quantized.
  AlignedFloats quantized_activations_;
  int64_t attention_scratch_stride_ = 0;
  // KV cache shape, taken from the ATTENTION ops.
  int32_t kv_layers_ = 0;
  int32_t kv_heads_ = 0;
  int32_t kv_head_dim_ = 0;
  int32_t block_size_ = 0;
  plan::DType kv_dtype_ = plan::F32;  // kv::ResolveKvDType of the options and the plan
  std::unique_ptr<kv::KvStorage> kv_;
  std::vector<int32_t> token_sequence_;  // batch row -> index in batch.sequences
  // Per batch row, for attention: the sequence's block table and the token's index in it.
  std::vector<const int32_t*> token_block_table_;
  std::vector<int64_t> token_index_;
};

// Builds CompiledOps from a program, checking everything a kernel relies on.
class ProgramCompiler {
 public:
  ProgramCompiler(const plan::PlanMeta& meta, const BlobLookup& blobs, int32_t max_tokens,
                  float* arena)
      : meta_(meta), blobs_(blobs), max_tokens_(max_tokens), arena_(arena) {}

  absl::Status CheckValues() {
    const plan::Program& program = meta_.program();
    const int64_t per_token = program.arena_bytes_per_token();
    for (int id = 0; id < program.values_size(); ++id) {
      const plan::Value& value = program.values(id);
      if (value.width() <= 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("program value %d (%s): width must be positive, got %d", id,
                            value.name(), value.width()));
      }
      if (value.kind() == plan::Value::ACTIVATION) {
        if (value.dtype() != plan::F32 && value.dtype() != plan::DTYPE_UNSPECIFIED) {
          return absl::UnimplementedError(absl::StrFormat(
              "program value %d (%s): the cpu backend keeps activations in F32, the plan asks "
              "for dtype %d",
              id, value.name(), static_cast<int>(value.dtype())));
        }
        const int64_t offset = value.arena_offset_per_token();
        if (offset < 0 || offset % sizeof(float) != 0 ||
            value.width() > (per_token - offset) / static_cast<int64_t>(sizeof(float))) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "program value %d (%s): %d floats at arena offset %d per token do not fit in "
              "arena_bytes_per_token %d (or the offset is not a multiple of 4)",
              id, value.name(), value.width(), offset, per_token));
        }
      } else if ((value.kind() == plan::Value::TOKEN_IDS ||
                  value.kind() == plan::Value::POSITIONS) &&
                 value.width() != 1) {
        return absl::InvalidArgumentError(
            absl::StrFormat("program value %d (%s): token ids and positions have width 1, got %d",
                            id, value.name(), value.width()));
      } else if (value.kind() == plan::Value::LOGITS) {
        if (vocab_size_ != 0 && vocab_size_ != value.width()) {
          return absl::InvalidArgumentError(
              absl::StrFormat("program value %d (%s): a second LOGITS value of width %d (the "
                              "first has %d)",
                              id, value.name(), value.width(), vocab_size_));
        }
        vocab_size_ = value.width();
      } else if (value.kind() < plan::Value::ACTIVATION || value.kind() > plan::Value::LOGITS) {
        return absl::InvalidArgumentError(absl::StrFormat("program value %d (%s): unknown kind %d",
                                                          id, value.name(), value.kind()));
      }
    }
    if (vocab_size_ == 0) {
      return absl::InvalidArgumentError("program: no LOGITS value, nothing to compute");
    }
    return absl::OkStatus();
  }

  absl::StatusOr<CompiledOp> CompileOp(int index) {
    const plan::Op& op = meta_.program().ops(index);
    op_ = &op;
    op_index_ = index;
    CompiledOp compiled;
    compiled.kind = op.kind();
    compiled.index = index;
    switch (op.kind()) {
      case plan::EMBED: {
        if (auto status = CheckCounts(1, 1, 1, 1); !status.ok()) return status;
        if (auto status = CheckInputKind(0, plan::Value::TOKEN_IDS); !status.ok()) return status;
        auto out = Activation(op.outputs(0), "output 0");
        if (!out.ok()) return out.status();
        auto table = Matrix(op.weights(0), -1, (*out)->width());
        if (!table.ok()) return table.status();
        compiled.weight = *table;
        compiled.output[0] = OutputPointer(op.outputs(0));
        compiled.width = (*out)->width();
        max_token_id_ = std::min(max_token_id_, table->rows);
        break;
      }
      case plan::RMS_NORM:
      case plan::FUSED_ADD_RMS_NORM: {
        const bool fused = op.kind() == plan::FUSED_ADD_RMS_NORM;
        const int count = fused ? 2 : 1;
        if (auto status = CheckCounts(count, count, count, count); !status.ok()) return status;
        auto width = SameWidthActivations(count, count);
        if (!width.ok()) return width.status();
        auto gamma = Vector(op.weights(0), *width);
        if (!gamma.ok()) return gamma.status();
        if (!(op.eps() >= 0.0)) return Error(absl::StrFormat("eps must be >= 0, got %g", op.eps()));
        compiled.vector_weight = *gamma;
        compiled.eps = static_cast<float>(op.eps());
        compiled.width = *width;
        break;
      }
      case plan::MATMUL:
      case plan::LOGITS: {
        const bool logits = op.kind() == plan::LOGITS;
        if (auto status = CheckCounts(1, 1, 1, 1, 1, logits ? 1 : 2); !status.ok()) {
          return status;
        }
        if (!logits && op.outputs_size() < 1) return Error("needs at least one output");
        if (logits && op.outputs_size() != 1) return Error("needs exactly one output");
        auto in = Activation(op.inputs(0), "input 0");
        if (!in.ok()) return in.status();
        const int64_t cols = (*in)->width();
        int64_t total_width = 0;
        for (int i = 0; i < op.outputs_size(); ++i) {
          const int32_t id = op.outputs(i);
          if (id < 0 || id >= meta_.program().values_size()) {
            return Error(absl::StrFormat("output %d is value %d, outside [0, %d)", i, id,
                                         meta_.program().values_size()));
          }
          const plan::Value& value = meta_.program().values(id);
          const auto wanted = logits ? plan::Value::LOGITS : plan::Value::ACTIVATION;
          if (value.kind() != wanted) {
            return Error(absl::StrFormat("output %d (value %d, %s) has kind %d, expected %d", i, id,
                                         value.name(), value.kind(), wanted));
          }
          if (!logits && Overlap(op.inputs(0), id)) {
            return Error(
                absl::StrFormat("output %d (value %d) shares arena bytes with the input", i, id));
          }
          compiled.matmul_outputs.push_back({OutputPointer(id), total_width, value.width()});
          total_width += value.width();
        }
        auto w = Matrix(op.weights(0), total_width, cols);
        if (!w.ok()) return w.status();
        compiled.weight = *w;
        if (op.weights_size() == 2) {
          auto bias = Vector(op.weights(1), total_width);
          if (!bias.ok()) return bias.status();
          compiled.vector_weight = *bias;
        }
        compiled.input[0] = InputPointer(op.inputs(0));
        compiled.width = cols;
        max_cols_ = std::max(max_cols_, cols);
        if (IsQuantizedMatrix(w->dtype)) {
          quantized_activation_bytes_ =
              std::max(quantized_activation_bytes_, QuantizedActivationBytes(max_tokens_, cols));
        }
        if (logits) ++num_logits_ops_;
        break;
      }
      case plan::ROPE: {
        if (auto status = CheckCounts(2, 2, 1, 1, /*weights=*/0, 0); !status.ok()) return status;
        if (auto status = CheckInputKind(1, plan::Value::POSITIONS); !status.ok()) return status;
        auto in = Activation(op.inputs(0), "input 0");
        if (!in.ok()) return in.status();
        auto out = Activation(op.outputs(0), "output 0");
        if (!out.ok()) return out.status();
        if (op.head_dim() <= 0 || op.head_dim() % 2 != 0 || op.num_heads() <= 0 ||
            static_cast<int64_t>(op.num_heads()) * op.head_dim() != (*in)->width() ||
            (*out)->width() != (*in)->width()) {
          return Error(absl::StrFormat(
              "num_heads %d x head_dim %d (even, positive) must equal the input width %d and "
              "the output width %d",
              op.num_heads(), op.head_dim(), (*in)->width(), (*out)->width()));
        }
        if (auto status = CheckRope(op.rope()); !status.ok()) return status;
        compiled.num_heads = op.num_heads();
        compiled.head_dim = op.head_dim();
        compiled.inv_freq.resize(op.head_dim() / 2);
        RopeInverseFrequencies(op.rope(), op.head_dim(), compiled.inv_freq.data());
        compiled.input[0] = InputPointer(op.inputs(0));
        compiled.output[0] = OutputPointer(op.outputs(0));
        compiled.width = (*in)->width();
        max_head_dim_ = std::max(max_head_dim_, op.head_dim());
        break;
      }
      case plan::ATTENTION: {
        if (auto status = CheckCounts(3, 3, 1, 1, 0, 0); !status.ok()) return status;
        const plan::Value* values[4];
        const char* roles[4] = {"q", "k", "v", "output"};
        const int32_t ids[4] = {op.inputs(0), op.inputs(1), op.inputs(2), op.outputs(0)};
        for (int i = 0; i < 4; ++i) {
          auto value = Activation(ids[i], roles[i]);
          if (!value.ok()) return value.status();
          values[i] = *value;
        }
        const int64_t heads = op.num_heads();
        const int64_t kv_heads = op.num_kv_heads();
        const int64_t head_dim = op.head_dim();
        if (heads <= 0 || kv_heads <= 0 || head_dim <= 0 || heads % kv_heads != 0) {
          return Error(absl::StrFormat(
              "num_heads %d must be a positive multiple of num_kv_heads %d, head_dim %d positive",
              heads, kv_heads, head_dim));
        }
        if (values[0]->width() != heads * head_dim || values[3]->width() != heads * head_dim ||
            values[1]->width() != kv_heads * head_dim ||
            values[2]->width() != kv_heads * head_dim) {
          return Error(absl::StrFormat(
              "widths q %d, k %d, v %d, output %d do not match heads %d, kv heads %d, head_dim %d",
              values[0]->width(), values[1]->width(), values[2]->width(), values[3]->width(), heads,
              kv_heads, head_dim));
        }
        if (op.layer() < 0 || op.layer() >= kMaxLayers) {
          return Error(absl::StrFormat("layer %d outside [0, %d)", op.layer(), kMaxLayers));
        }
        if (op.sliding_window() < 0) {
          return Error(absl::StrFormat("sliding_window must be >= 0, got %d", op.sliding_window()));
        }
        if (!(op.scale() >= 0.0) || std::isinf(op.scale())) {
          return Error(absl::StrFormat("scale must be finite and >= 0, got %g", op.scale()));
        }
        if (kv_heads_ == 0) {
          kv_heads_ = static_cast<int32_t>(kv_heads);
          kv_head_dim_ = static_cast<int32_t>(head_dim);
        } else if (kv_heads_ != kv_heads || kv_head_dim_ != head_dim) {
          return Error(absl::StrFormat(
              "kv heads %d x head_dim %d differ from an earlier ATTENTION's %d x %d; the KV cache "
              "has one shape for all layers",
              kv_heads, head_dim, kv_heads_, kv_head_dim_));
        }
        kv_layers_ = std::max(kv_layers_, op.layer() + 1);
        for (int i = 0; i < 3; ++i) compiled.input[i] = InputPointer(ids[i]);
        compiled.output[0] = OutputPointer(ids[3]);
        compiled.num_heads = op.num_heads();
        compiled.num_kv_heads = op.num_kv_heads();
        compiled.head_dim = op.head_dim();
        compiled.layer = op.layer();
        compiled.sliding_window = op.sliding_window();
        // 0 means "unset": the usual 1 / sqrt(head_dim).
        compiled.scale = op.scale() > 0.0 ? static_cast<float>(op.scale())
                                          : 1.0f / std::sqrt(static_cast<float>(head_dim));
        break;
      }
      case plan::SILU: {
        if (auto status = CheckCounts(1, 1, 1, 1, 0, 0); !status.ok()) return status;
        auto width = SameWidthActivations(1, 1);
        if (!width.ok()) return width.status();
        compiled.width = *width;
        break;
      }
      case plan::MUL:
      case plan::ADD:
      case plan::SILU_MUL: {
        if (auto status = CheckCounts(2, 2, 1, 1, 0, 0); !status.ok()) return status;
        auto width = SameWidthActivations(2, 1);
        if (!width.ok()) return width.status();
        compiled.width = *width;
        break;
      }
      default:
        return Error("the cpu backend does not support this op kind");
    }
    // Elementwise ops and norms: all inputs and outputs are activations checked above.
    if (op.kind() == plan::RMS_NORM || op.kind() == plan::FUSED_ADD_RMS_NORM ||
        op.kind() == plan::SILU || op.kind() == plan::MUL || op.kind() == plan::ADD ||
        op.kind() == plan::SILU_MUL) {
      for (int i = 0; i < op.inputs_size(); ++i) compiled.input[i] = InputPointer(op.inputs(i));
      for (int i = 0; i < op.outputs_size(); ++i) compiled.output[i] = OutputPointer(op.outputs(i));
    }
    return compiled;
  }

  absl::Status Finish() {
    if (num_logits_ops_ != 1) {
      return absl::InvalidArgumentError(
          absl::StrFormat("program: expected exactly one LOGITS op, found %d", num_logits_ops_));
    }
    const plan::KvCacheSpec& spec = meta_.kv_cache();
    if (kv_layers_ > 0 && spec.num_layers() != 0 &&
        (spec.num_layers() < kv_layers_ || spec.num_kv_heads() != kv_heads_ ||
         spec.head_dim() != kv_head_dim_)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "kv_cache: spec says %d layers x %d kv heads x head_dim %d, the program's ATTENTION ops "
          "need %d layers x %d x %d",
          spec.num_layers(), spec.num_kv_heads(), spec.head_dim(), kv_layers_, kv_heads_,
          kv_head_dim_));
    }
    return absl::OkStatus();
  }

  int64_t vocab_size() const { return vocab_size_; }
  int64_t max_token_id() const { return max_token_id_; }
  int64_t max_cols() const { return max_cols_; }
  int64_t quantized_activation_bytes() const { return quantized_activation_bytes_; }
  int32_t max_head_dim() const { return max_head_dim_; }
  int32_t kv_layers() const { return kv_layers_; }
  int32_t kv_heads() const { return kv_heads_; }
  int32_t kv_head_dim() const { return kv_head_dim_; }

 private:
  // 2^16 layers: far above any model, low enough that layer arithmetic cannot overflow.
  static constexpr int32_t kMaxLayers = 1 << 16;

  absl::Status Error(const std::string& message) const {
    return absl::InvalidArgumentError(absl::StrFormat("program op %d (%s): %s", op_index_,
                                                      plan::OpKind_Name(op_->kind()), message));
  }

  absl::Status CheckCounts(int min_inputs, int max_inputs, int min_outputs, int max_outputs,
                           int min_weights = 1, int max_weights = 1) const {
    auto in_range = [](int count, int low, int high) { return count >= low && count <= high; };
    if (!in_range(op_->inputs_size(), min_inputs, max_inputs) ||
        (op_->kind() != plan::MATMUL && !in_range(op_->outputs_size(), min_outputs, max_outputs)) ||
        !in_range(op_->weights_size(), min_weights, max_weights)) {
      return Error(absl::StrFormat(
          "expected %d..%d inputs, %d..%d outputs, %d..%d weights; got %d, %d, %d", min_inputs,
          max_inputs, min_outputs, max_outputs, min_weights, max_weights, op_->inputs_size(),
          op_->outputs_size(), op_->weights_size()));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<const plan::Value*> Value(int32_t id, const std::string& role) const {
    if (id < 0 || id >= meta_.program().values_size()) {
      return Error(absl::StrFormat("%s is value %d, outside [0, %d)", role, id,
                                   meta_.program().values_size()));
    }
    return &meta_.program().values(id);
  }

  absl::StatusOr<const plan::Value*> Activation(int32_t id, const std::string& role) const {
    auto value = Value(id, role);
    if (!value.ok()) return value.status();
    if ((*value)->kind() != plan::Value::ACTIVATION) {
      return Error(absl::StrFormat("%s (value %d, %s) must be an ACTIVATION, it has kind %d", role,
                                   id, (*value)->name(), (*value)->kind()));
    }
    return value;
  }

  absl::Status CheckInputKind(int input, plan::Value::Kind kind) const {
    auto value = Value(op_->inputs(input), absl::StrFormat("input %d", input));
    if (!value.ok()) return value.status();
    if ((*value)->kind() != kind) {
      return Error(absl::StrFormat("input %d (value %d) has kind %d, expected %d", input,
                                   op_->inputs(input), (*value)->kind(), kind));
    }
    return absl::OkStatus();
  }

  // Checks that inputs [0, num_inputs) and outputs [0, num_outputs) are activations of one
  // width, which it returns.
  absl::StatusOr<int64_t> SameWidthActivations(int num_inputs, int num_outputs) const {
    int64_t width = -1;
    for (int i = 0; i < num_inputs + num_outputs; ++i) {
      const bool is_input = i < num_inputs;
      const int32_t id = is_input ? op_->inputs(i) : op_->outputs(i - num_inputs);
      const std::string role =
          absl::StrFormat("%s %d", is_input ? "input" : "output", is_input ? i : i - num_inputs);
      auto value = Activation(id, role);
      if (!value.ok()) return value.status();
      if (width >= 0 && (*value)->width() != width) {
        return Error(absl::StrFormat("%s (value %d) has width %d, expected %d like input 0", role,
                                     id, (*value)->width(), width));
      }
      width = (*value)->width();
    }
    return width;
  }

  absl::StatusOr<const plan::Tensor*> Tensor(int32_t index) const {
    if (index < 0 || index >= meta_.tensors_size()) {
      return Error(absl::StrFormat("weight tensor %d outside the tensor table [0, %d)", index,
                                   meta_.tensors_size()));
    }
    return &meta_.tensors(index);
  }

  absl::Status CheckBlob(int32_t index, const plan::Tensor& tensor, int64_t elements,
                         size_t element_size) const {
    if (tensor.size_bytes() != static_cast<uint64_t>(elements) * element_size) {
      return Error(absl::StrFormat("tensor %s: %d bytes, its shape and dtype need %d",
                                   tensor.name(), tensor.size_bytes(), elements * element_size));
    }
    if (blobs_(index) == nullptr) {
      return Error(absl::StrFormat("tensor %s: no data", tensor.name()));
    }
    return absl::OkStatus();
  }

  // A [rows, cols] matrix; rows < 0 accepts any row count.
  absl::StatusOr<MatrixView> Matrix(int32_t index, int64_t rows, int64_t cols) const {
    auto tensor = Tensor(index);
    if (!tensor.ok()) return tensor.status();
    const plan::Tensor& t = **tensor;
    if (t.shape_size() != 2 || t.shape(0) <= 0 || (rows >= 0 && t.shape(0) != rows) ||
        t.shape(1) != cols) {
      return Error(absl::StrFormat("tensor %s has shape [%s], expected [%s, %d]", t.name(),
                                   absl::StrJoin(t.shape(), ", "),
                                   rows >= 0 ? absl::StrCat(rows) : std::string("rows"), cols));
    }
    if (!CpuSupports(op_->kind(), t.dtype())) {
      return absl::UnimplementedError(absl::StrFormat(
          "program op %d (%s): tensor %s has dtype %s, the cpu backend reads F32, F16, BF16 (and "
          "I8, I4 for EMBED, MATMUL, LOGITS)",
          op_index_, plan::OpKind_Name(op_->kind()), t.name(), plan::DType_Name(t.dtype())));
    }
    if (IsQuantizedMatrix(t.dtype())) return QuantizedMatrix(index, t);
    int32_t panel_rows = 0;
    if (t.layout() == plan::Tensor::ROW_PANELS) {
      if (op_->kind() != plan::MATMUL && op_->kind() != plan::LOGITS) {
        return Error(
            absl::StrFormat("tensor %s is ROW_PANELS; this op reads ROW_MAJOR rows", t.name()));
      }
      if (t.panel_rows() != kPanelRows || t.shape(0) % kPanelRows != 0) {
        return absl::UnimplementedError(absl::StrFormat(
            "program op %d (%s): tensor %s has panel_rows %d and %d rows, the cpu kernels read "
            "panels of %d rows",
            op_index_, plan::OpKind_Name(op_->kind()), t.name(), t.panel_rows(), t.shape(0),
            kPanelRows));
      }
      panel_rows = kPanelRows;
    } else if (t.layout() != plan::Tensor::ROW_MAJOR) {
      return absl::UnimplementedError(absl::StrFormat(
          "program op %d (%s): tensor %s has layout %d, the cpu backend reads ROW_MAJOR and "
          "ROW_PANELS",
          op_index_, plan::OpKind_Name(op_->kind()), t.name(), static_cast<int>(t.layout())));
    }
    const int64_t bytes = MatrixBytes(t.dtype(), t.shape(0), cols);
    if (t.size_bytes() != static_cast<uint64_t>(bytes)) {
      return Error(absl::StrFormat("tensor %s: %d bytes, its shape, dtype and layout need %d",
                                   t.name(), t.size_bytes(), bytes));
    }
    if (blobs_(index) == nullptr) return Error(absl::StrFormat("tensor %s: no data", t.name()));
    return MatrixView{blobs_(index), t.dtype(), t.shape(0), cols, panel_rows};
  }

  // A quantized matrix (plan.proto, Quantization) whose shape Matrix() checked: its fields,
  // its companion tensors and what the kernels rely on (quant_matmul.h).
  absl::StatusOr<MatrixView> QuantizedMatrix(int32_t index, const plan::Tensor& t) const {
    const int64_t rows = t.shape(0), cols = t.shape(1);
    const plan::Quantization& q = t.quantization();
    const int expected_bits = t.dtype() == plan::I4 ? 4 : 8;
    if (q.bits() != expected_bits) {
      return Error(absl::StrFormat("tensor %s: quantization.bits is %d, its dtype %s needs %d",
                                   t.name(), q.bits(), plan::DType_Name(t.dtype()), expected_bits));
    }
    const bool asymmetric = q.scheme() == plan::Quantization::ASYMMETRIC;
    if (q.scheme() != plan::Quantization::SYMMETRIC && !(asymmetric && expected_bits == 4)) {
      return Error(absl::StrFormat(
          "tensor %s: quantization.scheme %s is not one the cpu kernels read (SYMMETRIC, or "
          "ASYMMETRIC for I4)",
          t.name(), plan::Quantization::Scheme_Name(q.scheme())));
    }
    // The AVX2 kernel finds a block's group by a shift (quant_matmul.cc): groups of 1, 2, 4
    // blocks of 32 columns, or the whole row.
    const int32_t group = q.group_size();
    const bool group_ok = (group == 32 || group == 64 || group == 128) && cols % group == 0;
    if (!group_ok && !(group == cols && (expected_bits == 8 || cols % 32 == 0))) {
      return absl::UnimplementedError(absl::StrFormat(
          "program op %d (%s): tensor %s: quantization.group_size %d with %d columns; the cpu "
          "kernels read groups of 32, 64 or 128 columns dividing the row, or one group per row "
          "(a multiple of 32 columns for I4)",
          op_index_, plan::OpKind_Name(op_->kind()), t.name(), group, cols));
    }
    const plan::Tensor::Layout layout =
        t.dtype() == plan::I4 ? plan::Tensor::LANE_CHUNKS : plan::Tensor::ROW_MAJOR;
    if (t.layout() != layout) {
      return absl::UnimplementedError(absl::StrFormat(
          "program op %d (%s): tensor %s is %s in layout %s, expected %s%s", op_index_,
          plan::OpKind_Name(op_->kind()), t.name(), plan::DType_Name(t.dtype()),
          plan::Tensor::Layout_Name(t.layout()), plan::Tensor::Layout_Name(layout),
          t.dtype() == plan::I4 ? " (plans before format 1.1 packed I4 otherwise: recompile)"
                                : ""));
    }
    const int64_t bytes = QuantizedMatrixBytes(t.dtype(), rows, cols);
    if (t.size_bytes() != static_cast<uint64_t>(bytes)) {
      return Error(absl::StrFormat("tensor %s: %d bytes, its shape and dtype need %d", t.name(),
                                   t.size_bytes(), bytes));
    }
    if (blobs_(index) == nullptr) return Error(absl::StrFormat("tensor %s: no data", t.name()));
    MatrixView view{blobs_(index), t.dtype(), rows, cols, 0};
    view.group_size = group;
    const int64_t groups = cols / group;
    auto scales = Companion(t, "scales", q.has_scales(), q.scales(), plan::F16, rows, groups);
    if (!scales.ok()) return scales.status();
    view.scales = reinterpret_cast<const uint16_t*>(*scales);
    if (asymmetric) {
      auto zeros =
          Companion(t, "zero_points", q.has_zero_points(), q.zero_points(), plan::U8, rows, groups);
      if (!zeros.ok()) return zeros.status();
      view.zero_points = *zeros;
      // Codes and zero points are 4-bit values; a larger zero point would wrap in the int8
      // arithmetic of the kernels. rows x groups bytes: 1/16 of the codes at g32.
      for (int64_t i = 0; i < rows * groups; ++i) {
        if (view.zero_points[i] > 15) {
          return Error(absl::StrFormat(
              "tensor %s: quantization.zero_points (tensor %d) holds %d at [%d, %d], expected "
              "0..15",
              t.name(), q.zero_points(), view.zero_points[i], i / groups, i % groups));
        }
      }
    } else if (q.has_zero_points()) {
      return Error(absl::StrFormat("tensor %s: SYMMETRIC quantization with zero_points", t.name()));
    }
    if (q.has_input_permutation()) {
      if (op_->kind() == plan::EMBED) {
        return Error(
            absl::StrFormat("tensor %s: an embedding table has no input columns to permute "
                            "(quantization.input_permutation is set)",
                            t.name()));
      }
      auto permutation =
          Companion(t, "input_permutation", true, q.input_permutation(), plan::I32, cols, -1);
      if (!permutation.ok()) return permutation.status();
      view.input_permutation = reinterpret_cast<const int32_t*>(*permutation);
      std::vector<bool> seen(cols, false);
      for (int64_t c = 0; c < cols; ++c) {
        const int32_t source = view.input_permutation[c];
        if (source < 0 || source >= cols || seen[source]) {
          return Error(absl::StrFormat(
              "tensor %s: quantization.input_permutation (tensor %d) is not a permutation of "
              "[0, %d): entry %d is %d",
              t.name(), q.input_permutation(), cols, c, source));
        }
        seen[source] = true;
      }
    }
    return view;
  }

  // The bytes of a quantized matrix's companion tensor `field` (quantization.<field> = index),
  // checked to be `dtype` [rows, cols] (cols < 0: [rows]) ROW_MAJOR.
  absl::StatusOr<const uint8_t*> Companion(const plan::Tensor& matrix, const char* field,
                                           bool present, int32_t index, plan::DType dtype,
                                           int64_t rows, int64_t cols) const {
    const std::string expected =
        cols < 0 ? absl::StrFormat("[%d] %s", rows, plan::DTypeName(dtype))
                 : absl::StrFormat("[%d, %d] %s", rows, cols, plan::DTypeName(dtype));
    if (!present) {
      return Error(absl::StrFormat("tensor %s: quantization.%s is missing, expected a tensor %s",
                                   matrix.name(), field, expected));
    }
    if (index < 0 || index >= meta_.tensors_size()) {
      return Error(absl::StrFormat(
          "tensor %s: quantization.%s is tensor %d, outside the tensor table [0, %d)",
          matrix.name(), field, index, meta_.tensors_size()));
    }
    const plan::Tensor& t = meta_.tensors(index);
    const bool shape_ok = cols < 0
                              ? t.shape_size() == 1 && t.shape(0) == rows
                              : t.shape_size() == 2 && t.shape(0) == rows && t.shape(1) == cols;
    if (!shape_ok || t.dtype() != dtype || t.layout() != plan::Tensor::ROW_MAJOR) {
      return Error(absl::StrFormat(
          "tensor %s: quantization.%s is tensor %d (%s) with shape [%s] %s, expected %s",
          matrix.name(), field, index, t.name(), absl::StrJoin(t.shape(), ", "),
          plan::DTypeName(t.dtype()), expected));
    }
    const int64_t elements = rows * (cols < 0 ? 1 : cols);
    if (auto status = CheckBlob(index, t, elements, plan::DTypeSize(dtype)); !status.ok()) {
      return status;
    }
    return blobs_(index);
  }

  absl::StatusOr<const float*> Vector(int32_t index, int64_t size) const {
    auto tensor = Tensor(index);
    if (!tensor.ok()) return tensor.status();
    const plan::Tensor& t = **tensor;
    if (t.shape_size() != 1 || t.shape(0) != size || t.dtype() != plan::F32) {
      return Error(absl::StrFormat("tensor %s is %s [%s], expected F32 [%d]", t.name(),
                                   plan::DType_Name(t.dtype()), absl::StrJoin(t.shape(), ", "),
                                   size));
    }
    if (auto status = CheckBlob(index, t, size, sizeof(float)); !status.ok()) return status;
    return reinterpret_cast<const float*>(blobs_(index));
  }

  absl::Status CheckRope(const plan::RopeConfig& rope) const {
    if (!(rope.theta() > 0.0) || std::isinf(rope.theta())) {
      return Error(absl::StrFormat("rope theta must be positive and finite, got %g", rope.theta()));
    }
    switch (rope.scaling()) {
      case plan::RopeConfig::SCALING_NONE:
        return absl::OkStatus();
      case plan::RopeConfig::LINEAR:
        if (!(rope.factor() > 0.0)) {
          return Error(
              absl::StrFormat("LINEAR rope factor must be positive, got %g", rope.factor()));
        }
        return absl::OkStatus();
      case plan::RopeConfig::LLAMA3:
        if (!(rope.factor() > 0.0) || !(rope.low_freq_factor() > 0.0) ||
            !(rope.high_freq_factor() > rope.low_freq_factor()) ||
            rope.original_max_position_embeddings() <= 0) {
          return Error(absl::StrFormat(
              "LLAMA3 rope needs factor > 0, 0 < low_freq_factor < high_freq_factor, "
              "original_max_position_embeddings > 0; got %g, %g, %g, %d",
              rope.factor(), rope.low_freq_factor(), rope.high_freq_factor(),
              rope.original_max_position_embeddings()));
        }
        return absl::OkStatus();
      default:
        return Error(absl::StrFormat("unknown rope scaling %d", rope.scaling()));
    }
  }

  // Whether two activations' per-token byte ranges intersect (then their buffers do too).
  bool Overlap(int32_t first, int32_t second) const {
    const plan::Value& a = meta_.program().values(first);
    const plan::Value& b = meta_.program().values(second);
    const int64_t a_end =
        a.arena_offset_per_token() + a.width() * static_cast<int64_t>(sizeof(float));
    const int64_t b_end =
        b.arena_offset_per_token() + b.width() * static_cast<int64_t>(sizeof(float));
    return a.arena_offset_per_token() < b_end && b.arena_offset_per_token() < a_end;
  }

  float* ActivationPointer(int32_t id) const {
    const plan::Value& value = meta_.program().values(id);
    if (value.kind() != plan::Value::ACTIVATION) return nullptr;
    return arena_ + static_cast<int64_t>(max_tokens_) * value.arena_offset_per_token() /
                        static_cast<int64_t>(sizeof(float));
  }
  const float* InputPointer(int32_t id) const { return ActivationPointer(id); }
  float* OutputPointer(int32_t id) const { return ActivationPointer(id); }

  const plan::PlanMeta& meta_;
  const BlobLookup& blobs_;
  int32_t max_tokens_;
  float* arena_;
  const plan::Op* op_ = nullptr;
  int op_index_ = 0;
  int64_t vocab_size_ = 0;
  int64_t max_token_id_ = std::numeric_limits<int64_t>::max();
  int64_t max_cols_ = 0;
  int64_t quantized_activation_bytes_ = 0;
  int32_t max_head_dim_ = 0;
  int32_t num_logits_ops_ = 0;
  int32_t kv_layers_ = 0;
  int32_t kv_heads_ = 0;
  int32_t kv_head_dim_ = 0;
};

absl::Status CpuBackend::Compile(const plan::PlanMeta& meta, const BlobLookup& blobs,
                                 const BackendOptions& options) {
  // 2^20 tokens per step is far beyond any useful batch and keeps every row index in 32 bits.
  if (options.max_tokens_per_step <= 0 || options.max_tokens_per_step > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "max_tokens_per_step must be in [1, 2^20], got %d", options.max_tokens_per_step));
  }
  max_tokens_ = options.max_tokens_per_step;
  matmul_observer_ = options.matmul_observer;
  quantized_mode_ = options.quantized_activations;
  const int64_t per_token = meta.program().arena_bytes_per_token();
  if (per_token < 0 || per_token > (int64_t{1} << 40) / max_tokens_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "program: arena_bytes_per_token %d x max tokens %d is negative or over 1 TiB", per_token,
        max_tokens_));
  }
  arena_bytes_ = per_token * max_tokens_;
  arena_ = AllocateFloats(arena_bytes_ / static_cast<int64_t>(sizeof(float)));
  if (arena_ == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("cannot allocate the %d-byte activation arena", arena_bytes_));
  }

  ProgramCompiler compiler(meta, blobs, max_tokens_, arena_.get());
  if (auto status = compiler.CheckValues(); !status.ok()) return status;
  for (int index = 0; index < meta.program().ops_size(); ++index) {
    absl::StatusOr<CompiledOp> op = compiler.CompileOp(index);
    if (!op.ok()) return op.status();
    ops_.push_back(std::move(*op));
  }
  if (auto status = compiler.Finish(); !status.ok()) return status;
  vocab_size_ = compiler.vocab_size();
  max_token_id_ = compiler.max_token_id();
  kv_layers_ = compiler.kv_layers();
  kv_heads_ = compiler.kv_heads();
  kv_head_dim_ = compiler.kv_head_dim();

  kv_dtype_ = kv::ResolveKvDType(options.kv_cache_dtype, meta.kv_cache().dtype());
  if (!kv::IsKvDType(kv_dtype_)) {
    return absl::UnimplementedError(absl::StrFormat(
        "KV cache dtype %s: the cpu backend keeps the KV cache in F32, F16, BF16 or I8",
        plan::DType_Name(kv_dtype_)));
  }

  if (absl::Status status = SelectCpuTargetFromEnvironment(); !status.ok()) return status;
  pool_ = std::make_unique<threading::ThreadPool>(options.num_threads);
  const int32_t num_threads = pool_->num_threads();
  scratch_stride_ = std::max<int32_t>(compiler.max_head_dim(), 1);
  // Rounded to 16 floats so each thread's scratch starts on its own cache line.
  scratch_stride_ = (scratch_stride_ + 15) / 16 * 16;
  scratch_ = AllocateFloats(scratch_stride_ * num_threads);
  if (scratch_ == nullptr) return absl::ResourceExhaustedError("cannot allocate kernel scratch");
  if (compiler.quantized_activation_bytes() > 0) {
    // The exact mode (quant_matmul_exact.h) uses the same scratch for its per-thread rows.
    const int64_t bytes = quantized_mode_ == QuantizedActivations::kF32
                              ? QuantizedMatMulExactScratchBytes(num_threads, compiler.max_cols())
                              : compiler.quantized_activation_bytes();
    quantized_activations_ = AllocateFloats((bytes + static_cast<int64_t>(sizeof(float)) - 1) /
                                            static_cast<int64_t>(sizeof(float)));
    if (quantized_activations_ == nullptr) {
      return absl::ResourceExhaustedError("cannot allocate the quantized activation scratch");
    }
  }
  token_sequence_.resize(max_tokens_);
  token_block_table_.resize(max_tokens_);
  token_index_.resize(max_tokens_);
  return absl::OkStatus();
}

absl::Status CpuBackend::AllocateKvCache(int32_t num_blocks, int32_t block_size) {
  kv_.reset();
  attention_scratch_.reset();
  if (kv_layers_ == 0) {
    block_size_ = block_size;
    return absl::OkStatus();  // no ATTENTION op: nothing to cache
  }
  auto storage = kv::KvStorage::Create(
      {kv_layers_, kv_heads_, kv_head_dim_, num_blocks, block_size, kv_dtype_});
  if (!storage.ok()) return storage.status();
  int32_t max_heads = kv_heads_;
  for (const CompiledOp& op : ops_) {
    if (op.kind == plan::ATTENTION) max_heads = std::max(max_heads, op.num_heads);
  }
  attention_scratch_stride_ =
      kv_dtype_ == plan::F32
          ? AttentionScratchFloats(max_heads, kv_heads_, kv_head_dim_, std::max(block_size, 1))
          : KvCacheAttentionScratchFloats(max_heads, kv_heads_, kv_head_dim_,
                                          std::max(block_size, 1));
  attention_scratch_ = AllocateFloats(attention_scratch_stride_ * pool_->num_threads());
  if (attention_scratch_ == nullptr) {
    return absl::ResourceExhaustedError("cannot allocate attention scratch");
  }
  kv_ = std::move(*storage);
  block_size_ = block_size;
  return absl::OkStatus();
}

absl::Status CpuBackend::CopyKvBlock(int32_t source, int32_t destination) {
  if (kv_ == nullptr) return absl::FailedPreconditionError("KV cache not allocated");
  const int32_t blocks = kv_->shape().num_blocks;
  if (source < 0 || source >= blocks || destination < 0 || destination >= blocks) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CopyKvBlock: blocks %d -> %d outside [0, %d)", source, destination, blocks));
  }
  kv_->CopyBlock(source, destination);
  return absl::OkStatus();
}

absl::Status CpuBackend::CheckBatch(const StepBatch& batch) const {
  StepLimits limits;
  limits.max_tokens = max_tokens_;
  limits.max_token_id = max_token_id_;
  limits.has_kv_layers = kv_layers_ > 0;
  limits.kv_allocated = kv_ != nullptr;
  if (kv_ != nullptr) {
    limits.num_blocks = kv_->shape().num_blocks;
    limits.block_size = block_size_;
  }
  return CheckStepBatch(batch, limits);
}

void CpuBackend::RunAttention(const CompiledOp& op, const StepBatch& batch) {
  const int64_t num_tokens = batch.num_tokens();
  const int64_t kv_width = static_cast<int64_t>(op.num_kv_heads) * op.head_dim;
  const int64_t q_width = static_cast<int64_t>(op.num_heads) * op.head_dim;
  // Every token's k and v go into the cache first, so tokens of one step see each other.
  for (int64_t row = 0; row < num_tokens; ++row) {
    kv_->WriteToken(op.layer, batch.slot_mapping[row], op.input[1] + row * kv_width,
                    op.input[2] + row * kv_width);
  }
  AttentionArgs args;
  args.q = op.input[0];
  args.out = op.output[0];
  args.kv_dtype = kv_->dtype();
  if (kv_->dtype() == plan::F32) {
    args.key_cache = kv_->key(op.layer, 0);
    args.value_cache = kv_->value(op.layer, 0);
  } else {
    args.key_bytes = kv_->key_bytes(op.layer, 0);
    args.value_bytes = kv_->value_bytes(op.layer, 0);
    args.key_scales = kv_->key_scales(op.layer, 0);
    args.value_scales = kv_->value_scales(op.layer, 0);
  }
  args.token_stride = kv_->token_stride();
  args.num_heads = op.num_heads;
  args.num_kv_heads = op.num_kv_heads;
  args.head_dim = op.head_dim;
  args.block_size = block_size_;
  args.sliding_window = op.sliding_window;
  args.scale = op.scale;
  args.num_tokens = num_tokens;
  args.token_block_table = token_block_table_.data();
  args.token_index = token_index_.data();
  args.scratch = attention_scratch_.get();
  args.scratch_stride = attention_scratch_stride_;
  if (args.kv_dtype == plan::F32) {
    Attention(*pool_, args);
  } else {
    KvCacheAttention(*pool_, args);
  }
}

void CpuBackend::RunMatMul(const CompiledOp& op, int64_t num_rows, const int32_t* input_rows,
                           const MatMulOutput* outputs, int32_t num_outputs) {
  if (IsQuantizedMatrix(op.weight.dtype) && quantized_mode_ == QuantizedActivations::kF32) {
    QuantizedMatMulExact(*pool_, op.input[0], num_rows, input_rows, op.weight, op.vector_weight,
                         outputs, num_outputs, quantized_activations_.get());
  } else if (IsQuantizedMatrix(op.weight.dtype)) {
    QuantizedMatMul(*pool_, op.input[0], num_rows, input_rows, op.weight, op.vector_weight, outputs,
                    num_outputs, quantized_activations_.get());
  } else {
    MatMul(*pool_, op.input[0], num_rows, input_rows, op.weight, op.vector_weight, outputs,
           num_outputs);
  }
}

absl::Status CpuBackend::RunStep(const StepBatch& batch, float* logits) {
  if (absl::Status status = CheckBatch(batch); !status.ok()) return status;
  const int64_t num_tokens = batch.num_tokens();
  if (num_tokens == 0) return absl::OkStatus();
  // Workers idle since the last step (sampling, detokenization) are asleep; waking them now
  // overlaps their wake-up with the embedding and first norm instead of the first matmul.
  pool_->WakeSleepers();
  for (size_t index = 0; index < batch.sequences.size(); ++index) {
    const StepSequence& sequence = batch.sequences[index];
    for (int32_t i = 0; i < sequence.num_tokens; ++i) {
      const int32_t row = sequence.first_token + i;
      token_sequence_[row] = static_cast<int32_t>(index);
      token_block_table_[row] = sequence.block_table;
      token_index_[row] = sequence.context_length - sequence.num_tokens + i;
    }
  }
  for (const CompiledOp& op : ops_) {
    const int64_t elements = num_tokens * op.width;
    switch (op.kind) {
      case plan::EMBED:
        for (int64_t row = 0; row < num_tokens; ++row) {
          if (IsQuantizedMatrix(op.weight.dtype)) {
            QuantizedRowToF32(op.weight, batch.token_ids[row], op.output[0] + row * op.width);
          } else {
            MatrixRowToF32(op.weight, batch.token_ids[row], op.output[0] + row * op.width);
          }
        }
        break;
      case plan::RMS_NORM:
        RmsNorm(*pool_, op.input[0], op.vector_weight, op.eps, num_tokens, op.width, op.output[0]);
        break;
      case plan::FUSED_ADD_RMS_NORM:
        FusedAddRmsNorm(*pool_, op.input[0], op.input[1], op.vector_weight, op.eps, num_tokens,
                        op.width, op.output[0], op.output[1]);
        break;
      case plan::MATMUL:
        if (matmul_observer_) matmul_observer_(op.index, op.input[0], num_tokens, op.width);
        RunMatMul(op, num_tokens, nullptr, op.matmul_outputs.data(),
                  static_cast<int32_t>(op.matmul_outputs.size()));
        break;
      case plan::LOGITS: {
        MatMulOutput output{logits, 0, vocab_size_};
        RunMatMul(op, static_cast<int64_t>(batch.logit_rows.size()), batch.logit_rows.data(),
                  &output, 1);
        break;
      }
      case plan::ROPE:
        if (op.output[0] != op.input[0]) {
          std::memmove(op.output[0], op.input[0], elements * sizeof(float));
        }
        Rope(*pool_, op.output[0], batch.positions.data(), num_tokens, op.num_heads, op.head_dim,
             op.inv_freq.data(), scratch_.get());
        break;
      case plan::ATTENTION:
        RunAttention(op, batch);
        break;
      case plan::SILU:
        ElementwiseOp(*pool_, Elementwise::kSilu, op.input[0], nullptr, elements, op.output[0]);
        break;
      case plan::MUL:
        ElementwiseOp(*pool_, Elementwise::kMul, op.input[0], op.input[1], elements, op.output[0]);
        break;
      case plan::ADD:
        ElementwiseOp(*pool_, Elementwise::kAdd, op.input[0], op.input[1], elements, op.output[0]);
        break;
      case plan::SILU_MUL:
        ElementwiseOp(*pool_, Elementwise::kSiluMul, op.input[0], op.input[1], elements,
                      op.output[0]);
        break;
      default:
        break;  // Compile() admits no other kind
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(const plan::PlanMeta& meta,
                                                          const BlobLookup& blobs,
                                                          const BackendOptions& options) {
  auto backend = std::make_unique<CpuBackend>();
  if (absl::Status status = backend->Compile(meta, blobs, options); !status.ok()) return status;
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace llmrt::cpu
