#include "runtime/plan/program_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/plan/mxfp4.h"
#include "runtime/plan/plan_reader.h"

namespace llmrt::plan {
namespace {

// The E8M0 byte that means NaN.
constexpr uint8_t kE8M0Nan = 255;

bool IsFloat(DType dtype) { return dtype == F32 || dtype == F16 || dtype == BF16; }
bool IsQuantized(DType dtype) { return dtype == I8 || dtype == I4 || dtype == FP4_E2M1; }
bool IsPacked4(DType dtype) { return dtype == I4 || dtype == FP4_E2M1; }

// A matrix's dims as an op reads it: [rows, cols], or with experts > 0 the expert stack
// [experts, rows, cols] (EXPERT_MATMUL), whose companions are 3-D alike.
struct MatrixDims {
  int64_t experts = 0;
  int64_t rows = 0;  // < 0: any count (2-D only)
  int64_t cols = 0;
  // The shape of a per-row companion with `last` entries per row ([rows, last] or [experts,
  // rows, last]).
  std::vector<int64_t> PerRow(int64_t rows_found, int64_t last) const {
    if (experts > 0) return {experts, rows, last};
    return {rows_found, last};
  }
};

// The oneof case each kind must carry (NOT_SET: none).
Op::AttrsCase AttrsOf(OpKind kind) {
  switch (kind) {
    case RMS_NORM:
    case FUSED_ADD_RMS_NORM:
      return Op::kNorm;
    case ROPE:
      return Op::kRope;
    case ATTENTION:
      return Op::kAttention;
    case ROUTER:
      return Op::kRouter;
    case EXPERT_MATMUL:
      return Op::kExpert;
    case CLAMPED_SWIGLU:
      return Op::kSwiglu;
    default:
      return Op::ATTRS_NOT_SET;
  }
}

const char* AttrsName(Op::AttrsCase attrs) {
  switch (attrs) {
    case Op::kNorm:
      return "norm";
    case Op::kRope:
      return "rope";
    case Op::kAttention:
      return "attention";
    case Op::kEmbed:
      return "embed";
    case Op::kLogits:
      return "logits";
    case Op::kRouter:
      return "router";
    case Op::kExpert:
      return "expert";
    case Op::kSwiglu:
      return "swiglu";
    default:
      return "none";
  }
}

class Checker {
 public:
  Checker(const PlanMeta& meta, const BlobLookup& blobs, ProgramScope scope)
      : meta_(meta), blobs_(blobs), scope_(scope) {}

  absl::StatusOr<ProgramFacts> Run() {
    if (absl::Status status = CheckValues(); !status.ok()) return status;
    for (int index = 0; index < program().ops_size(); ++index) {
      op_ = &program().ops(index);
      op_index_ = index;
      if (absl::Status status = CheckOp(); !status.ok()) return status;
    }
    if (absl::Status status = Finish(); !status.ok()) return status;
    return facts_;
  }

 private:
  const Program& program() const { return meta_.program(); }

  absl::Status Error(const std::string& message) const {
    return absl::InvalidArgumentError(
        absl::StrFormat("program op %d (%s): %s", op_index_, OpKind_Name(op_->kind()), message));
  }

  absl::Status CheckValues() {
    const int64_t per_token = program().arena_bytes_per_token();
    if (per_token < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("program: arena_bytes_per_token %d is negative", per_token));
    }
    for (int id = 0; id < program().values_size(); ++id) {
      const plan::Value& value = program().values(id);
      if (value.width() <= 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("program value %d (%s): width must be positive, got %d", id,
                            value.name(), value.width()));
      }
      if (value.kind() == Value::ACTIVATION || value.kind() == Value::EXPERT_IDS) {
        const bool ids = value.kind() == Value::EXPERT_IDS;
        if (value.dtype() != (ids ? I32 : F32) && value.dtype() != DTYPE_UNSPECIFIED) {
          return absl::UnimplementedError(
              absl::StrFormat("program value %d (%s): %s are %s, the plan asks for dtype %d", id,
                              value.name(), ids ? "expert ids" : "activations", ids ? "I32" : "F32",
                              static_cast<int>(value.dtype())));
        }
        // Both kinds take 4 bytes per element.
        const int64_t offset = value.arena_offset_per_token();
        if (offset < 0 || offset % sizeof(float) != 0 ||
            value.width() > (per_token - offset) / static_cast<int64_t>(sizeof(float))) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "program value %d (%s): %d floats at arena offset %d per token do not fit in "
              "arena_bytes_per_token %d (or the offset is not a multiple of 4)",
              id, value.name(), value.width(), offset, per_token));
        }
      } else if ((value.kind() == Value::TOKEN_IDS || value.kind() == Value::POSITIONS) &&
                 value.width() != 1) {
        return absl::InvalidArgumentError(
            absl::StrFormat("program value %d (%s): token ids and positions have width 1, got %d",
                            id, value.name(), value.width()));
      } else if (value.kind() == Value::LOGITS) {
        if (facts_.vocab_size != 0 && facts_.vocab_size != value.width()) {
          return absl::InvalidArgumentError(
              absl::StrFormat("program value %d (%s): a second LOGITS value of width %d (the "
                              "first has %d)",
                              id, value.name(), value.width(), facts_.vocab_size));
        }
        facts_.vocab_size = value.width();
      } else if (value.kind() < Value::ACTIVATION || value.kind() > Value::EXPERT_IDS) {
        return absl::InvalidArgumentError(absl::StrFormat("program value %d (%s): unknown kind %d",
                                                          id, value.name(), value.kind()));
      }
    }
    if (facts_.vocab_size == 0 && scope_ == ProgramScope::kModel) {
      return absl::InvalidArgumentError("program: no LOGITS value, nothing to compute");
    }
    return absl::OkStatus();
  }

  absl::Status CheckOp() {
    const Op& op = *op_;
    const Op::AttrsCase attrs = AttrsOf(op.kind());
    // EMBED and LOGITS attributes are optional (absent: no scale, no soft-cap), so plans written
    // before they existed stay valid.
    const bool optional = (op.kind() == EMBED && op.attrs_case() == Op::kEmbed) ||
                          (op.kind() == LOGITS && op.attrs_case() == Op::kLogits);
    if (op.attrs_case() != attrs && !optional) {
      return Error(absl::StrFormat("carries attributes %s, its kind needs %s",
                                   AttrsName(op.attrs_case()), AttrsName(attrs)));
    }
    switch (op.kind()) {
      case EMBED:
        return CheckEmbed();
      case RMS_NORM:
      case FUSED_ADD_RMS_NORM:
        return CheckNorm(op.kind() == FUSED_ADD_RMS_NORM);
      case MATMUL:
        return CheckMatmul(false);
      case LOGITS:
        if (op.has_logits() &&
            !(op.logits().softcap() > 0.0 && std::isfinite(op.logits().softcap()))) {
          return Error(absl::StrFormat("logits.softcap must be finite and > 0, got %g",
                                       op.logits().softcap()));
        }
        return CheckMatmul(true);
      case ROPE:
        return CheckRopeOp();
      case ATTENTION:
        return CheckAttention();
      case SILU:
        if (auto status = CheckCounts(1, 1, 1, 1, 0, 0); !status.ok()) return status;
        return SameWidthActivations(1, 1).status();
      case ROUTER:
        return CheckRouter();
      case EXPERT_MATMUL:
        return CheckExpertMatmul();
      case MOE_COMBINE:
        return CheckCombine();
      case CLAMPED_SWIGLU: {
        if (auto status = CheckCounts(2, 2, 1, 1, 0, 0); !status.ok()) return status;
        if (auto width = SameWidthActivations(2, 1); !width.ok()) return width.status();
        const SwigluAttrs& swiglu = op_->swiglu();
        for (const auto& [name, value] :
             {std::pair<const char*, double>{"alpha", swiglu.alpha()}, {"limit", swiglu.limit()}}) {
          if (!(value > 0.0) || std::isinf(value)) {
            return Error(absl::StrFormat("swiglu.%s must be finite and > 0, got %g", name, value));
          }
        }
        return absl::OkStatus();
      }
      case MUL:
      case ADD:
      case SILU_MUL:
      case GELU_TANH_MUL:
        if (auto status = CheckCounts(2, 2, 1, 1, 0, 0); !status.ok()) return status;
        return SameWidthActivations(2, 1).status();
      default:
        return Error(absl::StrFormat("unknown op kind %d", static_cast<int>(op.kind())));
    }
  }

  absl::Status CheckEmbed() {
    if (auto status = CheckCounts(1, 1, 1, 1); !status.ok()) return status;
    if (auto status = CheckInputKind(0, Value::TOKEN_IDS); !status.ok()) return status;
    auto out = Activation(op_->outputs(0), "output 0");
    if (!out.ok()) return out.status();
    auto rows = CheckMatrix(op_->weights(0), {0, -1, (*out)->width()});
    if (!rows.ok()) return rows.status();
    if (op_->has_embed() && !(op_->embed().scale() > 0.0 && std::isfinite(op_->embed().scale()))) {
      return Error(
          absl::StrFormat("embed.scale must be finite and > 0, got %g", op_->embed().scale()));
    }
    facts_.max_token_id = std::min(facts_.max_token_id, *rows);
    return absl::OkStatus();
  }

  absl::Status CheckNorm(bool fused) {
    const int count = fused ? 2 : 1;
    if (auto status = CheckCounts(count, count, count, count); !status.ok()) return status;
    auto width = SameWidthActivations(count, count);
    if (!width.ok()) return width.status();
    // RMS_NORM's gamma may be shorter than the row: each group of its length is normalized on
    // its own (a per-head norm). The fused norm normalizes whole rows.
    auto tensor = TensorAt(op_->weights(0));
    if (!tensor.ok()) return tensor.status();
    const plan::Tensor& gamma = **tensor;
    if (gamma.shape_size() != 1 || gamma.shape(0) <= 0 || *width % gamma.shape(0) != 0 ||
        (fused && gamma.shape(0) != *width)) {
      return Error(absl::StrFormat("gamma %s has shape [%s]; expected [G] with G %s the width %d",
                                   gamma.name(), absl::StrJoin(gamma.shape(), ", "),
                                   fused ? "equal to" : "dividing", *width));
    }
    if (auto status = CheckVector(op_->weights(0), gamma.shape(0)); !status.ok()) return status;
    const double eps = op_->norm().eps();
    if (!(eps >= 0.0) || std::isinf(eps)) {
      return Error(absl::StrFormat("eps must be finite and >= 0, got %g", eps));
    }
    return absl::OkStatus();
  }

  absl::Status CheckMatmul(bool logits) {
    if (auto status = CheckCounts(1, 1, 1, logits ? 1 : 1 << 20, 1, 2); !status.ok()) {
      return status;
    }
    auto in = Activation(op_->inputs(0), "input 0");
    if (!in.ok()) return in.status();
    const int64_t cols = (*in)->width();
    int64_t total_width = 0;
    for (int i = 0; i < op_->outputs_size(); ++i) {
      const int32_t id = op_->outputs(i);
      auto value = ValueAt(id, absl::StrFormat("output %d", i));
      if (!value.ok()) return value.status();
      const auto wanted = logits ? Value::LOGITS : Value::ACTIVATION;
      if ((*value)->kind() != wanted) {
        return Error(absl::StrFormat("output %d (value %d, %s) has kind %d, expected %d", i, id,
                                     (*value)->name(), (*value)->kind(), wanted));
      }
      if (!logits && Overlap(op_->inputs(0), id)) {
        return Error(
            absl::StrFormat("output %d (value %d) shares arena bytes with the input", i, id));
      }
      total_width += (*value)->width();
    }
    auto rows = CheckMatrix(op_->weights(0), {0, total_width, cols});
    if (!rows.ok()) return rows.status();
    if (op_->weights_size() == 2) return CheckVector(op_->weights(1), total_width);
    return absl::OkStatus();
  }

  absl::Status CheckRouter() {
    if (auto status = CheckCounts(1, 1, 2, 2, 0, 0); !status.ok()) return status;
    const RouterAttrs& router = op_->router();
    const int32_t experts = router.num_experts(), top_k = router.top_k();
    if (!(1 <= top_k && top_k <= experts && experts <= kMaxExperts)) {
      return Error(absl::StrFormat(
          "router.top_k %d and router.num_experts %d must satisfy 1 <= top_k <= num_experts <= %d",
          top_k, experts, kMaxExperts));
    }
    if (router.scoring() != RouterAttrs::SOFTMAX_TOPK &&
        router.scoring() != RouterAttrs::TOPK_SOFTMAX) {
      return Error(absl::StrFormat("router.scoring must be SOFTMAX_TOPK or TOPK_SOFTMAX, got %d",
                                   static_cast<int>(router.scoring())));
    }
    if (router.normalize() && router.scoring() != RouterAttrs::SOFTMAX_TOPK) {
      return Error(
          "router.normalize is SOFTMAX_TOPK's (TOPK_SOFTMAX weights already sum to 1), found "
          "with TOPK_SOFTMAX");
    }
    auto logits = Activation(op_->inputs(0), "input 0 (logits)");
    if (!logits.ok()) return logits.status();
    if ((*logits)->width() != experts) {
      return Error(absl::StrFormat("input 0 (logits) has width %d, expected router.num_experts %d",
                                   (*logits)->width(), experts));
    }
    auto ids = ValueAt(op_->outputs(0), "output 0 (ids)");
    if (!ids.ok()) return ids.status();
    if ((*ids)->kind() != Value::EXPERT_IDS || (*ids)->width() != top_k) {
      return Error(absl::StrFormat(
          "output 0 (ids, value %d) has kind %d and width %d, expected EXPERT_IDS (%d) of width "
          "router.top_k %d",
          op_->outputs(0), (*ids)->kind(), (*ids)->width(), Value::EXPERT_IDS, top_k));
    }
    auto weights = Activation(op_->outputs(1), "output 1 (weights)");
    if (!weights.ok()) return weights.status();
    if ((*weights)->width() != top_k) {
      return Error(absl::StrFormat("output 1 (weights) has width %d, expected router.top_k %d",
                                   (*weights)->width(), top_k));
    }
    if (auto status = NoOverlapWithInputs(); !status.ok()) return status;
    if (Overlap(op_->outputs(0), op_->outputs(1))) {
      return Error("outputs 0 (ids) and 1 (weights) share arena bytes");
    }
    router_experts_[op_->outputs(0)] = experts;
    ++facts_.num_routers;
    facts_.max_experts = std::max(facts_.max_experts, experts);
    facts_.max_top_k = std::max(facts_.max_top_k, top_k);
    return absl::OkStatus();
  }

  absl::Status CheckExpertMatmul() {
    if (auto status = CheckCounts(2, 2, 1, 1 << 20, 1, 2); !status.ok()) return status;
    const ExpertAttrs& expert = op_->expert();
    auto x = Activation(op_->inputs(0), "input 0 (x)");
    if (!x.ok()) return x.status();
    auto ids = ValueAt(op_->inputs(1), "input 1 (ids)");
    if (!ids.ok()) return ids.status();
    if ((*ids)->kind() != Value::EXPERT_IDS) {
      return Error(absl::StrFormat("input 1 (ids, value %d) has kind %d, expected EXPERT_IDS (%d)",
                                   op_->inputs(1), (*ids)->kind(), Value::EXPERT_IDS));
    }
    // Kernels index expert matrices by the ids without a bounds check: the ids must come from a
    // ROUTER that chose among exactly this many experts.
    const auto router = router_experts_.find(op_->inputs(1));
    if (router == router_experts_.end()) {
      return Error(absl::StrFormat(
          "input 1 (ids, value %d) is not output 0 of an earlier ROUTER op", op_->inputs(1)));
    }
    if (expert.num_experts() != router->second) {
      return Error(absl::StrFormat(
          "expert.num_experts %d differs from the num_experts %d of the ROUTER writing input 1",
          expert.num_experts(), router->second));
    }
    const int64_t top_k = expert.top_k();
    if (top_k != (*ids)->width()) {
      return Error(absl::StrFormat("expert.top_k %d differs from the ids' width %d", top_k,
                                   (*ids)->width()));
    }
    auto tensor = TensorAt(op_->weights(0));
    if (!tensor.ok()) return tensor.status();
    const plan::Tensor& w = **tensor;
    if (w.shape_size() != 3) {
      return Error(absl::StrFormat("tensor %s has shape [%s], expected [%d, N, K]", w.name(),
                                   absl::StrJoin(w.shape(), ", "), expert.num_experts()));
    }
    const int64_t cols = w.shape(2);
    if (cols <= 0 || ((*x)->width() != cols && (*x)->width() != top_k * cols)) {
      return Error(absl::StrFormat(
          "input 0 (x) has width %d, expected K %d (one row per token) or top_k * K %d (one "
          "slice per slot)",
          (*x)->width(), cols, top_k * cols));
    }
    int64_t total_width = 0;
    for (int i = 0; i < op_->outputs_size(); ++i) {
      auto value = Activation(op_->outputs(i), absl::StrFormat("output %d", i));
      if (!value.ok()) return value.status();
      if ((*value)->width() % top_k != 0) {
        return Error(absl::StrFormat("output %d has width %d, not a multiple of top_k %d", i,
                                     (*value)->width(), top_k));
      }
      total_width += (*value)->width() / top_k;
    }
    if (auto status = NoOverlapWithInputs(); !status.ok()) return status;
    if (auto rows = CheckMatrix(op_->weights(0), {expert.num_experts(), total_width, cols});
        !rows.ok()) {
      return rows.status();
    }
    if (op_->weights_size() == 2) {
      auto bias = TensorAt(op_->weights(1));
      if (!bias.ok()) return bias.status();
      const plan::Tensor& b = **bias;
      if (b.shape_size() != 2 || b.shape(0) != expert.num_experts() || b.shape(1) != total_width ||
          b.dtype() != F32) {
        return Error(absl::StrFormat("tensor %s is %s [%s], expected F32 [%d, %d]", b.name(),
                                     DType_Name(b.dtype()), absl::StrJoin(b.shape(), ", "),
                                     expert.num_experts(), total_width));
      }
      return CheckBlob(op_->weights(1), b,
                       expert.num_experts() * total_width * static_cast<int64_t>(sizeof(float)));
    }
    return absl::OkStatus();
  }

  absl::Status CheckCombine() {
    if (auto status = CheckCounts(2, 4, 1, 1, 0, 0); !status.ok()) return status;
    if (op_->inputs_size() == 3) {
      return Error("expected 2 inputs (y, weights) or 4 (y, weights, shared, shared_gate), got 3");
    }
    auto out = Activation(op_->outputs(0), "output 0");
    if (!out.ok()) return out.status();
    auto weights = Activation(op_->inputs(1), "input 1 (weights)");
    if (!weights.ok()) return weights.status();
    const int64_t hidden = (*out)->width(), top_k = (*weights)->width();
    const char* roles[4] = {"input 0 (y)", "input 1 (weights)", "input 2 (shared)",
                            "input 3 (shared_gate)"};
    const int64_t widths[4] = {top_k * hidden, top_k, hidden, 1};
    for (int i = 0; i < op_->inputs_size(); ++i) {
      auto value = Activation(op_->inputs(i), roles[i]);
      if (!value.ok()) return value.status();
      if ((*value)->width() != widths[i]) {
        return Error(absl::StrFormat(
            "%s has width %d, expected %d (top_k %d from the weights, H %d from the output)",
            roles[i], (*value)->width(), widths[i], top_k, hidden));
      }
    }
    return NoOverlapWithInputs();
  }

  // No output of the op shares arena bytes with any of its inputs (kernels that read a token's
  // inputs while writing its outputs, possibly on other threads, rely on it).
  absl::Status NoOverlapWithInputs() const {
    for (int o = 0; o < op_->outputs_size(); ++o) {
      for (int i = 0; i < op_->inputs_size(); ++i) {
        if (Overlap(op_->inputs(i), op_->outputs(o))) {
          return Error(absl::StrFormat("output %d (value %d) shares arena bytes with input %d", o,
                                       op_->outputs(o), i));
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status CheckRopeOp() {
    if (auto status = CheckCounts(2, 2, 1, 1, 0, 0); !status.ok()) return status;
    if (auto status = CheckInputKind(1, Value::POSITIONS); !status.ok()) return status;
    auto in = Activation(op_->inputs(0), "input 0");
    if (!in.ok()) return in.status();
    auto out = Activation(op_->outputs(0), "output 0");
    if (!out.ok()) return out.status();
    const RopeAttrs& rope = op_->rope();
    if (rope.head_dim() <= 0 || rope.head_dim() % 2 != 0 || rope.num_heads() <= 0 ||
        static_cast<int64_t>(rope.num_heads()) * rope.head_dim() != (*in)->width() ||
        (*out)->width() != (*in)->width()) {
      return Error(absl::StrFormat(
          "num_heads %d x head_dim %d (even, positive) must equal the input width %d and the "
          "output width %d",
          rope.num_heads(), rope.head_dim(), (*in)->width(), (*out)->width()));
    }
    facts_.max_rope_head_dim = std::max(facts_.max_rope_head_dim, rope.head_dim());
    const int32_t rotary_dim = rope.config().rotary_dim();
    if (rotary_dim < 0 || rotary_dim % 2 != 0 || rotary_dim > rope.head_dim()) {
      return Error(absl::StrFormat(
          "rope rotary_dim must be even and in [0, head_dim %d] (0: all of it), got %d",
          rope.head_dim(), rotary_dim));
    }
    return CheckRopeConfig(rope.config(), RotaryDim(rope.config(), rope.head_dim()),
                           rope.head_dim());
  }

  absl::Status CheckRopeConfig(const RopeConfig& rope, int32_t rotary_dim, int32_t head_dim) const {
    if (rope.scaling() != RopeConfig::LONGROPE && rope.ext_factors_size() != 0) {
      return Error(absl::StrFormat("rope ext_factors are LONGROPE's; scaling %s has %d",
                                   RopeConfig::Scaling_Name(rope.scaling()),
                                   rope.ext_factors_size()));
    }
    if (!(rope.theta() > 0.0) || std::isinf(rope.theta())) {
      return Error(absl::StrFormat("rope theta must be positive and finite, got %g", rope.theta()));
    }
    switch (rope.scaling()) {
      case RopeConfig::SCALING_NONE:
        return absl::OkStatus();
      case RopeConfig::LINEAR:
        if (!(rope.factor() > 0.0)) {
          return Error(
              absl::StrFormat("LINEAR rope factor must be positive, got %g", rope.factor()));
        }
        return absl::OkStatus();
      case RopeConfig::LLAMA3:
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
      case RopeConfig::YARN:
        if (!(rope.factor() > 0.0) || !(rope.beta_fast() > 0.0) || !(rope.beta_slow() > 0.0) ||
            rope.original_max_position_embeddings() <= 0) {
          return Error(
              absl::StrFormat("YARN rope needs factor, beta_fast, beta_slow and "
                              "original_max_position_embeddings positive; got %g, %g, %g, %d",
                              rope.factor(), rope.beta_fast(), rope.beta_slow(),
                              rope.original_max_position_embeddings()));
        }
        // Its attention_factor is folded into the attention scale, which is only right when
        // every dim of q and k is scaled by it.
        if (rotary_dim != head_dim) {
          return Error(absl::StrFormat(
              "YARN rope with rotary_dim %d < head_dim %d is not supported (its attention factor "
              "is folded into the attention scale, which would scale the passed-through dims)",
              rotary_dim, head_dim));
        }
        return absl::OkStatus();
      case RopeConfig::LONGROPE: {
        if (rope.ext_factors_size() != rotary_dim / 2) {
          return Error(
              absl::StrFormat("LONGROPE rope needs rotary_dim / 2 = %d ext_factors, got %d",
                              rotary_dim / 2, rope.ext_factors_size()));
        }
        for (double factor : rope.ext_factors()) {
          if (!(factor > 0.0) || std::isinf(factor)) {
            return Error(absl::StrFormat("LONGROPE ext_factors must be positive and finite, got %g",
                                         factor));
          }
        }
        if (!(rope.attention_factor() > 0.0) || std::isinf(rope.attention_factor())) {
          return Error(
              absl::StrFormat("LONGROPE attention_factor must be positive and finite, got %g",
                              rope.attention_factor()));
        }
        return absl::OkStatus();
      }
      case RopeConfig::DYNAMIC:
        if (!(rope.factor() > 0.0)) {
          return Error(
              absl::StrFormat("DYNAMIC rope factor must be positive, got %g", rope.factor()));
        }
        return absl::OkStatus();
      default:
        return Error(absl::StrFormat("unknown rope scaling %d", rope.scaling()));
    }
  }

  absl::Status CheckAttention() {
    if (auto status = CheckCounts(3, 3, 1, 1, 0, 1); !status.ok()) return status;
    const plan::Value* values[4];
    const char* roles[4] = {"q", "k", "v", "output"};
    const int32_t ids[4] = {op_->inputs(0), op_->inputs(1), op_->inputs(2), op_->outputs(0)};
    for (int i = 0; i < 4; ++i) {
      auto value = Activation(ids[i], roles[i]);
      if (!value.ok()) return value.status();
      values[i] = *value;
    }
    const AttentionAttrs& attention = op_->attention();
    const int64_t heads = attention.num_heads();
    const int64_t kv_heads = attention.num_kv_heads();
    const int64_t head_dim = attention.head_dim();
    if (heads <= 0 || kv_heads <= 0 || head_dim <= 0 || heads % kv_heads != 0) {
      return Error(absl::StrFormat(
          "num_heads %d must be a positive multiple of num_kv_heads %d, head_dim %d positive",
          heads, kv_heads, head_dim));
    }
    if (values[0]->width() != heads * head_dim || values[3]->width() != heads * head_dim ||
        values[1]->width() != kv_heads * head_dim || values[2]->width() != kv_heads * head_dim) {
      return Error(absl::StrFormat(
          "widths q %d, k %d, v %d, output %d do not match heads %d, kv heads %d, head_dim %d",
          values[0]->width(), values[1]->width(), values[2]->width(), values[3]->width(), heads,
          kv_heads, head_dim));
    }
    if (op_->weights_size() == 1) {
      // The sinks: one logit per query head.
      if (auto status = CheckVector(op_->weights(0), heads); !status.ok()) return status;
    }
    if (attention.layer() < 0 || attention.layer() >= kMaxLayers) {
      return Error(absl::StrFormat("layer %d outside [0, %d)", attention.layer(), kMaxLayers));
    }
    if (attention.sliding_window() < 0 || attention.sliding_window() > kMaxSlidingWindow) {
      return Error(
          absl::StrFormat("sliding_window %d outside [0, 2^30]", attention.sliding_window()));
    }
    if (!(attention.scale() >= 0.0) || std::isinf(attention.scale())) {
      return Error(absl::StrFormat("scale must be finite and >= 0, got %g", attention.scale()));
    }
    if (!(attention.logit_softcap() >= 0.0) || std::isinf(attention.logit_softcap())) {
      return Error(absl::StrFormat("logit_softcap must be finite and >= 0 (0: none), got %g",
                                   attention.logit_softcap()));
    }
    if (facts_.kv_heads == 0) {
      facts_.kv_heads = static_cast<int32_t>(kv_heads);
      facts_.kv_head_dim = static_cast<int32_t>(head_dim);
    } else if (facts_.kv_heads != kv_heads || facts_.kv_head_dim != head_dim) {
      return Error(absl::StrFormat(
          "kv heads %d x head_dim %d differ from an earlier ATTENTION's %d x %d; the KV cache "
          "has one shape for all layers",
          kv_heads, head_dim, facts_.kv_heads, facts_.kv_head_dim));
    }
    facts_.kv_layers = std::max(facts_.kv_layers, attention.layer() + 1);
    return absl::OkStatus();
  }

  absl::Status Finish() {
    int logits_ops = 0;
    for (const Op& op : program().ops()) logits_ops += op.kind() == LOGITS;
    if (logits_ops != 1 && scope_ == ProgramScope::kModel) {
      return absl::InvalidArgumentError(
          absl::StrFormat("program: expected exactly one LOGITS op, found %d", logits_ops));
    }
    const KvCacheSpec& spec = meta_.kv_cache();
    if (facts_.kv_layers > 0 && spec.num_layers() != 0 &&
        (spec.num_layers() < facts_.kv_layers || spec.num_kv_heads() != facts_.kv_heads ||
         spec.head_dim() != facts_.kv_head_dim)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "kv_cache: spec says %d layers x %d kv heads x head_dim %d, the program's ATTENTION ops "
          "need %d layers x %d x %d",
          spec.num_layers(), spec.num_kv_heads(), spec.head_dim(), facts_.kv_layers,
          facts_.kv_heads, facts_.kv_head_dim));
    }
    return absl::OkStatus();
  }

  absl::Status CheckCounts(int min_inputs, int max_inputs, int min_outputs, int max_outputs,
                           int min_weights = 1, int max_weights = 1) const {
    auto in_range = [](int count, int low, int high) { return count >= low && count <= high; };
    if (!in_range(op_->inputs_size(), min_inputs, max_inputs) ||
        !in_range(op_->outputs_size(), min_outputs, max_outputs) ||
        !in_range(op_->weights_size(), min_weights, max_weights)) {
      return Error(absl::StrFormat(
          "expected %d..%d inputs, %d..%d outputs, %d..%d weights; got %d, %d, %d", min_inputs,
          max_inputs, min_outputs, max_outputs, min_weights, max_weights, op_->inputs_size(),
          op_->outputs_size(), op_->weights_size()));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<const plan::Value*> ValueAt(int32_t id, const std::string& role) const {
    if (id < 0 || id >= program().values_size()) {
      return Error(
          absl::StrFormat("%s is value %d, outside [0, %d)", role, id, program().values_size()));
    }
    return &program().values(id);
  }

  absl::StatusOr<const plan::Value*> Activation(int32_t id, const std::string& role) const {
    auto value = ValueAt(id, role);
    if (!value.ok()) return value.status();
    if ((*value)->kind() != Value::ACTIVATION) {
      return Error(absl::StrFormat("%s (value %d, %s) must be an ACTIVATION, it has kind %d", role,
                                   id, (*value)->name(), (*value)->kind()));
    }
    return value;
  }

  absl::Status CheckInputKind(int input, Value::Kind kind) const {
    auto value = ValueAt(op_->inputs(input), absl::StrFormat("input %d", input));
    if (!value.ok()) return value.status();
    if ((*value)->kind() != kind) {
      return Error(absl::StrFormat("input %d (value %d) has kind %d, expected %d", input,
                                   op_->inputs(input), (*value)->kind(), kind));
    }
    return absl::OkStatus();
  }

  // Inputs [0, num_inputs) and outputs [0, num_outputs) are activations of one width, returned.
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

  // Whether two activations' per-token byte ranges intersect (then their buffers do too).
  bool Overlap(int32_t first, int32_t second) const {
    const plan::Value& a = program().values(first);
    const plan::Value& b = program().values(second);
    const int64_t a_end =
        a.arena_offset_per_token() + a.width() * static_cast<int64_t>(sizeof(float));
    const int64_t b_end =
        b.arena_offset_per_token() + b.width() * static_cast<int64_t>(sizeof(float));
    return a.arena_offset_per_token() < b_end && b.arena_offset_per_token() < a_end;
  }

  absl::StatusOr<const plan::Tensor*> TensorAt(int32_t index) const {
    if (index < 0 || index >= meta_.tensors_size()) {
      return Error(absl::StrFormat("weight tensor %d outside the tensor table [0, %d)", index,
                                   meta_.tensors_size()));
    }
    return &meta_.tensors(index);
  }

  // With blobs: size_bytes matches and the blob exists.
  absl::Status CheckBlob(int32_t index, const plan::Tensor& tensor, int64_t bytes,
                         const char* needs = "its shape and dtype need") const {
    if (!blobs_) return absl::OkStatus();
    if (tensor.size_bytes() != static_cast<uint64_t>(bytes)) {
      return Error(absl::StrFormat("tensor %s: %d bytes, %s %d", tensor.name(), tensor.size_bytes(),
                                   needs, bytes));
    }
    if (blobs_(index) == nullptr) {
      return Error(absl::StrFormat("tensor %s: no data", tensor.name()));
    }
    return absl::OkStatus();
  }

  absl::Status CheckVector(int32_t index, int64_t size) const {
    auto tensor = TensorAt(index);
    if (!tensor.ok()) return tensor.status();
    const plan::Tensor& t = **tensor;
    if (t.shape_size() != 1 || t.shape(0) != size || t.dtype() != F32) {
      return Error(absl::StrFormat("tensor %s is %s [%s], expected F32 [%d]", t.name(),
                                   DType_Name(t.dtype()), absl::StrJoin(t.shape(), ", "), size));
    }
    return CheckBlob(index, t, size * static_cast<int64_t>(sizeof(float)));
  }

  // A [rows, cols] matrix (rows < 0: any count), or an expert stack [experts, rows, cols], of
  // float or quantized codes; returns its rows (per expert).
  absl::StatusOr<int64_t> CheckMatrix(int32_t index, const MatrixDims& dims) const {
    auto tensor = TensorAt(index);
    if (!tensor.ok()) return tensor.status();
    const plan::Tensor& t = **tensor;
    const int64_t cols = dims.cols;
    if (dims.experts > 0) {
      if (t.shape_size() != 3 || t.shape(0) != dims.experts || t.shape(1) != dims.rows ||
          t.shape(2) != cols || dims.rows <= 0) {
        return Error(absl::StrFormat("tensor %s has shape [%s], expected [%d, %d, %d]", t.name(),
                                     absl::StrJoin(t.shape(), ", "), dims.experts, dims.rows,
                                     cols));
      }
    } else if (t.shape_size() != 2 || t.shape(0) <= 0 ||
               (dims.rows >= 0 && t.shape(0) != dims.rows) || t.shape(1) != cols) {
      return Error(absl::StrFormat(
          "tensor %s has shape [%s], expected [%s, %d]", t.name(), absl::StrJoin(t.shape(), ", "),
          dims.rows >= 0 ? absl::StrCat(dims.rows) : std::string("rows"), cols));
    }
    const int64_t rows = t.shape(t.shape_size() - 2);
    const int64_t total_rows = dims.experts > 0 ? dims.experts * rows : rows;
    if (IsQuantized(t.dtype())) {
      if (auto status = CheckQuantized(index, t, dims, total_rows); !status.ok()) return status;
      return rows;
    }
    if (!IsFloat(t.dtype())) {
      return Error(
          absl::StrFormat("tensor %s has dtype %s; a matrix is F32, F16, BF16, I8, I4 or FP4_E2M1",
                          t.name(), DType_Name(t.dtype())));
    }
    if (t.layout() == plan::Tensor::ROW_PANELS) {
      // An expert's rows are whole panels, so a panel never straddles two experts.
      if (t.panel_rows() <= 0 || rows % t.panel_rows() != 0) {
        return Error(absl::StrFormat("tensor %s: panel_rows %d does not divide its %d rows%s",
                                     t.name(), t.panel_rows(), rows,
                                     dims.experts > 0 ? " per expert" : ""));
      }
    } else if (t.layout() != plan::Tensor::ROW_MAJOR) {
      return Error(absl::StrFormat("tensor %s: a %s matrix is ROW_MAJOR or ROW_PANELS, found %s",
                                   t.name(), DType_Name(t.dtype()),
                                   plan::Tensor::Layout_Name(t.layout())));
    }
    const int64_t bytes = total_rows * cols * static_cast<int64_t>(DTypeSize(t.dtype()));
    if (auto status = CheckBlob(index, t, bytes, "its shape, dtype and layout need");
        !status.ok()) {
      return status;
    }
    return rows;
  }

  // A quantized matrix (plan.proto, Quantization) whose shape CheckMatrix checked: its fields,
  // its companion tensors and, with blobs, their contents.
  absl::Status CheckQuantized(int32_t index, const plan::Tensor& t, const MatrixDims& dims,
                              int64_t rows) const {
    const int64_t cols = dims.cols;
    const Quantization& q = t.quantization();
    const bool fp4 = t.dtype() == FP4_E2M1;
    if (fp4 && (op_->kind() == EMBED || op_->kind() == LOGITS)) {
      return Error(absl::StrFormat(
          "tensor %s is FP4_E2M1; MXFP4 is for MATMUL and EXPERT_MATMUL weights, not %s", t.name(),
          OpKind_Name(op_->kind())));
    }
    const int expected_bits = IsPacked4(t.dtype()) ? 4 : 8;
    if (q.bits() != expected_bits) {
      return Error(absl::StrFormat("tensor %s: quantization.bits is %d, its dtype %s needs %d",
                                   t.name(), q.bits(), DType_Name(t.dtype()), expected_bits));
    }
    const bool asymmetric = q.scheme() == Quantization::ASYMMETRIC;
    if (q.scheme() != Quantization::SYMMETRIC && !(asymmetric && t.dtype() == I4)) {
      return Error(absl::StrFormat(
          "tensor %s: quantization.scheme %s is not SYMMETRIC (or ASYMMETRIC for I4)", t.name(),
          Quantization::Scheme_Name(q.scheme())));
    }
    // plan.proto: groups of a multiple of 32 columns dividing the row, or one per row (I4: a
    // multiple of 32 columns); MXFP4 blocks are exactly 32 columns.
    const int32_t group = q.group_size();
    if (fp4 && (group != kMxfp4Block || cols % kMxfp4Block != 0)) {
      return Error(absl::StrFormat(
          "tensor %s: FP4_E2M1 needs quantization.group_size 32 and a multiple of 32 columns, "
          "got group_size %d with %d columns",
          t.name(), group, cols));
    }
    const bool whole_row = group == cols && (expected_bits == 8 || cols % 32 == 0);
    if (group <= 0 || !(whole_row || (group % 32 == 0 && cols % group == 0))) {
      return Error(absl::StrFormat(
          "tensor %s: quantization.group_size %d with %d columns; expected a multiple of 32 "
          "dividing the row, or one group per row",
          t.name(), group, cols));
    }
    const plan::Tensor::Layout layout =
        IsPacked4(t.dtype()) ? plan::Tensor::LANE_CHUNKS : plan::Tensor::ROW_MAJOR;
    if (t.layout() != layout) {
      return Error(absl::StrFormat("tensor %s is %s in layout %s, expected %s", t.name(),
                                   DType_Name(t.dtype()), plan::Tensor::Layout_Name(t.layout()),
                                   plan::Tensor::Layout_Name(layout)));
    }
    if (auto status = CheckBlob(index, t, IsPacked4(t.dtype()) ? rows * cols / 2 : rows * cols);
        !status.ok()) {
      return status;
    }
    const int64_t groups = cols / group;
    const std::vector<int64_t> per_row = dims.PerRow(rows, groups);
    auto scales = Companion(t, "scales", q.has_scales(), q.scales(), fp4 ? E8M0 : F16, per_row);
    if (!scales.ok()) return scales.status();
    if (fp4) {
      for (int64_t i = 0; *scales != nullptr && i < rows * groups; ++i) {
        if ((*scales)[i] == kE8M0Nan) {
          return Error(absl::StrFormat(
              "tensor %s: quantization.scales (tensor %d) holds the E8M0 NaN byte 255 at [%d, "
              "%d] (row, group)",
              t.name(), q.scales(), i / groups, i % groups));
        }
      }
    }
    if (asymmetric) {
      auto zeros = Companion(t, "zero_points", q.has_zero_points(), q.zero_points(), U8, per_row);
      if (!zeros.ok()) return zeros.status();
      // Codes and zero points are 4-bit values; a larger zero point would wrap in int8
      // arithmetic.
      for (int64_t i = 0; *zeros != nullptr && i < rows * groups; ++i) {
        if ((*zeros)[i] > 15) {
          return Error(absl::StrFormat(
              "tensor %s: quantization.zero_points (tensor %d) holds %d at [%d, %d], expected "
              "0..15",
              t.name(), q.zero_points(), (*zeros)[i], i / groups, i % groups));
        }
      }
    } else if (q.has_zero_points()) {
      return Error(absl::StrFormat("tensor %s: SYMMETRIC quantization with zero_points", t.name()));
    }
    if (q.has_input_permutation()) {
      if (op_->kind() == EMBED || op_->kind() == EXPERT_MATMUL || fp4) {
        return Error(absl::StrFormat(
            "tensor %s: quantization.input_permutation is set; %s", t.name(),
            op_->kind() == EMBED ? "an embedding table has no input columns to permute"
                                 : "expert and FP4_E2M1 matrices keep their column order"));
      }
      auto permutation =
          Companion(t, "input_permutation", true, q.input_permutation(), I32, {cols});
      if (!permutation.ok()) return permutation.status();
      if (*permutation != nullptr) {
        std::vector<bool> seen(cols, false);
        for (int64_t c = 0; c < cols; ++c) {
          int32_t source;
          std::memcpy(&source, *permutation + c * sizeof(int32_t), sizeof(source));
          if (source < 0 || source >= cols || seen[source]) {
            return Error(absl::StrFormat(
                "tensor %s: quantization.input_permutation (tensor %d) is not a permutation of "
                "[0, %d): entry %d is %d",
                t.name(), q.input_permutation(), cols, c, source));
          }
          seen[source] = true;
        }
      }
    }
    return absl::OkStatus();
  }

  // The bytes (nullptr without blobs) of a quantized matrix's companion tensor `field`
  // (quantization.<field> = index), checked to be `dtype` of shape `dims`, ROW_MAJOR.
  absl::StatusOr<const uint8_t*> Companion(const plan::Tensor& matrix, const char* field,
                                           bool present, int32_t index, DType dtype,
                                           const std::vector<int64_t>& dims) const {
    const std::string expected =
        absl::StrFormat("[%s] %s", absl::StrJoin(dims, ", "), DTypeName(dtype));
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
    const bool shape_ok = std::equal(t.shape().begin(), t.shape().end(), dims.begin(), dims.end());
    if (!shape_ok || t.dtype() != dtype || t.layout() != plan::Tensor::ROW_MAJOR) {
      return Error(absl::StrFormat(
          "tensor %s: quantization.%s is tensor %d (%s) with shape [%s] %s, expected %s",
          matrix.name(), field, index, t.name(), absl::StrJoin(t.shape(), ", "),
          DTypeName(t.dtype()), expected));
    }
    int64_t elements = 1;
    for (const int64_t dim : dims) elements *= dim;
    if (auto status = CheckBlob(index, t, elements * static_cast<int64_t>(DTypeSize(dtype)));
        !status.ok()) {
      return status;
    }
    return blobs_ ? blobs_(index) : nullptr;
  }

  const PlanMeta& meta_;
  const BlobLookup& blobs_;
  const ProgramScope scope_;
  const Op* op_ = nullptr;
  int op_index_ = 0;
  ProgramFacts facts_;
  // ROUTER op outputs 0 (the ids) seen so far -> their num_experts.
  absl::flat_hash_map<int32_t, int32_t> router_experts_;
};

}  // namespace

absl::StatusOr<ProgramFacts> CheckProgram(const PlanMeta& meta, const BlobLookup& blobs,
                                          ProgramScope scope) {
  return Checker(meta, blobs, scope).Run();
}

}  // namespace llmrt::plan
