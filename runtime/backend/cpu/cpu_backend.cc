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
#include "runtime/plan/program_check.h"
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
  int64_t norm_group = 0;  // RMS_NORM: elements normalized together (the width, or a head)
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

// Builds CompiledOps from a program that plan::CheckProgram accepted: resolves values and
// weights to pointers, and refuses (Unimplemented) only what the cpu kernels cannot run.
class ProgramCompiler {
 public:
  ProgramCompiler(const plan::PlanMeta& meta, const BlobLookup& blobs, int32_t max_tokens,
                  float* arena)
      : meta_(meta), blobs_(blobs), max_tokens_(max_tokens), arena_(arena) {}

  absl::StatusOr<CompiledOp> CompileOp(int index) {
    const plan::Op& op = meta_.program().ops(index);
    op_ = &op;
    op_index_ = index;
    CompiledOp compiled;
    compiled.kind = op.kind();
    compiled.index = index;
    for (int i = 0; i < op.inputs_size() && i < 3; ++i) compiled.input[i] = Pointer(op.inputs(i));
    for (int i = 0; i < op.outputs_size() && i < 2; ++i)
      compiled.output[i] = Pointer(op.outputs(i));
    switch (op.kind()) {
      case plan::EMBED: {
        compiled.width = Width(op.outputs(0));
        auto table = BindMatrix(op.weights(0));
        if (!table.ok()) return table.status();
        compiled.weight = *table;
        break;
      }
      case plan::RMS_NORM:
      case plan::FUSED_ADD_RMS_NORM:
        if (auto status = RequireDtype(op.weights(0), plan::F32); !status.ok()) return status;
        compiled.width = Width(op.inputs(0));
        compiled.vector_weight = Floats(op.weights(0));
        compiled.norm_group = meta_.tensors(op.weights(0)).shape(0);
        compiled.eps = static_cast<float>(op.norm().eps());
        break;
      case plan::MATMUL:
      case plan::LOGITS: {
        compiled.width = Width(op.inputs(0));
        int64_t total_width = 0;
        for (int32_t id : op.outputs()) {
          compiled.matmul_outputs.push_back({Pointer(id), total_width, Width(id)});
          total_width += Width(id);
        }
        auto w = BindMatrix(op.weights(0));
        if (!w.ok()) return w.status();
        compiled.weight = *w;
        if (op.weights_size() == 2) compiled.vector_weight = Floats(op.weights(1));
        max_cols_ = std::max(max_cols_, compiled.width);
        if (IsQuantizedMatrix(w->dtype)) {
          quantized_activation_bytes_ = std::max(
              quantized_activation_bytes_, QuantizedActivationBytes(max_tokens_, compiled.width));
        }
        break;
      }
      case plan::ROPE: {
        const plan::RopeAttrs& rope = op.rope();
        compiled.width = Width(op.inputs(0));
        compiled.num_heads = rope.num_heads();
        compiled.head_dim = rope.head_dim();
        compiled.inv_freq.resize(rope.head_dim() / 2);
        RopeInverseFrequencies(rope.config(), rope.head_dim(), compiled.inv_freq.data());
        break;
      }
      case plan::ATTENTION: {
        const plan::AttentionAttrs& attention = op.attention();
        compiled.num_heads = attention.num_heads();
        compiled.num_kv_heads = attention.num_kv_heads();
        compiled.head_dim = attention.head_dim();
        compiled.layer = attention.layer();
        compiled.sliding_window = attention.sliding_window();
        // 0 means "unset": the usual 1 / sqrt(head_dim).
        compiled.scale = attention.scale() > 0.0
                             ? static_cast<float>(attention.scale())
                             : 1.0f / std::sqrt(static_cast<float>(attention.head_dim()));
        break;
      }
      case plan::SILU:
      case plan::MUL:
      case plan::ADD:
      case plan::SILU_MUL:
        compiled.width = Width(op.inputs(0));
        break;
      default:
        return Unsupported("the cpu backend does not support this op kind");
    }
    return compiled;
  }

  int64_t max_cols() const { return max_cols_; }
  int64_t quantized_activation_bytes() const { return quantized_activation_bytes_; }

 private:
  absl::Status Unsupported(const std::string& message) const {
    return absl::UnimplementedError(absl::StrFormat("program op %d (%s): %s", op_index_,
                                                    plan::OpKind_Name(op_->kind()), message));
  }

  int64_t Width(int32_t id) const { return meta_.program().values(id).width(); }

  float* Pointer(int32_t id) const {
    const plan::Value& value = meta_.program().values(id);
    if (value.kind() != plan::Value::ACTIVATION) return nullptr;
    return arena_ + static_cast<int64_t>(max_tokens_) * value.arena_offset_per_token() /
                        static_cast<int64_t>(sizeof(float));
  }

  const float* Floats(int32_t tensor) const {
    return reinterpret_cast<const float*>(blobs_(tensor));
  }

  absl::Status RequireDtype(int32_t tensor, plan::DType dtype) const {
    const plan::Tensor& t = meta_.tensors(tensor);
    if (t.dtype() == dtype) return absl::OkStatus();
    return Unsupported(absl::StrFormat("tensor %s has dtype %s, the cpu kernels read %s", t.name(),
                                       plan::DType_Name(t.dtype()), plan::DType_Name(dtype)));
  }

  // A checked matrix as the cpu kernels read it, refusing the dtypes, panel heights and group
  // sizes they do not implement.
  absl::StatusOr<MatrixView> BindMatrix(int32_t index) const {
    const plan::Tensor& t = meta_.tensors(index);
    if (!CpuSupports(op_->kind(), t.dtype())) {
      return Unsupported(absl::StrFormat(
          "tensor %s has dtype %s, the cpu backend reads F32, F16, BF16 (and I8, I4 for EMBED, "
          "MATMUL, LOGITS)",
          t.name(), plan::DType_Name(t.dtype())));
    }
    MatrixView view{blobs_(index), t.dtype(), t.shape(0), t.shape(1), 0};
    if (IsQuantizedMatrix(t.dtype())) return BindQuantized(t, view);
    if (t.layout() == plan::Tensor::ROW_PANELS) {
      if (op_->kind() != plan::MATMUL && op_->kind() != plan::LOGITS) {
        return Unsupported(
            absl::StrFormat("tensor %s is ROW_PANELS; this op reads ROW_MAJOR rows", t.name()));
      }
      if (t.panel_rows() != kPanelRows) {
        return Unsupported(absl::StrFormat(
            "tensor %s has panel_rows %d and %d rows, the cpu kernels read panels of %d rows",
            t.name(), t.panel_rows(), t.shape(0), kPanelRows));
      }
      view.panel_rows = kPanelRows;
    }
    return view;
  }

  absl::StatusOr<MatrixView> BindQuantized(const plan::Tensor& t, MatrixView view) const {
    const plan::Quantization& q = t.quantization();
    // The AVX2 kernel finds a block's group by a shift (quant_matmul.cc): groups of 1, 2, 4
    // blocks of 32 columns, or the whole row.
    const int32_t group = q.group_size();
    if (group != 32 && group != 64 && group != 128 && group != view.cols) {
      return Unsupported(absl::StrFormat(
          "tensor %s: quantization.group_size %d with %d columns; the cpu kernels read groups "
          "of 32, 64 or 128 columns dividing the row, or one group per row",
          t.name(), group, view.cols));
    }
    view.group_size = group;
    view.scales = reinterpret_cast<const uint16_t*>(blobs_(q.scales()));
    if (q.scheme() == plan::Quantization::ASYMMETRIC) view.zero_points = blobs_(q.zero_points());
    if (q.has_input_permutation()) {
      view.input_permutation = reinterpret_cast<const int32_t*>(blobs_(q.input_permutation()));
    }
    return view;
  }

  const plan::PlanMeta& meta_;
  const BlobLookup& blobs_;
  int32_t max_tokens_;
  float* arena_;
  const plan::Op* op_ = nullptr;
  int op_index_ = 0;
  int64_t max_cols_ = 0;
  int64_t quantized_activation_bytes_ = 0;
};

absl::Status CpuBackend::Compile(const plan::PlanMeta& meta, const BlobLookup& blobs,
                                 const BackendOptions& options) {
  // 2^20 tokens per step is far beyond any useful batch and keeps every row index in 32 bits.
  if (options.max_tokens_per_step <= 0 || options.max_tokens_per_step > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "max_tokens_per_step must be in [1, 2^20], got %d", options.max_tokens_per_step));
  }
  max_tokens_ = options.max_tokens_per_step;
  absl::StatusOr<plan::ProgramFacts> facts = plan::CheckProgram(meta, blobs);
  if (!facts.ok()) return facts.status();
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
  for (int index = 0; index < meta.program().ops_size(); ++index) {
    absl::StatusOr<CompiledOp> op = compiler.CompileOp(index);
    if (!op.ok()) return op.status();
    ops_.push_back(std::move(*op));
  }
  vocab_size_ = facts->vocab_size;
  max_token_id_ = facts->max_token_id;
  kv_layers_ = facts->kv_layers;
  kv_heads_ = facts->kv_heads;
  kv_head_dim_ = facts->kv_head_dim;

  kv_dtype_ = kv::ResolveKvDType(options.kv_cache_dtype, meta.kv_cache().dtype());
  if (!kv::IsKvDType(kv_dtype_)) {
    return absl::UnimplementedError(absl::StrFormat(
        "KV cache dtype %s: the cpu backend keeps the KV cache in F32, F16, BF16 or I8",
        plan::DType_Name(kv_dtype_)));
  }

  if (absl::Status status = SelectCpuTargetFromEnvironment(); !status.ok()) return status;
  pool_ = std::make_unique<threading::ThreadPool>(options.num_threads);
  const int32_t num_threads = pool_->num_threads();
  scratch_stride_ = std::max<int32_t>(facts->max_rope_head_dim, 1);
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
        RmsNorm(*pool_, op.input[0], op.vector_weight, op.eps,
                num_tokens * (op.width / op.norm_group), op.norm_group, op.output[0]);
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
