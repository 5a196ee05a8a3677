#include "runtime/backend/testing/op_program.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "runtime/backend/testing/tiny_llama.h"
#include "runtime/plan/int4_layout.h"
#include "runtime/plan/mxfp4.h"
#include "runtime/plan/plan_reader.h"

namespace llmrt::testing {

OpProgram::OpProgram(int32_t num_tokens, uint64_t seed) : num_tokens_(num_tokens), random_(seed) {
  token_ids_ = AddValue(plan::Value::TOKEN_IDS, 1);
  positions_ = AddValue(plan::Value::POSITIONS, 1);
}

int32_t OpProgram::Input(int64_t width, float range) {
  const int32_t table = FloatTensor(plan::F32, {num_tokens_, width}, range);
  const int32_t value = Activation(width);
  AddOp(plan::EMBED, {token_ids_}, {value}, {table});
  return value;
}

int32_t OpProgram::InputRows(const std::vector<std::vector<float>>& rows) {
  num_tokens_ = static_cast<int32_t>(rows.size());
  std::vector<float> flat;
  for (const auto& row : rows) flat.insert(flat.end(), row.begin(), row.end());
  const int64_t width = static_cast<int64_t>(rows[0].size());
  const int32_t table = Tensor(plan::F32, {num_tokens_, width}, flat);
  const int32_t value = Activation(width);
  AddOp(plan::EMBED, {token_ids_}, {value}, {table});
  return value;
}

int32_t OpProgram::Activation(int64_t width) {
  plan::Value* value = meta_.mutable_program()->add_values();
  value->set_kind(plan::Value::ACTIVATION);
  value->set_dtype(plan::F32);
  value->set_width(width);
  value->set_arena_offset_per_token(arena_per_token_);
  arena_per_token_ += width * static_cast<int64_t>(sizeof(float));
  return meta_.program().values_size() - 1;
}

int32_t OpProgram::Tensor(plan::DType dtype, const std::vector<int64_t>& shape,
                          const std::vector<float>& values) {
  return AddTensor(dtype, shape, EncodeAs(dtype, values));
}

int32_t OpProgram::FloatTensor(plan::DType dtype, const std::vector<int64_t>& shape, float range,
                               float offset) {
  int64_t elements = 1;
  for (int64_t dim : shape) elements *= dim;
  std::uniform_real_distribution<float> uniform(offset - range, offset + range);
  std::vector<float> values(elements);
  for (float& v : values) v = uniform(random_);
  return Tensor(dtype, shape, values);
}

int32_t OpProgram::PanelMatrix(plan::DType dtype, int64_t rows, int64_t cols, int32_t panel_rows,
                               const std::vector<float>& values) {
  const int32_t index =
      values.empty() ? FloatTensor(dtype, {rows, cols}, 0.5f) : Tensor(dtype, {rows, cols}, values);
  blobs_[index] = PackPanels(blobs_[index], rows, cols, plan::DTypeSize(dtype), panel_rows);
  meta_.mutable_tensors(index)->set_layout(plan::Tensor::ROW_PANELS);
  meta_.mutable_tensors(index)->set_panel_rows(panel_rows);
  return index;
}

int32_t OpProgram::QuantizedMatrix(plan::DType dtype, int64_t rows, int64_t cols, int32_t group,
                                   bool asymmetric, bool permuted) {
  if (dtype == plan::FP4_E2M1) return Mxfp4Matrix(rows, cols);
  const int64_t groups = cols / group;
  std::uniform_int_distribution<int> code(dtype == plan::I8 ? -127 : 0,
                                          dtype == plan::I8 ? 127 : 15);
  std::vector<uint8_t> codes(dtype == plan::I8 ? rows * cols : rows * cols / 2);
  std::vector<uint8_t> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) row[c] = static_cast<uint8_t>(code(random_));
    if (dtype == plan::I8) {
      std::copy(row.begin(), row.end(), codes.begin() + r * cols);
    } else {
      plan::PackInt4Row(row.data(), cols, codes.data() + r * cols / 2);
    }
  }
  const int32_t matrix = AddTensor(dtype, {rows, cols}, codes);
  if (dtype == plan::I4) meta_.mutable_tensors(matrix)->set_layout(plan::Tensor::LANE_CHUNKS);
  // Scales of a typical trained matrix: |w| up to ~0.1.
  const float scale = dtype == plan::I8 ? 0.1f / 127 : 0.1f / 8;
  const int32_t scales = FloatTensor(plan::F16, {rows, groups}, scale * 0.5f, scale);
  plan::Quantization* q = meta_.mutable_tensors(matrix)->mutable_quantization();
  q->set_bits(dtype == plan::I8 ? 8 : 4);
  q->set_group_size(group);
  q->set_scheme(asymmetric ? plan::Quantization::ASYMMETRIC : plan::Quantization::SYMMETRIC);
  q->set_scales(scales);
  if (asymmetric) {
    std::uniform_int_distribution<int> zero(0, 15);
    std::vector<uint8_t> zeros(rows * groups);
    for (uint8_t& z : zeros) z = static_cast<uint8_t>(zero(random_));
    const int32_t index = AddTensor(plan::U8, {rows, groups}, zeros);
    meta_.mutable_tensors(matrix)->mutable_quantization()->set_zero_points(index);
  }
  if (permuted) {
    std::vector<int32_t> permutation(cols);
    for (int64_t c = 0; c < cols; ++c) permutation[c] = static_cast<int32_t>(c);
    std::shuffle(permutation.begin(), permutation.end(), random_);
    std::vector<uint8_t> bytes(cols * sizeof(int32_t));
    std::memcpy(bytes.data(), permutation.data(), bytes.size());
    const int32_t index = AddTensor(plan::I32, {cols}, bytes);
    meta_.mutable_tensors(matrix)->mutable_quantization()->set_input_permutation(index);
  }
  return matrix;
}

int32_t OpProgram::Mxfp4Matrix(int64_t rows, int64_t cols,
                               const std::vector<uint8_t>& scale_bytes) {
  const int64_t groups = cols / plan::kMxfp4Block;
  std::uniform_int_distribution<int> code(0, 15), exponent(118, 124);
  std::vector<uint8_t> codes(rows * cols / 2), row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) row[c] = static_cast<uint8_t>(code(random_));
    plan::PackInt4Row(row.data(), cols, codes.data() + r * cols / 2);
  }
  const int32_t matrix = AddTensor(plan::FP4_E2M1, {rows, cols}, codes);
  std::vector<uint8_t> scales(rows * groups);
  for (size_t i = 0; i < scales.size(); ++i) {
    scales[i] = scale_bytes.empty() ? static_cast<uint8_t>(exponent(random_))
                                    : scale_bytes[i % scale_bytes.size()];
  }
  const int32_t scale_index = AddTensor(plan::E8M0, {rows, groups}, scales);
  plan::Tensor* tensor = meta_.mutable_tensors(matrix);
  tensor->set_layout(plan::Tensor::LANE_CHUNKS);
  plan::Quantization* q = tensor->mutable_quantization();
  q->set_bits(4);
  q->set_group_size(static_cast<int32_t>(plan::kMxfp4Block));
  q->set_scheme(plan::Quantization::SYMMETRIC);
  q->set_scales(scale_index);
  return matrix;
}

int32_t OpProgram::ExpertMatrix(plan::DType dtype, int64_t experts, int64_t rows, int64_t cols,
                                int32_t group, bool asymmetric, int32_t panel_rows) {
  int32_t index;
  if (dtype == plan::FP4_E2M1) {
    index = Mxfp4Matrix(experts * rows, cols);
  } else if (dtype == plan::I8 || dtype == plan::I4) {
    index = QuantizedMatrix(dtype, experts * rows, cols, group, asymmetric, false);
  } else if (panel_rows > 0) {
    index = PanelMatrix(dtype, experts * rows, cols, panel_rows);
  } else {
    index = FloatTensor(dtype, {experts * rows, cols}, 0.5f);
  }
  SplitExperts(index, experts);
  return index;
}

void OpProgram::SplitExperts(int32_t index, int64_t experts) {
  auto split = [experts](plan::Tensor* tensor) {
    const int64_t rows = tensor->shape(0), cols = tensor->shape(1);
    tensor->clear_shape();
    for (int64_t dim : {experts, rows / experts, cols}) tensor->add_shape(dim);
  };
  plan::Tensor* tensor = meta_.mutable_tensors(index);
  split(tensor);
  const plan::Quantization& q = tensor->quantization();
  if (q.has_scales()) split(meta_.mutable_tensors(q.scales()));
  if (q.has_zero_points()) split(meta_.mutable_tensors(q.zero_points()));
}

int32_t OpProgram::ExpertIds(int64_t width) {
  const int32_t id = Activation(width);
  meta_.mutable_program()->mutable_values(id)->set_kind(plan::Value::EXPERT_IDS);
  meta_.mutable_program()->mutable_values(id)->set_dtype(plan::I32);
  return id;
}

std::pair<int32_t, int32_t> OpProgram::Router(int32_t logits, int32_t experts, int32_t top_k,
                                              plan::RouterAttrs::Scoring scoring, bool normalize) {
  const int32_t ids = ExpertIds(top_k), weights = Activation(top_k);
  plan::RouterAttrs* router = AddOp(plan::ROUTER, {logits}, {ids, weights}, {})->mutable_router();
  router->set_num_experts(experts);
  router->set_top_k(top_k);
  router->set_scoring(scoring);
  router->set_normalize(normalize);
  return {ids, weights};
}

int32_t OpProgram::RouterLogits(int32_t num_tokens, int32_t experts, double skew, int32_t hot) {
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<std::vector<float>> rows(num_tokens, std::vector<float>(experts));
  std::vector<int32_t> rank(experts);
  for (auto& row : rows) {
    for (int32_t e = 0; e < experts; ++e) rank[e] = e;
    std::shuffle(rank.begin(), rank.end(), random_);
    if (uniform(random_) < skew) {
      std::swap(rank[hot], *std::max_element(rank.begin(), rank.end()));
    }
    const float step = 8.0f / static_cast<float>(experts);
    for (int32_t e = 0; e < experts; ++e) {
      row[e] = (static_cast<float>(rank[e]) - 0.5f * static_cast<float>(experts)) * step;
    }
  }
  return InputRows(rows);
}

plan::Op* OpProgram::AddOp(plan::OpKind kind, const std::vector<int32_t>& inputs,
                           const std::vector<int32_t>& outputs,
                           const std::vector<int32_t>& weights) {
  plan::Op* op = meta_.mutable_program()->add_ops();
  op->set_kind(kind);
  for (int32_t id : inputs) op->add_inputs(id);
  for (int32_t id : outputs) op->add_outputs(id);
  for (int32_t id : weights) op->add_weights(id);
  return op;
}

void OpProgram::ReadOut(int32_t value) {
  const int64_t width = meta_.program().values(value).width();
  std::vector<float> identity(width * width, 0.0f);
  for (int64_t i = 0; i < width; ++i) identity[i * width + i] = 1.0f;
  const int32_t head = Tensor(plan::F32, {width, width}, identity);
  AddOp(plan::LOGITS, {value}, {Logits(width)}, {head});
}

int32_t OpProgram::Logits(int64_t width) { return AddValue(plan::Value::LOGITS, width); }

const plan::PlanMeta& OpProgram::meta() {
  meta_.mutable_program()->set_arena_bytes_per_token(arena_per_token_);
  return meta_;
}

BlobLookup OpProgram::Lookup() const {
  return [this](int index) -> const uint8_t* {
    return index >= 0 && index < static_cast<int>(blobs_.size()) ? blobs_[index].data() : nullptr;
  };
}

int32_t OpProgram::AddValue(plan::Value::Kind kind, int64_t width) {
  plan::Value* value = meta_.mutable_program()->add_values();
  value->set_kind(kind);
  value->set_width(width);
  return meta_.program().values_size() - 1;
}

int32_t OpProgram::AddTensor(plan::DType dtype, const std::vector<int64_t>& shape,
                             std::vector<uint8_t> bytes) {
  plan::Tensor* tensor = meta_.add_tensors();
  tensor->set_name("t" + std::to_string(meta_.tensors_size() - 1));
  tensor->set_dtype(dtype);
  for (int64_t dim : shape) tensor->add_shape(dim);
  tensor->set_size_bytes(bytes.size());
  blobs_.push_back(std::move(bytes));
  return meta_.tensors_size() - 1;
}

std::vector<uint8_t> PackPanels(const std::vector<uint8_t>& row_major, int64_t rows, int64_t cols,
                                size_t element_bytes, int32_t panel_rows) {
  EXPECT_EQ(rows % panel_rows, 0);
  std::vector<uint8_t> packed(rows * cols * element_bytes, 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t index = (r / panel_rows) * panel_rows * cols + c * panel_rows + r % panel_rows;
      std::memcpy(&packed[index * element_bytes], &row_major[(r * cols + c) * element_bytes],
                  element_bytes);
    }
  }
  return packed;
}

std::vector<float> RunSteps(Backend& backend, const std::vector<int32_t>& steps,
                            const std::vector<int32_t>& positions, int64_t width,
                            int32_t block_size) {
  int32_t num_tokens = 0;
  for (int32_t step : steps) num_tokens += step;
  const int32_t blocks = (num_tokens + block_size - 1) / block_size;
  const absl::Status allocated = backend.AllocateKvCache(blocks, block_size);
  EXPECT_TRUE(allocated.ok()) << allocated;
  std::vector<int32_t> block_table(blocks);
  for (int32_t b = 0; b < blocks; ++b) block_table[b] = blocks - 1 - b;  // not the identity
  std::vector<float> result(num_tokens * width);
  int32_t done = 0;
  for (int32_t step : steps) {
    StepBatch batch;
    for (int32_t t = done; t < done + step; ++t) {
      batch.token_ids.push_back(t);
      batch.positions.push_back(positions[t]);
      batch.slot_mapping.push_back(block_table[t / block_size] * block_size + t % block_size);
      batch.logit_rows.push_back(t - done);
    }
    batch.sequences.push_back({0, step, done + step, block_table.data(), blocks});
    const absl::Status status = backend.RunStep(batch, result.data() + done * width);
    EXPECT_TRUE(status.ok()) << status;
    done += step;
  }
  return result;
}

}  // namespace llmrt::testing
