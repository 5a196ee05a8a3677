// Backend: the narrow interface between the engine and whatever executes a plan's program.
//
// A backend is created from a plan's meta and a way to find each tensor's bytes (a mapped
// plan file, or weights a test built in memory). At creation it checks the whole program
// against what it supports and sizes its activation arena for `max_tokens_per_step`, so a
// step never allocates. The engine then allocates the KV cache once and runs steps.
//
// A step (DESIGN.md, "Execution model") runs the program once over a flattened batch of tokens
// from any number of sequences, without padding. StepBatch describes it; the engine's step
// builder fills one and reuses its vectors, so building a step does not allocate either once
// the vectors have grown.
//
// Thread-safety: a backend is driven by one thread at a time. It may use worker threads inside
// RunStep (the CPU backend does), but RunStep returns only when the step is finished.
#ifndef LLMRT_BACKEND_BACKEND_H_
#define LLMRT_BACKEND_BACKEND_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "runtime/plan/program_check.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmrt {

// The bytes of meta.tensors(tensor_index), or nullptr when there are none. The bytes must
// outlive the backend and stay unchanged.
using BlobLookup = plan::BlobLookup;

using MatmulObserver =
    std::function<void(int32_t op_index, const float* input, int64_t num_rows, int64_t width)>;

// How quantized (I8 / I4) matmuls treat their f32 input rows.
enum class QuantizedActivations {
  kInt8,  // quantized to int8 per block of 32 columns, integer dot products (fast; the default)
  kF32,   // kept in f32 against weights dequantized in the inner loop (slow; equals the
          // dequantized f32 plan, for checks: cpu/quant_matmul_exact.h)
};

struct BackendOptions {
  // The most tokens one step may hold (prefill chunk + decode tokens of every sequence).
  int32_t max_tokens_per_step = 256;
  // Worker threads for one step, the calling thread included; 0 (the default, as in
  // engine::ModelOptions and every llmrt command): one per CPU of the process's affinity mask
  // (threading::ThreadPool::DefaultThreadCount).
  int32_t num_threads = 0;
  // The KV cache's element type; DTYPE_UNSPECIFIED: the plan's KvCacheSpec.dtype (itself F32
  // when unset). See kv::ResolveKvDType; a backend refuses a dtype it cannot keep.
  plan::DType kv_cache_dtype = plan::DTYPE_UNSPECIFIED;
  // When set, the CPU backend calls it before every MATMUL op (not LOGITS) with the op's index
  // in program.ops and its f32 input rows [num_rows, width]; the pointer is valid only during
  // the call. For calibration (llmc's AWQ search); costs nothing when unset.
  MatmulObserver matmul_observer;
  QuantizedActivations quantized_activations = QuantizedActivations::kInt8;
  // Count, in every step, how many tokens chose each expert at each ROUTER op, for
  // Backend::LastStepExpertLoad (the engine's expert metrics). Off: routers count nothing.
  bool record_expert_load = false;
};

// How the last RunStep routed its tokens. counts[r * num_experts + e]: tokens of the step that
// chose expert e at ROUTER op r (program order); a row sums to num_tokens * top_k. Rows of
// narrower routers are zero-padded.
struct ExpertLoad {
  int32_t num_routers = 0;
  int32_t num_experts = 0;
  std::vector<int32_t> counts;
};

// One sequence's part of a step. Its tokens are batch rows [first_token, first_token +
// num_tokens); they are the last num_tokens of the sequence's context_length tokens, so the
// token at row first_token + i has index context_length - num_tokens + i in the sequence and
// attends to the sequence's cached tokens 0..that index.
struct StepSequence {
  int32_t first_token = 0;
  int32_t num_tokens = 0;
  int32_t context_length = 0;  // cached tokens after this step, this step's included
  // Blocks holding the sequence's tokens in order; at least ceil(context_length / block
  // size) entries. Owned by the caller, valid during RunStep.
  const int32_t* block_table = nullptr;
  int32_t num_blocks = 0;
};

struct StepBatch {
  std::vector<int32_t> token_ids;     // [num_tokens]
  std::vector<int32_t> positions;     // [num_tokens], rope positions
  std::vector<int32_t> slot_mapping;  // [num_tokens] cache slot: block * block_size + offset
  std::vector<StepSequence> sequences;
  // Batch rows whose logits the step computes, in output order (usually each sequence's last
  // token). Row r of the logits output is the logits of token logit_rows[r].
  std::vector<int32_t> logit_rows;

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  // Empties the batch but keeps the vectors' capacity.
  void Clear() {
    token_ids.clear();
    positions.clear();
    slot_mapping.clear();
    sequences.clear();
    logit_rows.clear();
  }
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;

  // Whether this backend executes op `op_index` of `meta`'s program (one plan::CheckProgram
  // accepts) as it is: its kind, shapes, dtypes and layouts. OK, or UNIMPLEMENTED naming what
  // is missing. Creation already refuses a program with an unsupported op the same way; this
  // lets a caller ask about another plan's ops (e.g. which backend to choose) op by op.
  virtual absl::Status Supports(const plan::PlanMeta& meta, int op_index) const = 0;

  // Allocates (or re-allocates, discarding the contents) the paged KV cache: every ATTENTION
  // layer of the plan gets K and V for `num_blocks` blocks of `block_size` tokens.
  virtual absl::Status AllocateKvCache(int32_t num_blocks, int32_t block_size) = 0;

  // Runs the program over `batch`. `logits` receives logit_rows.size() rows of vocab_size()
  // floats. Fails without touching the KV cache when the batch is malformed (a token id
  // outside the vocabulary, a slot outside the cache, more tokens than max_tokens_per_step).
  virtual absl::Status RunStep(const StepBatch& batch, float* logits) = 0;

  // Copies every layer's K and V of one block onto another (copy-on-write of shared blocks).
  virtual absl::Status CopyKvBlock(int32_t source, int32_t destination) = 0;

  virtual int32_t max_tokens_per_step() const = 0;
  virtual int64_t vocab_size() const = 0;
  // Bytes of the activation arena (max_tokens_per_step * program.arena_bytes_per_token).
  virtual int64_t arena_bytes() const = 0;
  virtual int64_t kv_cache_bytes() const = 0;

  // Fills `load` with the last step's routing. FailedPrecondition without
  // BackendOptions::record_expert_load or before the first step; a plan without ROUTER ops
  // gives num_routers 0. This default refuses (like Supports()) for backends that do not
  // record; the engine then counts every expert of a MoE layer as active (an upper bound).
  virtual absl::Status LastStepExpertLoad(ExpertLoad& load) const {
    (void)load;
    return absl::UnimplementedError(name() + " does not record expert load");
  }
};

}  // namespace llmrt

#endif  // LLMRT_BACKEND_BACKEND_H_
