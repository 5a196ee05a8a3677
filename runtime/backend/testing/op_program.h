// Test support: a small program under construction — inputs from EMBED tables, the ops under
// test, and a LOGITS op with an f32 identity matrix that reads a value back — with its blobs,
// and a runner that executes it on any backend as a prefill step and decode steps. The op
// conformance matrix (tests/conformance) and the CPU backend's tests build their programs
// with it.
//
// Not for production code; linked only by tests.
#ifndef LLMRT_BACKEND_TESTING_OP_PROGRAM_H_
#define LLMRT_BACKEND_TESTING_OP_PROGRAM_H_

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmrt::testing {

class OpProgram {
 public:
  // `num_tokens`: the rows of the random inputs (Input); InputRows sets it from its rows.
  explicit OpProgram(int32_t num_tokens = 0, uint64_t seed = 1);

  int32_t num_tokens() const { return num_tokens_; }
  int32_t token_ids() const { return token_ids_; }
  int32_t positions() const { return positions_; }

  // An activation holding random rows in [-range, range], one per token (an EMBED of an f32
  // table).
  int32_t Input(int64_t width, float range = 1.0f);
  // An activation holding `rows` (one per token; sets num_tokens).
  int32_t InputRows(const std::vector<std::vector<float>>& rows);
  int32_t Activation(int64_t width);

  // `values` stored as `dtype` (F32, F16, BF16).
  int32_t Tensor(plan::DType dtype, const std::vector<int64_t>& shape,
                 const std::vector<float>& values);
  // Random values in [offset - range, offset + range], stored as `dtype`.
  int32_t FloatTensor(plan::DType dtype, const std::vector<int64_t>& shape, float range,
                      float offset = 0.0f);
  // A float [rows, cols] matrix of `values` (random when empty) as ROW_PANELS of `panel_rows`,
  // by plan.proto's formula.
  int32_t PanelMatrix(plan::DType dtype, int64_t rows, int64_t cols, int32_t panel_rows,
                      const std::vector<float>& values = {});
  // A quantized [rows, cols] matrix with random codes, scales (and zero points, permutation),
  // laid out as plan.proto's Quantization comment says (FP4_E2M1: Mxfp4Matrix).
  int32_t QuantizedMatrix(plan::DType dtype, int64_t rows, int64_t cols, int32_t group,
                          bool asymmetric, bool permuted);
  // An MXFP4 [rows, cols] matrix: random FP4_E2M1 codes (LANE_CHUNKS) and E8M0 scales, the
  // scale of block i being scale_bytes[i % size] (empty: random bytes 118..124, |w| <~ 0.1).
  int32_t Mxfp4Matrix(int64_t rows, int64_t cols, const std::vector<uint8_t>& scale_bytes = {});
  // An expert stack [experts, rows, cols] (EXPERT_MATMUL's weight) of `dtype`: float (ROW_MAJOR,
  // or ROW_PANELS of panel_rows > 0), I8 / I4 with `group` (and zero points), or FP4_E2M1; the
  // companions 3-D alike.
  int32_t ExpertMatrix(plan::DType dtype, int64_t experts, int64_t rows, int64_t cols,
                       int32_t group = 0, bool asymmetric = false, int32_t panel_rows = 0);
  // An EXPERT_IDS value of `width` (in the arena like an activation).
  int32_t ExpertIds(int64_t width);
  // A ROUTER op over `logits` ([T, experts]); returns {ids, weights}.
  std::pair<int32_t, int32_t> Router(int32_t logits, int32_t experts, int32_t top_k,
                                     plan::RouterAttrs::Scoring scoring, bool normalize);
  // An activation of router logits, one row per token (sets num_tokens): every row a
  // permutation of values 8 / experts apart (so f32 and double agree on every choice), the
  // largest given to expert `hot` in a fraction `skew` of the rows (0: uniform routing).
  int32_t RouterLogits(int32_t num_tokens, int32_t experts, double skew = 0.0, int32_t hot = 0);

  plan::Op* AddOp(plan::OpKind kind, const std::vector<int32_t>& inputs,
                  const std::vector<int32_t>& outputs, const std::vector<int32_t>& weights);
  // Reads `value` back through a LOGITS op with an f32 identity matrix.
  void ReadOut(int32_t value);
  // A LOGITS value of `width` (for a program whose op under test is LOGITS itself).
  int32_t Logits(int64_t width);

  // The finished meta (arena size set).
  const plan::PlanMeta& meta();
  plan::KvCacheSpec* kv_cache() { return meta_.mutable_kv_cache(); }
  BlobLookup Lookup() const;

 private:
  int32_t AddValue(plan::Value::Kind kind, int64_t width);
  // Reshapes tensor `index` and its quantization companions to [experts, rows / experts, ...].
  void SplitExperts(int32_t index, int64_t experts);
  int32_t AddTensor(plan::DType dtype, const std::vector<int64_t>& shape,
                    std::vector<uint8_t> bytes);

  int32_t num_tokens_;
  std::mt19937_64 random_;
  plan::PlanMeta meta_;
  std::vector<std::vector<uint8_t>> blobs_;
  int64_t arena_per_token_ = 0;
  int32_t token_ids_ = 0;
  int32_t positions_ = 0;
};

// A row-major [rows, cols] blob of `element_bytes` elements re-laid as ROW_PANELS of
// `panel_rows` (rows a multiple of it), by plan.proto's formula: element (r, c) at
// (r / P) * P * cols + c * P + r % P — independently of codegen's packer.
std::vector<uint8_t> PackPanels(const std::vector<uint8_t>& row_major, int64_t rows, int64_t cols,
                                size_t element_bytes, int32_t panel_rows);

// Runs tokens 0..sum(steps)-1 of one sequence (token t reads row t of every input) on
// `backend`, `steps[i]` tokens per step, at rope `positions`, over a paged KV cache of
// `block_size` blocks laid out in reverse; returns the LOGITS rows of every token, [tokens,
// width]. Failures are reported as gtest failures.
std::vector<float> RunSteps(Backend& backend, const std::vector<int32_t>& steps,
                            const std::vector<int32_t>& positions, int64_t width,
                            int32_t block_size = 16);

}  // namespace llmrt::testing

#endif  // LLMRT_BACKEND_TESTING_OP_PROGRAM_H_
