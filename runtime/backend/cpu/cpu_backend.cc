#include "runtime/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/backend/cpu/dispatch.h"
#include "runtime/backend/cpu/kernels.h"
#include "runtime/backend/cpu/moe.h"
#include "runtime/backend/cpu/quant_kv_attention.h"
#include "runtime/backend/cpu/quant_matmul.h"
#include "runtime/backend/cpu/quant_matmul_exact.h"
#include "runtime/backend/step_batch_check.h"
#include "runtime/kv/kv_storage.h"
#include "runtime/plan/dtype.h"
#include "runtime/plan/plan_reader.h"
#include "runtime/plan/program_check.h"
#include "runtime/threading/thread_pool.h"

namespace llmrt::cpu {

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
  // Activation (and EXPERT_IDS) inputs/outputs; the integer inputs (token ids, positions) come
  // from the batch.
  const float* input[4] = {nullptr, nullptr, nullptr, nullptr};
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
  float softcap = 0.0f;  // ATTENTION scores, LOGITS: cap * tanh(x / cap); 0: none
  // EMBED: the row scale (0: none) and the table dtype it rounds to (plan.proto EmbedAttrs).
  float embed_scale = 0.0f;
  std::vector<float> inv_freq;
  int32_t rotary_dim = 0;      // ROPE: the rotated dims of each head
  float cos_sin_scale = 1.0f;  // ROPE: LongRoPE's attention factor
  // ROUTER: its index among the program's routers (its row of the expert load); ROUTER and
  // EXPERT_MATMUL: num_experts and top_k.
  int32_t router_index = 0;
  int32_t num_experts = 0;
  int32_t top_k = 0;
  plan::RouterAttrs::Scoring scoring = plan::RouterAttrs::SCORING_UNSPECIFIED;
  bool normalize = false;
  // EXPERT_MATMUL: x holds one K-column slice per slot ([T, top_k K]); N rows per expert.
  bool sliced = false;
  int64_t rows_per_expert = 0;
  // CLAMPED_SWIGLU.
  float alpha = 0.0f;
  float limit = 0.0f;
  const struct CpuKernel* kernel = nullptr;
};

// What a kernel reads besides its op: the backend's state during one step.
struct CpuStep {
  threading::ThreadPool* pool = nullptr;
  const StepBatch* batch = nullptr;
  int64_t num_tokens = 0;
  float* logits = nullptr;  // RunStep's output
  int64_t vocab_size = 0;
  const MatmulObserver* matmul_observer = nullptr;
  QuantizedActivations quantized_mode = QuantizedActivations::kInt8;
  void* quantized_activations = nullptr;  // the quantized matmuls' activation scratch
  float* rope_scratch = nullptr;          // per thread
  kv::KvStorage* kv = nullptr;
  int32_t block_size = 0;
  float* attention_scratch = nullptr;  // per thread
  int64_t attention_scratch_stride = 0;
  // Per batch row: its sequence's block table and the token's index in the sequence.
  const int32_t* const* token_block_table = nullptr;
  const int64_t* token_index = nullptr;
  // EXPERT_MATMUL's grouping tables and output rows (sized for the widest op at max tokens).
  int32_t* expert_ints = nullptr;
  float* expert_floats = nullptr;
  // Per thread of the pool: a single-thread pool and the multiplies' scratch, for EXPERT_MATMUL's
  // work items (moe.h).
  ThreadPool* const* single_pools = nullptr;
  uint8_t* expert_thread_scratch = nullptr;
  int64_t expert_thread_scratch_bytes = 0;
  // With BackendOptions::record_expert_load: [num_routers, expert_stride] counts, zeroed per step.
  int32_t* expert_counts = nullptr;
  int32_t expert_stride = 0;
};

class OpBinder;

// The CPU kernel of one op kind: `bind` resolves an op that plan::CheckProgram accepted to
// pointers and refuses (UNIMPLEMENTED) what the kernels cannot run — without blobs (Supports)
// only the refusal; `run` executes it for a step. Adding an op adds one entry to kCpuKernels.
struct CpuKernel {
  plan::OpKind kind;
  absl::Status (*bind)(OpBinder& binder, const plan::Op& op, CompiledOp& compiled);
  void (*run)(const CpuStep& step, const CompiledOp& op);
};

const CpuKernel* FindCpuKernel(plan::OpKind kind);

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  absl::Status Supports(const plan::PlanMeta& meta, int op_index) const override {
    return CpuSupports(meta, op_index);
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
  absl::Status LastStepExpertLoad(ExpertLoad& load) const override;

  absl::Status Compile(const plan::PlanMeta& meta, const BlobLookup& blobs,
                       const BackendOptions& options);

 private:
  absl::Status CheckBatch(const StepBatch& batch) const;

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
  std::vector<int32_t> expert_ints_;  // EXPERT_MATMUL grouping tables
  AlignedFloats expert_floats_;       // EXPERT_MATMUL output rows before their scatter
  std::vector<std::unique_ptr<threading::ThreadPool>> single_pools_;  // one per pool thread
  std::vector<threading::ThreadPool*> single_pool_pointers_;
  AlignedFloats expert_thread_scratch_;  // per thread: ExpertMatMulThreadScratchBytes
  int64_t expert_thread_scratch_bytes_ = 0;
  // BackendOptions::record_expert_load, and the counts of the last step (ExpertLoad's layout).
  bool record_expert_load_ = false;
  bool stepped_ = false;
  int32_t num_routers_ = 0;
  int32_t max_experts_ = 0;
  std::vector<int32_t> expert_counts_;
};

// Resolves an op's values and weights for the CPU kernels (see CpuKernel). Without blobs and
// arena it only checks.
class OpBinder {
 public:
  OpBinder(const plan::PlanMeta& meta, const BlobLookup* blobs, int32_t max_tokens, float* arena)
      : meta_(meta), blobs_(blobs), max_tokens_(max_tokens), arena_(arena) {}

  absl::StatusOr<CompiledOp> Bind(int index) {
    const plan::Op& op = meta_.program().ops(index);
    op_ = &op;
    op_index_ = index;
    CompiledOp compiled;
    compiled.kind = op.kind();
    compiled.index = index;
    compiled.kernel = FindCpuKernel(op.kind());
    if (compiled.kernel == nullptr) {
      return Unsupported("the cpu backend has no kernel for this op kind");
    }
    for (int i = 0; i < op.inputs_size() && i < 4; ++i) compiled.input[i] = Pointer(op.inputs(i));
    for (int i = 0; i < op.outputs_size() && i < 2; ++i) {
      compiled.output[i] = Pointer(op.outputs(i));
    }
    if (absl::Status status = compiled.kernel->bind(*this, op, compiled); !status.ok()) {
      return status;
    }
    return compiled;
  }

  int64_t max_cols() const { return max_cols_; }
  int64_t expert_ints() const { return expert_ints_; }
  int64_t max_expert_rows() const { return max_expert_rows_; }
  int64_t max_expert_quantized_cols() const { return max_expert_quantized_cols_; }
  int32_t max_tokens() const { return max_tokens_; }
  // Sizes EXPERT_MATMUL's scratch and returns the index of the next ROUTER.
  void NoteExpertMatmul(const MatrixView& weight, int32_t top_k, int32_t experts,
                        int64_t rows_per_expert) {
    expert_ints_ = std::max(expert_ints_, ExpertMatMulScratchInts(max_tokens_, top_k, experts));
    max_expert_rows_ = std::max(max_expert_rows_, rows_per_expert);
    if (IsQuantizedMatrix(weight.dtype)) {
      max_expert_quantized_cols_ = std::max(max_expert_quantized_cols_, weight.cols);
    }
  }
  int32_t NextRouter() { return routers_++; }
  int64_t quantized_activation_bytes() const { return quantized_activation_bytes_; }

  absl::Status Unsupported(const std::string& message) const {
    return absl::UnimplementedError(absl::StrFormat("program op %d (%s): %s", op_index_,
                                                    plan::OpKind_Name(op_->kind()), message));
  }

  int64_t Width(int32_t id) const { return meta_.program().values(id).width(); }
  const plan::Tensor& TensorAt(int32_t index) const { return meta_.tensors(index); }

  float* Pointer(int32_t id) const {
    const plan::Value& value = meta_.program().values(id);
    const bool in_arena =
        value.kind() == plan::Value::ACTIVATION || value.kind() == plan::Value::EXPERT_IDS;
    if (!in_arena || arena_ == nullptr) return nullptr;
    return arena_ + static_cast<int64_t>(max_tokens_) * value.arena_offset_per_token() /
                        static_cast<int64_t>(sizeof(float));
  }

  const uint8_t* Blob(int32_t tensor) const { return blobs_ ? (*blobs_)(tensor) : nullptr; }
  const float* Floats(int32_t tensor) const { return reinterpret_cast<const float*>(Blob(tensor)); }

  absl::Status RequireDtype(int32_t tensor, plan::DType dtype) const {
    const plan::Tensor& t = meta_.tensors(tensor);
    if (t.dtype() == dtype) return absl::OkStatus();
    return Unsupported(absl::StrFormat("tensor %s has dtype %s, the cpu kernels read %s", t.name(),
                                       plan::DType_Name(t.dtype()), plan::DType_Name(dtype)));
  }

  // A checked matrix as the cpu kernels read it, refusing the panel heights and group sizes
  // they do not implement.
  absl::StatusOr<MatrixView> BindMatrix(int32_t index) {
    const plan::Tensor& t = meta_.tensors(index);
    // An expert stack [E, N, K] is the [E N, K] matrix (plan.proto).
    const int64_t cols = t.shape(t.shape_size() - 1);
    MatrixView view{Blob(index), t.dtype(), t.shape(0) * (t.shape_size() == 3 ? t.shape(1) : 1),
                    cols, 0};
    if (IsQuantizedMatrix(t.dtype())) return BindQuantized(t, view);
    if (t.layout() == plan::Tensor::ROW_PANELS) {
      if (op_->kind() != plan::MATMUL && op_->kind() != plan::LOGITS &&
          op_->kind() != plan::EXPERT_MATMUL) {
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

  // Sizes the scratch of a matmul reading `cols` columns of `weight`.
  void NoteMatmul(const MatrixView& weight, int64_t cols) {
    max_cols_ = std::max(max_cols_, cols);
    if (IsQuantizedMatrix(weight.dtype)) {
      quantized_activation_bytes_ =
          std::max(quantized_activation_bytes_, QuantizedActivationBytes(max_tokens_, cols));
    }
  }

 private:
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
    if (t.dtype() == plan::FP4_E2M1) {
      view.exponents = Blob(q.scales());  // E8M0 bytes (program_check: group 32, no zero points)
      return view;
    }
    view.scales = reinterpret_cast<const uint16_t*>(Blob(q.scales()));
    if (q.scheme() == plan::Quantization::ASYMMETRIC) view.zero_points = Blob(q.zero_points());
    if (q.has_input_permutation()) {
      view.input_permutation = reinterpret_cast<const int32_t*>(Blob(q.input_permutation()));
    }
    return view;
  }

  const plan::PlanMeta& meta_;
  const BlobLookup* blobs_;
  int32_t max_tokens_;
  float* arena_;
  const plan::Op* op_ = nullptr;
  int op_index_ = 0;
  int64_t max_cols_ = 0;
  int64_t quantized_activation_bytes_ = 0;
  int64_t expert_ints_ = 0;
  int64_t max_expert_rows_ = 0;
  int64_t max_expert_quantized_cols_ = 0;
  int32_t routers_ = 0;
};

// The kernels, one bind and one run per op kind.

absl::Status BindEmbed(OpBinder& binder, const plan::Op& op, CompiledOp& compiled) {
  compiled.width = binder.Width(op.outputs(0));
  auto table = binder.BindMatrix(op.weights(0));
  if (!table.ok()) return table.status();
  compiled.weight = *table;
  if (op.has_embed()) {
    // The scale as the table's dtype holds it (f32 first, as transformers' f32 tensor is cast).
    const float scale = static_cast<float>(op.embed().scale());
    compiled.embed_scale = table->dtype == plan::F16    ? plan::F16ToF32(plan::F32ToF16(scale))
                           : table->dtype == plan::BF16 ? plan::Bf16ToF32(plan::F32ToBf16(scale))
                                                        : scale;
  }
  return absl::OkStatus();
}

// row * scale in the table's dtype: F16 / BF16 products are rounded to it, as transformers'
// multiplication of two tensors of that dtype rounds them.
void ScaleEmbedding(plan::DType dtype, float scale, int64_t width, float* row) {
  for (int64_t i = 0; i < width; ++i) {
    const float product = row[i] * scale;
    row[i] = dtype == plan::F16    ? plan::F16ToF32(plan::F32ToF16(product))
             : dtype == plan::BF16 ? plan::Bf16ToF32(plan::F32ToBf16(product))
                                   : product;
  }
}

void RunEmbed(const CpuStep& step, const CompiledOp& op) {
  for (int64_t row = 0; row < step.num_tokens; ++row) {
    const int32_t token = step.batch->token_ids[row];
    float* out = op.output[0] + row * op.width;
    if (IsQuantizedMatrix(op.weight.dtype)) {
      QuantizedRowToF32(op.weight, token, out);
    } else {
      MatrixRowToF32(op.weight, token, out);
    }
    if (op.embed_scale != 0.0f) ScaleEmbedding(op.weight.dtype, op.embed_scale, op.width, out);
  }
}

absl::Status BindNorm(OpBinder& binder, const plan::Op& op, CompiledOp& compiled) {
  if (auto status = binder.RequireDtype(op.weights(0), plan::F32); !status.ok()) return status;
  compiled.width = binder.Width(op.inputs(0));
  compiled.vector_weight = binder.Floats(op.weights(0));
  compiled.norm_group = binder.TensorAt(op.weights(0)).shape(0);
  compiled.eps = static_cast<float>(op.norm().eps());
  return absl::OkStatus();
}

void RunRmsNorm(const CpuStep& step, const CompiledOp& op) {
  RmsNorm(*step.pool, op.input[0], op.vector_weight, op.eps,
          step.num_tokens * (op.width / op.norm_group), op.norm_group, op.output[0]);
}

void RunFusedAddRmsNorm(const CpuStep& step, const CompiledOp& op) {
  FusedAddRmsNorm(*step.pool, op.input[0], op.input[1], op.vector_weight, op.eps, step.num_tokens,
                  op.width, op.output[0], op.output[1]);
}

absl::Status BindMatmul(OpBinder& binder, const plan::Op& op, CompiledOp& compiled) {
  compiled.width = binder.Width(op.inputs(0));
  int64_t total_width = 0;
  for (int32_t id : op.outputs()) {
    compiled.matmul_outputs.push_back({binder.Pointer(id), total_width, binder.Width(id)});
    total_width += binder.Width(id);
  }
  auto w = binder.BindMatrix(op.weights(0));
  if (!w.ok()) return w.status();
  compiled.weight = *w;
  if (op.weights_size() == 2) compiled.vector_weight = binder.Floats(op.weights(1));
  binder.NoteMatmul(*w, compiled.width);
  return absl::OkStatus();
}

void MultiplyRows(const CpuStep& step, const CompiledOp& op, int64_t num_rows,
                  const int32_t* input_rows, const MatMulOutput* outputs, int32_t num_outputs) {
  if (IsQuantizedMatrix(op.weight.dtype) && step.quantized_mode == QuantizedActivations::kF32) {
    QuantizedMatMulExact(*step.pool, op.input[0], num_rows, input_rows, op.weight, op.vector_weight,
                         outputs, num_outputs, step.quantized_activations);
  } else if (IsQuantizedMatrix(op.weight.dtype)) {
    QuantizedMatMul(*step.pool, op.input[0], num_rows, input_rows, op.weight, op.vector_weight,
                    outputs, num_outputs, step.quantized_activations);
  } else {
    MatMul(*step.pool, op.input[0], num_rows, input_rows, op.weight, op.vector_weight, outputs,
           num_outputs);
  }
}

void RunMatmul(const CpuStep& step, const CompiledOp& op) {
  if (*step.matmul_observer) {
    (*step.matmul_observer)(op.index, op.input[0], step.num_tokens, op.width);
  }
  MultiplyRows(step, op, step.num_tokens, nullptr, op.matmul_outputs.data(),
               static_cast<int32_t>(op.matmul_outputs.size()));
}

// The logits of the rows the step asks for, into RunStep's output.
void RunLogits(const CpuStep& step, const CompiledOp& op) {
  MatMulOutput output{step.logits, 0, step.vocab_size};
  const int64_t rows = static_cast<int64_t>(step.batch->logit_rows.size());
  MultiplyRows(step, op, rows, step.batch->logit_rows.data(), &output, 1);
  if (op.softcap > 0.0f && rows > 0)
    SoftCap(*step.pool, step.logits, rows * step.vocab_size, op.softcap);
}

absl::Status BindLogits(OpBinder& binder, const plan::Op& op, CompiledOp& compiled) {
  if (op.has_logits()) compiled.softcap = static_cast<float>(op.logits().softcap());
  return BindMatmul(binder, op, compiled);
}

absl::Status BindRope(OpBinder& binder, const plan::Op& op, CompiledOp& compiled) {
  const plan::RopeAttrs& rope = op.rope();
  compiled.width = binder.Width(op.inputs(0));
  compiled.num_heads = rope.num_heads();
  compiled.head_dim = rope.head_dim();
  compiled.rotary_dim = plan::RotaryDim(rope.config(), rope.head_dim());
  compiled.cos_sin_scale = static_cast<float>(plan::RopeCosSinScale(rope.config()));
  compiled.inv_freq.resize(compiled.rotary_dim / 2);
  RopeInverseFrequencies(rope.config(), rope.head_dim(), compiled.inv_freq.data());
  return absl::OkStatus();
}

void RunRope(const CpuStep& step, const CompiledOp& op) {
  if (op.output[0] != op.input[0]) {
    std::memmove(op.output[0], op.input[0], step.num_tokens * op.width * sizeof(float));
  }
  Rope(*step.pool, op.output[0], step.batch->positions.data(), step.num_tokens, op.num_heads,
       op.head_dim, op.rotary_dim, op.inv_freq.data(), op.cos_sin_scale, step.rope_scratch);
}

absl::Status BindAttention(OpBinder& binder, const plan::Op& op, CompiledOp& compiled) {
  if (op.weights_size() == 1) compiled.vector_weight = binder.Floats(op.weights(0));  // sinks
  const plan::AttentionAttrs& attention = op.attention();
  compiled.num_heads = attention.num_heads();
  compiled.num_kv_heads = attention.num_kv_heads();
  compiled.head_dim = attention.head_dim();
  compiled.layer = attention.layer();
  compiled.sliding_window = attention.sliding_window();
  compiled.scale = static_cast<float>(plan::SoftmaxScale(attention));
  compiled.softcap = static_cast<float>(attention.logit_softcap());
  return absl::OkStatus();
}

void RunAttention(const CpuStep& step, const CompiledOp& op) {
  kv::KvStorage& kv = *step.kv;
  const int64_t kv_width = static_cast<int64_t>(op.num_kv_heads) * op.head_dim;
  // Every token's k and v go into the cache first, so tokens of one step see each other.
  for (int64_t row = 0; row < step.num_tokens; ++row) {
    kv.WriteToken(op.layer, step.batch->slot_mapping[row], op.input[1] + row * kv_width,
                  op.input[2] + row * kv_width);
  }
  AttentionArgs args;
  args.q = op.input[0];
  args.out = op.output[0];
  args.kv_dtype = kv.dtype();
  if (kv.dtype() == plan::F32) {
    args.key_cache = kv.key(op.layer, 0);
    args.value_cache = kv.value(op.layer, 0);
  } else {
    args.key_bytes = kv.key_bytes(op.layer, 0);
    args.value_bytes = kv.value_bytes(op.layer, 0);
    args.key_scales = kv.key_scales(op.layer, 0);
    args.value_scales = kv.value_scales(op.layer, 0);
  }
  args.token_stride = kv.token_stride();
  args.num_heads = op.num_heads;
  args.num_kv_heads = op.num_kv_heads;
  args.head_dim = op.head_dim;
  args.block_size = step.block_size;
  args.sliding_window = op.sliding_window;
  args.scale = op.scale;
  args.softcap = op.softcap;
  args.sinks = op.vector_weight;
  args.num_tokens = step.num_tokens;
  args.token_block_table = step.token_block_table;
  args.token_index = step.token_index;
  args.scratch = step.attention_scratch;
  args.scratch_stride = step.attention_scratch_stride;
  if (args.kv_dtype == plan::F32) {
    Attention(*step.pool, args);
  } else {
    KvCacheAttention(*step.pool, args);
  }
}

absl::Status BindElementwise(OpBinder& binder, const plan::Op& op, CompiledOp& compiled) {
  compiled.width = binder.Width(op.inputs(0));
  return absl::OkStatus();
}

void RunElementwise(const CpuStep& step, const CompiledOp& op) {
  ElementwiseOp(*step.pool, op.kind, op.input[0], op.input[1], step.num_tokens * op.width,
                op.output[0]);
}

absl::Status BindRouter(OpBinder& binder, const plan::Op& op, CompiledOp& compiled) {
  const plan::RouterAttrs& router = op.router();
  compiled.router_index = binder.NextRouter();
  compiled.num_experts = router.num_experts();
  compiled.top_k = router.top_k();
  compiled.scoring = router.scoring();
  compiled.normalize = router.normalize();
  return absl::OkStatus();
}

void RunRouter(const CpuStep& step, const CompiledOp& op) {
  int32_t* counts = step.expert_counts != nullptr
                        ? step.expert_counts + op.router_index * step.expert_stride
                        : nullptr;
  RouteTokens(*step.pool, op.input[0], step.num_tokens, op.num_experts, op.top_k, op.scoring,
              op.normalize, reinterpret_cast<int32_t*>(op.output[0]), op.output[1], counts);
}

absl::Status BindExpertMatmul(OpBinder& binder, const plan::Op& op, CompiledOp& compiled) {
  compiled.num_experts = op.expert().num_experts();
  compiled.top_k = op.expert().top_k();
  const plan::Tensor& w = binder.TensorAt(op.weights(0));
  compiled.rows_per_expert = w.shape(1);
  compiled.width = w.shape(2);
  compiled.sliced = compiled.top_k > 1 && binder.Width(op.inputs(0)) != compiled.width;
  int64_t begin = 0;
  for (int32_t id : op.outputs()) {
    const int64_t width = binder.Width(id) / compiled.top_k;
    compiled.matmul_outputs.push_back({binder.Pointer(id), begin, width});
    begin += width;
  }
  auto matrix = binder.BindMatrix(op.weights(0));
  if (!matrix.ok()) return matrix.status();
  compiled.weight = *matrix;
  if (op.weights_size() == 2) compiled.vector_weight = binder.Floats(op.weights(1));
  binder.NoteMatmul(*matrix, compiled.width);
  binder.NoteExpertMatmul(*matrix, compiled.top_k, compiled.num_experts, compiled.rows_per_expert);
  return absl::OkStatus();
}

// ExpertRowsMatMul for F16 / BF16 / F32 experts, the AMX-BF16 path from kAmxMinRows rows.
template <int64_t kAmxMinRows>
void MatMulExpertRows(ThreadPool& pool, const float* x, int64_t rows, const int32_t* input_rows,
                      const MatrixView& w, const float* bias, const MatMulOutput* outputs,
                      int32_t num_outputs, void*) {
  MatMul(pool, x, rows, input_rows, w, bias, outputs, num_outputs, kAmxMinRows);
}

void RunExpertMatmul(const CpuStep& step, const CompiledOp& op) {
  ExpertMatMulArgs args;
  args.x = op.input[0];
  args.sliced = op.sliced;
  args.ids = reinterpret_cast<const int32_t*>(op.input[1]);
  args.num_tokens = step.num_tokens;
  args.top_k = op.top_k;
  args.num_experts = op.num_experts;
  args.weights = op.weight;
  args.rows_per_expert = op.rows_per_expert;
  args.bias = op.vector_weight;
  args.outputs = op.matmul_outputs.data();
  args.num_outputs = static_cast<int32_t>(op.matmul_outputs.size());
  args.int_scratch = step.expert_ints;
  args.float_scratch = step.expert_floats;
  args.single_pools = step.single_pools;
  args.thread_scratch = step.expert_thread_scratch;
  args.thread_scratch_bytes = step.expert_thread_scratch_bytes;
  args.matmul_scratch = step.quantized_activations;
  ExpertRowsMatMul multiply;
  if (!IsQuantizedMatrix(op.weight.dtype)) {
    // Whether an expert's rows take the AMX-BF16 path follows the step's tokens, as a dense
    // matmul's would, not the rows of the expert or of its share on a thread (kernels.h).
    multiply = args.num_tokens >= kAmxMinTokens
                   ? &MatMulExpertRows<1>
                   : &MatMulExpertRows<std::numeric_limits<int64_t>::max()>;
  } else if (step.quantized_mode == QuantizedActivations::kF32) {
    multiply = QuantizedMatMulExact;
  } else {
    multiply = QuantizedMatMul;
  }
  ExpertMatMul(*step.pool, args, multiply);
}

absl::Status BindCombine(OpBinder& binder, const plan::Op& op, CompiledOp& compiled) {
  compiled.width = binder.Width(op.outputs(0));
  compiled.top_k = static_cast<int32_t>(binder.Width(op.inputs(1)));
  return absl::OkStatus();
}

void RunCombine(const CpuStep& step, const CompiledOp& op) {
  MoeCombine(*step.pool, op.input[0], op.input[1], op.input[2], op.input[3], step.num_tokens,
             op.top_k, op.width, op.output[0]);
}

absl::Status BindSwiglu(OpBinder& binder, const plan::Op& op, CompiledOp& compiled) {
  compiled.width = binder.Width(op.inputs(0));
  compiled.alpha = static_cast<float>(op.swiglu().alpha());
  compiled.limit = static_cast<float>(op.swiglu().limit());
  return absl::OkStatus();
}

void RunSwiglu(const CpuStep& step, const CompiledOp& op) {
  ClampedSwiglu(*step.pool, op.input[0], op.input[1], step.num_tokens * op.width, op.alpha,
                op.limit, op.output[0]);
}

constexpr CpuKernel kCpuKernels[] = {
    {plan::EMBED, BindEmbed, RunEmbed},
    {plan::RMS_NORM, BindNorm, RunRmsNorm},
    {plan::FUSED_ADD_RMS_NORM, BindNorm, RunFusedAddRmsNorm},
    {plan::MATMUL, BindMatmul, RunMatmul},
    {plan::LOGITS, BindLogits, RunLogits},
    {plan::ROPE, BindRope, RunRope},
    {plan::ATTENTION, BindAttention, RunAttention},
    {plan::SILU, BindElementwise, RunElementwise},
    {plan::MUL, BindElementwise, RunElementwise},
    {plan::ADD, BindElementwise, RunElementwise},
    {plan::SILU_MUL, BindElementwise, RunElementwise},
    {plan::GELU_TANH_MUL, BindElementwise, RunElementwise},
    {plan::ROUTER, BindRouter, RunRouter},
    {plan::EXPERT_MATMUL, BindExpertMatmul, RunExpertMatmul},
    {plan::MOE_COMBINE, BindCombine, RunCombine},
    {plan::CLAMPED_SWIGLU, BindSwiglu, RunSwiglu},
};

const CpuKernel* FindCpuKernel(plan::OpKind kind) {
  for (const CpuKernel& kernel : kCpuKernels) {
    if (kernel.kind == kind) return &kernel;
  }
  return nullptr;
}

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

  OpBinder compiler(meta, &blobs, max_tokens_, arena_.get());
  for (int index = 0; index < meta.program().ops_size(); ++index) {
    absl::StatusOr<CompiledOp> op = compiler.Bind(index);
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
  // Far above any core count; a typo of 10^6 is refused here rather than by the system midway.
  constexpr int32_t kMaxThreads = 1024;
  if (options.num_threads > kMaxThreads) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "num_threads %d: at most %d (0: one per allowed CPU)", options.num_threads, kMaxThreads));
  }
  try {
    pool_ = std::make_unique<threading::ThreadPool>(options.num_threads);
  } catch (const std::system_error& error) {
    return absl::ResourceExhaustedError(absl::StrFormat("cannot start %d threads (num_threads): %s",
                                                        options.num_threads, error.what()));
  }
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
  expert_ints_.resize(compiler.expert_ints());
  if (compiler.max_expert_rows() > 0) {
    expert_floats_ = AllocateFloats(
        ExpertMatMulScratchFloats(max_tokens_, compiler.max_expert_rows(), num_threads));
    if (compiler.max_expert_quantized_cols() > 0) {
      expert_thread_scratch_bytes_ = ExpertMatMulThreadScratchBytes(
          max_tokens_, num_threads, compiler.max_expert_quantized_cols());
      expert_thread_scratch_ = AllocateFloats(expert_thread_scratch_bytes_ * num_threads /
                                              static_cast<int64_t>(sizeof(float)));
    }
    if (expert_floats_ == nullptr ||
        (expert_thread_scratch_bytes_ > 0 && expert_thread_scratch_ == nullptr)) {
      return absl::ResourceExhaustedError("cannot allocate the expert matmul scratch");
    }
    for (int32_t thread = 0; thread < num_threads; ++thread) {
      single_pools_.push_back(std::make_unique<threading::ThreadPool>(1));
      single_pool_pointers_.push_back(single_pools_.back().get());
    }
  }
  record_expert_load_ = options.record_expert_load;
  num_routers_ = facts->num_routers;
  max_experts_ = facts->max_experts;
  if (record_expert_load_) expert_counts_.assign(int64_t{num_routers_} * max_experts_, 0);
  return absl::OkStatus();
}

absl::Status CpuBackend::LastStepExpertLoad(ExpertLoad& load) const {
  if (!record_expert_load_) {
    return absl::FailedPreconditionError(
        "cpu backend: expert load is recorded only with BackendOptions::record_expert_load");
  }
  if (!stepped_) return absl::FailedPreconditionError("cpu backend: no step has run yet");
  load.num_routers = num_routers_;
  load.num_experts = max_experts_;
  load.counts = expert_counts_;
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
  CpuStep step;
  step.pool = pool_.get();
  step.batch = &batch;
  step.num_tokens = num_tokens;
  step.logits = logits;
  step.vocab_size = vocab_size_;
  step.matmul_observer = &matmul_observer_;
  step.quantized_mode = quantized_mode_;
  step.quantized_activations = quantized_activations_.get();
  step.rope_scratch = scratch_.get();
  step.kv = kv_.get();
  step.block_size = block_size_;
  step.attention_scratch = attention_scratch_.get();
  step.attention_scratch_stride = attention_scratch_stride_;
  step.token_block_table = token_block_table_.data();
  step.token_index = token_index_.data();
  step.expert_ints = expert_ints_.data();
  step.expert_floats = expert_floats_.get();
  step.single_pools = single_pool_pointers_.empty() ? nullptr : single_pool_pointers_.data();
  step.expert_thread_scratch = reinterpret_cast<uint8_t*>(expert_thread_scratch_.get());
  step.expert_thread_scratch_bytes = expert_thread_scratch_bytes_;
  if (record_expert_load_) {
    std::fill(expert_counts_.begin(), expert_counts_.end(), 0);
    step.expert_counts = expert_counts_.data();
    step.expert_stride = max_experts_;
  }
  for (const CompiledOp& op : ops_) op.kernel->run(step, op);
  stepped_ = true;
  return absl::OkStatus();
}

}  // namespace

absl::Status CpuSupports(const plan::PlanMeta& meta, int op_index) {
  if (op_index < 0 || op_index >= meta.program().ops_size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("program op %d outside [0, %d)", op_index, meta.program().ops_size()));
  }
  return OpBinder(meta, nullptr, 1, nullptr).Bind(op_index).status();
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(const plan::PlanMeta& meta,
                                                          const BlobLookup& blobs,
                                                          const BackendOptions& options) {
  auto backend = std::make_unique<CpuBackend>();
  if (absl::Status status = backend->Compile(meta, blobs, options); !status.ok()) return status;
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace llmrt::cpu
