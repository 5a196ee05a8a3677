#include "runtime/backend/testing/reference_program.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/backend/testing/tiny_llama.h"
#include "runtime/plan/dtype.h"
#include "runtime/plan/int4_layout.h"
#include "runtime/plan/mxfp4.h"
#include "runtime/plan/plan_reader.h"
#include "runtime/plan/program_check.h"

namespace llmrt::testing {
namespace {

using Matrix = std::vector<std::vector<double>>;  // [tokens][width]

// A matrix's columns (its last dim) and rows (the product of the others: an expert stack [E,
// N, K] is the [E N, K] matrix, plan.proto).
int64_t Cols(const plan::Tensor& tensor) { return tensor.shape(tensor.shape_size() - 1); }
int64_t Rows(const plan::Tensor& tensor) {
  int64_t rows = 1;
  for (int i = 0; i + 1 < tensor.shape_size(); ++i) rows *= tensor.shape(i);
  return rows;
}

// Element (r, c) of a stored float matrix: plan.proto's ROW_PANELS formula or row-major.
int64_t StoredIndex(const plan::Tensor& tensor, int64_t r, int64_t c) {
  const int64_t cols = Cols(tensor);
  if (tensor.layout() != plan::Tensor::ROW_PANELS) return r * cols + c;
  const int64_t panel = tensor.panel_rows();
  return (r / panel) * panel * cols + c * panel + r % panel;
}

std::vector<float> Dequantized(const BlobLookup& blobs, const plan::Tensor& tensor,
                               const uint8_t* codes) {
  const plan::Quantization& q = tensor.quantization();
  const int64_t rows = Rows(tensor), cols = Cols(tensor), group = q.group_size();
  const uint8_t* scale_bytes = blobs(q.scales());
  if (tensor.dtype() == plan::FP4_E2M1) {
    // plan.proto: w = e2m1(code) * 2^(scale - 127), codes at I4's nibble positions.
    std::vector<float> values(rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const int code = plan::Int4CodeAt(codes + r * cols / 2, cols, c);
        const double scale = std::ldexp(1.0, scale_bytes[r * (cols / group) + c / group] - 127);
        values[r * cols + c] = static_cast<float>(plan::kE2M1Values[code] * scale);
      }
    }
    return values;
  }
  std::vector<uint16_t> scales(rows * (cols / group));
  std::memcpy(scales.data(), scale_bytes, scales.size() * sizeof(uint16_t));
  const uint8_t* zeros = q.has_zero_points() ? blobs(q.zero_points()) : nullptr;
  std::vector<int32_t> permutation;
  if (q.has_input_permutation()) {
    permutation.resize(cols);
    std::memcpy(permutation.data(), blobs(q.input_permutation()), cols * sizeof(int32_t));
  }
  std::vector<float> values(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t g = r * (cols / group) + c / group;
      const int code =
          tensor.dtype() == plan::I8
              ? static_cast<int8_t>(codes[r * cols + c])
              : plan::Int4CodeAt(codes + r * cols / 2, cols, c) - (zeros ? zeros[g] : 8);
      // Stored column c multiplies input column permutation[c].
      const int64_t column = permutation.empty() ? c : permutation[c];
      values[r * cols + column] =
          static_cast<float>(code * static_cast<double>(plan::F16ToF32(scales[g])));
    }
  }
  return values;
}

}  // namespace

std::vector<float> ReferenceTensor(const plan::PlanMeta& meta, const BlobLookup& blobs,
                                   int32_t index) {
  const plan::Tensor& tensor = meta.tensors(index);
  const uint8_t* bytes = blobs(index);
  if (tensor.dtype() == plan::I8 || tensor.dtype() == plan::I4 ||
      tensor.dtype() == plan::FP4_E2M1) {
    return Dequantized(blobs, tensor, bytes);
  }
  int64_t elements = 1;
  for (int64_t dim : tensor.shape()) elements *= dim;
  const std::vector<float> stored =
      DecodeFrom(tensor.dtype(),
                 std::vector<uint8_t>(bytes, bytes + elements * plan::DTypeSize(tensor.dtype())));
  if (tensor.shape_size() < 2) return stored;
  std::vector<float> values(elements);
  for (int64_t r = 0; r < Rows(tensor); ++r) {
    for (int64_t c = 0; c < Cols(tensor); ++c) {
      values[r * Cols(tensor) + c] = stored[StoredIndex(tensor, r, c)];
    }
  }
  return values;
}

std::vector<double> ReferenceProgram(const plan::PlanMeta& meta, const BlobLookup& blobs,
                                     const std::vector<int32_t>& tokens,
                                     const std::vector<int32_t>& positions) {
  const plan::Program& program = meta.program();
  const int64_t num_tokens = static_cast<int64_t>(tokens.size());
  std::vector<Matrix> values(program.values_size());
  std::vector<double> logits;
  auto weight = [&](int32_t index) { return ReferenceTensor(meta, blobs, index); };
  auto rows = [&](int64_t width) { return Matrix(num_tokens, std::vector<double>(width, 0.0)); };
  // Each group of gamma.size() elements of a row is normalized on its own.
  auto rms_norm = [&](const Matrix& x, const std::vector<float>& gamma, double eps) {
    Matrix y = x;
    const size_t group = gamma.size();
    for (auto& row : y) {
      for (size_t start = 0; start + group <= row.size(); start += group) {
        double squares = 0;
        for (size_t i = 0; i < group; ++i) squares += row[start + i] * row[start + i];
        const double inverse = 1.0 / std::sqrt(squares / group + eps);
        for (size_t i = 0; i < group; ++i) row[start + i] = row[start + i] * inverse * gamma[i];
      }
    }
    return y;
  };
  auto silu = [](double x) { return x / (1.0 + std::exp(-x)); };
  auto gelu_tanh = [](double x) {
    return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  };
  for (const plan::Op& op : program.ops()) {
    switch (op.kind()) {
      case plan::EMBED: {
        const std::vector<float> table = weight(op.weights(0));
        const int64_t width = program.values(op.outputs(0)).width();
        const plan::DType dtype = meta.tensors(op.weights(0)).dtype();
        // plan.proto EmbedAttrs: F16 / BF16 tables round the scale and each product to their
        // dtype; others multiply by the f32 scale.
        auto round = [dtype](double value) -> double {
          const float f = static_cast<float>(value);
          if (dtype == plan::F16) return plan::F16ToF32(plan::F32ToF16(f));
          if (dtype == plan::BF16) return plan::Bf16ToF32(plan::F32ToBf16(f));
          return f;
        };
        const bool scaled = op.has_embed();
        const double scale = scaled ? round(op.embed().scale()) : 1.0;
        Matrix out = rows(width);
        for (int64_t t = 0; t < num_tokens; ++t) {
          for (int64_t i = 0; i < width; ++i) {
            // The product in f32, then rounded: what a multiply of two 16-bit tensors does.
            const float value = table[tokens[t] * width + i];
            out[t][i] = scaled ? round(value * static_cast<float>(scale)) : value;
          }
        }
        values[op.outputs(0)] = out;
        break;
      }
      case plan::RMS_NORM:
        values[op.outputs(0)] =
            rms_norm(values[op.inputs(0)], weight(op.weights(0)), op.norm().eps());
        break;
      case plan::FUSED_ADD_RMS_NORM:
      case plan::ADD: {
        Matrix sum = values[op.inputs(0)];
        for (int64_t t = 0; t < num_tokens; ++t) {
          for (size_t i = 0; i < sum[t].size(); ++i) sum[t][i] += values[op.inputs(1)][t][i];
        }
        if (op.kind() == plan::FUSED_ADD_RMS_NORM) {
          values[op.outputs(1)] = rms_norm(sum, weight(op.weights(0)), op.norm().eps());
        }
        values[op.outputs(0)] = sum;
        break;
      }
      case plan::MATMUL:
      case plan::LOGITS: {
        const plan::Tensor& tensor = meta.tensors(op.weights(0));
        const std::vector<float> w = weight(op.weights(0));
        const std::vector<float> bias =
            op.weights_size() > 1 ? weight(op.weights(1)) : std::vector<float>();
        const int64_t out_rows = tensor.shape(0);
        const int64_t cols = tensor.shape(1);
        const Matrix& x = values[op.inputs(0)];
        Matrix full = Matrix(num_tokens, std::vector<double>(out_rows, 0.0));
        for (int64_t t = 0; t < num_tokens; ++t) {
          for (int64_t n = 0; n < out_rows; ++n) {
            double sum = bias.empty() ? 0.0 : bias[n];
            for (int64_t k = 0; k < cols; ++k) sum += x[t][k] * w[n * cols + k];
            full[t][n] = sum;
          }
        }
        if (op.kind() == plan::LOGITS) {
          const double cap = op.has_logits() ? op.logits().softcap() : 0.0;
          for (auto& row : full) {
            if (cap > 0) {
              for (double& logit : row) logit = cap * std::tanh(logit / cap);
            }
            logits.insert(logits.end(), row.begin(), row.end());
          }
          break;
        }
        int64_t begin = 0;
        for (int32_t id : op.outputs()) {
          const int64_t width = program.values(id).width();
          Matrix part = rows(width);
          for (int64_t t = 0; t < num_tokens; ++t) {
            std::copy(full[t].begin() + begin, full[t].begin() + begin + width, part[t].begin());
          }
          values[id] = part;
          begin += width;
        }
        break;
      }
      case plan::ROPE: {
        const plan::RopeAttrs& rope = op.rope();
        const std::vector<double> inv_freq =
            ReferenceInverseFrequencies(rope.config(), rope.head_dim());
        Matrix x = values[op.inputs(0)];
        // Rotate-half over the first rotary_dim dims of each head; the rest pass through.
        const int32_t half = plan::RotaryDim(rope.config(), rope.head_dim()) / 2;
        const double scale = plan::RopeCosSinScale(rope.config());
        for (int64_t t = 0; t < num_tokens; ++t) {
          for (int32_t head = 0; head < rope.num_heads(); ++head) {
            double* h = x[t].data() + head * rope.head_dim();
            for (int32_t i = 0; i < half; ++i) {
              const double angle = static_cast<double>(positions[t]) * inv_freq[i];
              const double cosine = scale * std::cos(angle), sine = scale * std::sin(angle);
              const double first = h[i], second = h[i + half];
              h[i] = first * cosine - second * sine;
              h[i + half] = second * cosine + first * sine;
            }
          }
        }
        values[op.outputs(0)] = x;
        break;
      }
      case plan::ATTENTION: {
        const plan::AttentionAttrs& attention = op.attention();
        const Matrix& q = values[op.inputs(0)];
        const Matrix& k = values[op.inputs(1)];
        const Matrix& v = values[op.inputs(2)];
        const int32_t head_dim = attention.head_dim();
        const int32_t group = attention.num_heads() / attention.num_kv_heads();
        const double scale = plan::SoftmaxScale(attention);
        // gpt-oss's sinks: one more logit per head in the softmax, with no value.
        const std::vector<float> sinks =
            op.weights_size() > 0 ? weight(op.weights(0)) : std::vector<float>();
        Matrix out = rows(int64_t{attention.num_heads()} * head_dim);
        for (int64_t i = 0; i < num_tokens; ++i) {
          for (int32_t head = 0; head < attention.num_heads(); ++head) {
            const int32_t kv_head = head / group;
            std::vector<double> scores;
            std::vector<int64_t> keys;
            for (int64_t j = 0; j <= i; ++j) {
              if (attention.sliding_window() > 0 && i - j >= attention.sliding_window()) continue;
              double dot = 0;
              for (int32_t d = 0; d < head_dim; ++d) {
                dot += q[i][head * head_dim + d] * k[j][kv_head * head_dim + d];
              }
              const double cap = attention.logit_softcap();
              scores.push_back(cap > 0 ? cap * std::tanh(dot * scale / cap) : dot * scale);
              keys.push_back(j);
            }
            double max_score = *std::max_element(scores.begin(), scores.end());
            if (!sinks.empty()) max_score = std::max<double>(max_score, sinks[head]);
            double total = sinks.empty() ? 0.0 : std::exp(sinks[head] - max_score);
            for (double& score : scores) total += (score = std::exp(score - max_score));
            for (size_t s = 0; s < keys.size(); ++s) {
              for (int32_t d = 0; d < head_dim; ++d) {
                out[i][head * head_dim + d] +=
                    scores[s] / total * v[keys[s]][kv_head * head_dim + d];
              }
            }
          }
        }
        values[op.outputs(0)] = out;
        break;
      }
      case plan::SILU:
      case plan::MUL:
      case plan::SILU_MUL:
      case plan::GELU_TANH_MUL: {
        Matrix out = values[op.inputs(0)];
        for (int64_t t = 0; t < num_tokens; ++t) {
          for (size_t i = 0; i < out[t].size(); ++i) {
            if (op.kind() == plan::SILU) out[t][i] = silu(out[t][i]);
            if (op.kind() == plan::MUL) out[t][i] *= values[op.inputs(1)][t][i];
            if (op.kind() == plan::SILU_MUL)
              out[t][i] = silu(out[t][i]) * values[op.inputs(1)][t][i];
            if (op.kind() == plan::GELU_TANH_MUL)
              out[t][i] = gelu_tanh(out[t][i]) * values[op.inputs(1)][t][i];
          }
        }
        values[op.outputs(0)] = out;
        break;
      }
      case plan::ROUTER: {
        // plan.proto's ROUTER: the top_k largest logits (ties to the lower index) in
        // descending order, then SOFTMAX_TOPK's or TOPK_SOFTMAX's weights.
        const plan::RouterAttrs& router = op.router();
        const Matrix& logit_rows = values[op.inputs(0)];
        Matrix ids = rows(router.top_k()), weights = rows(router.top_k());
        for (int64_t t = 0; t < num_tokens; ++t) {
          const std::vector<double>& l = logit_rows[t];
          std::vector<int32_t> order(l.size());
          for (size_t e = 0; e < order.size(); ++e) order[e] = static_cast<int32_t>(e);
          std::stable_sort(order.begin(), order.end(),
                           [&](int32_t a, int32_t b) { return l[a] > l[b]; });
          const double top = l[order[0]];
          double all = 0, chosen = 0;
          for (double v : l) all += std::exp(v - top);
          for (int32_t j = 0; j < router.top_k(); ++j) chosen += std::exp(l[order[j]] - top);
          for (int32_t j = 0; j < router.top_k(); ++j) {
            ids[t][j] = order[j];
            const double p = std::exp(l[order[j]] - top);
            if (router.scoring() == plan::RouterAttrs::TOPK_SOFTMAX) {
              weights[t][j] = p / chosen;
            } else {
              weights[t][j] = router.normalize() ? p / chosen : p / all;
            }
          }
        }
        values[op.outputs(0)] = ids;
        values[op.outputs(1)] = weights;
        break;
      }
      case plan::EXPERT_MATMUL: {
        // Slot j of token t: x_slot(t, j) W_e^T (+ bias_e), e = ids[t, j]; x_slot is row t, or
        // its j-th K columns when x is [T, top_k K].
        const plan::Tensor& tensor = meta.tensors(op.weights(0));
        const int64_t n = tensor.shape(1), k = tensor.shape(2);
        const int32_t top_k = op.expert().top_k();
        const std::vector<float> w = weight(op.weights(0));
        const std::vector<float> bias =
            op.weights_size() > 1 ? weight(op.weights(1)) : std::vector<float>();
        const Matrix& x = values[op.inputs(0)];
        const Matrix& ids = values[op.inputs(1)];
        const bool sliced = static_cast<int64_t>(x[0].size()) == top_k * k && top_k > 1;
        std::vector<Matrix> outs;
        for (int32_t id : op.outputs()) outs.push_back(rows(program.values(id).width()));
        for (int64_t t = 0; t < num_tokens; ++t) {
          for (int32_t j = 0; j < top_k; ++j) {
            const int64_t e = static_cast<int64_t>(ids[t][j]);
            const double* row = x[t].data() + (sliced ? j * k : 0);
            int64_t begin = 0;
            for (size_t o = 0; o < outs.size(); ++o) {
              const int64_t width = program.values(op.outputs(o)).width() / top_k;
              for (int64_t c = 0; c < width; ++c) {
                const int64_t r = begin + c;
                double sum = bias.empty() ? 0.0 : bias[e * n + r];
                for (int64_t i = 0; i < k; ++i) sum += row[i] * w[(e * n + r) * k + i];
                outs[o][t][j * width + c] = sum;
              }
              begin += width;
            }
          }
        }
        for (size_t o = 0; o < outs.size(); ++o) values[op.outputs(o)] = outs[o];
        break;
      }
      case plan::MOE_COMBINE: {
        // out[t] = sum_j weights[t, j] y[t, jH..(j+1)H) (+ sigmoid(shared_gate[t]) shared[t]).
        const Matrix& y = values[op.inputs(0)];
        const Matrix& weights = values[op.inputs(1)];
        const int64_t hidden = program.values(op.outputs(0)).width();
        Matrix out = rows(hidden);
        for (int64_t t = 0; t < num_tokens; ++t) {
          for (size_t j = 0; j < weights[t].size(); ++j) {
            for (int64_t i = 0; i < hidden; ++i) out[t][i] += weights[t][j] * y[t][j * hidden + i];
          }
          if (op.inputs_size() == 4) {
            const double gate = 1.0 / (1.0 + std::exp(-values[op.inputs(3)][t][0]));
            for (int64_t i = 0; i < hidden; ++i) out[t][i] += gate * values[op.inputs(2)][t][i];
          }
        }
        values[op.outputs(0)] = out;
        break;
      }
      case plan::CLAMPED_SWIGLU: {
        // (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha g), g = min(gate, limit).
        const double alpha = op.swiglu().alpha(), limit = op.swiglu().limit();
        Matrix out = values[op.inputs(0)];
        for (int64_t t = 0; t < num_tokens; ++t) {
          for (size_t i = 0; i < out[t].size(); ++i) {
            const double g = std::min(out[t][i], limit);
            const double up = std::clamp(values[op.inputs(1)][t][i], -limit, limit);
            out[t][i] = (up + 1.0) * g / (1.0 + std::exp(-alpha * g));
          }
        }
        values[op.outputs(0)] = out;
        break;
      }
      default:
        break;
    }
  }
  return logits;
}

}  // namespace llmrt::testing
