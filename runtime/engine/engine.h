// Engine: continuous batching over a Model's paged KV cache, with prefix caching, preemption and
// per-request sampling. This is the API the HTTP server (runtime/server) and `llmrt serve` use.
//
//   Engine engine(model, tokenizer, options);            // model, tokenizer outlive the engine
//   GenerationRequest request;
//   request.prompt_ids = tokenizer.Encode(prompt);
//   request.max_tokens = 64;
//   request.stop = {"\n\n"};
//   request.on_output = [&](const RequestOutput& out) { ... stream out.text ... };
//   absl::StatusOr<RequestId> id = engine.Submit(std::move(request));  // 400-type errors here
//   engine.Start();      // a background thread runs steps while there is work
//   ...                  // engine.Cancel(*id) when the client disconnects
//   engine.Stop();       // finishes the current step, joins the thread
//
// Instead of Start()/Stop(), a caller may drive the engine itself with Step() / RunUntilIdle().
//
// A step (DESIGN.md, "Execution model") is this ordered list of actions:
//   1. TakeInbox        new requests and cancellations from other threads;
//   2. Schedule         RunningPolicy, then AdmissionPolicy (scheduler.h): who runs how many
//                       tokens, who is preempted by recompute;
//   3. CopyBlocks       copy-on-write of shared blocks the step will write;
//   4. RunModel         one backend step over all scheduled tokens (decode and prefill chunks);
//   5. Sample           for every sequence whose last token ran: fork n > 1 choices after the
//                       prompt, sample, detokenize, match stop strings, stream the output;
//   6. FreeFinished     release the blocks of finished sequences (full blocks stay cached).
//
// Outputs: `on_output` is called on the engine thread, once per choice per step in which the
// choice produced tokens or finished, and exactly once with finished = true. It must not block
// for long (it delays every other request) and must not call Step(); it may call Submit() and
// Cancel(). Text is detokenized incrementally (StreamDecoder) with stop strings removed.
//
// Thread-safety: Submit(), Cancel(), GetStats() and Start()/Stop() may be called from any
// thread. Step() and RunUntilIdle() only from one thread at a time and not while Start()ed.
#ifndef LLMRT_ENGINE_ENGINE_H_
#define LLMRT_ENGINE_ENGINE_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/engine/model.h"
#include "runtime/engine/scheduler.h"
#include "runtime/engine/sequence.h"
#include "runtime/engine/step_builder.h"
#include "runtime/sampling/sampler.h"
#include "runtime/sampling/token_constraint.h"
#include "runtime/tokenizer/tokenizer.h"

namespace llmrt::engine {

using RequestId = uint64_t;

enum class FinishReason {
  kNone,       // still running
  kStop,       // EOS, a stop token id or a stop string
  kLength,     // max_tokens, or the context is full
  kCancelled,  // Cancel() or engine shutdown
  kError,      // the step failed; RequestOutput.status says why
};
const char* FinishReasonName(FinishReason reason);  // "stop", "length", "cancelled", "error"

struct TokenOutput {
  int32_t token = 0;
  sampling::TokenLogprob logprob;           // when GenerationRequest.logprobs
  std::vector<sampling::TokenLogprob> top;  // top_logprobs entries, descending
};

// One choice's news from one step.
struct RequestOutput {
  RequestId request_id = 0;
  int32_t index = 0;                // choice in [0, n)
  std::vector<TokenOutput> tokens;  // tokens kept this step (EOS and stop tokens are not)
  std::string text;                 // new text; a stop string and what follows never appear
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string stop_string;  // the stop string that ended it, if one did
  absl::Status status;      // not OK only with kError
  // Usage, as OpenAI reports it (per choice; prompt tokens counted once per request).
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;     // generated so far, EOS/stop tokens included
  int64_t cached_prompt_tokens = 0;  // prompt tokens found in the prefix cache
  // Seconds from Submit() to the first step that ran any of the request's tokens (vLLM's
  // queue time; a preempted and re-admitted request keeps its first figure); -1 when the
  // request finished before it was ever scheduled.
  double queue_seconds = -1.0;
};
using OutputCallback = std::function<void(const RequestOutput&)>;

struct GenerationRequest {
  std::vector<int32_t> prompt_ids;    // non-empty, inside the vocabulary
  sampling::SamplingParams sampling;  // sampling.seed is used only when `seed` is set
  std::optional<uint64_t> seed;       // unset: a random seed per request
  int64_t max_tokens = -1;            // -1: until the context is full
  std::vector<std::string> stop;      // needs a tokenizer
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool logprobs = false;
  int32_t top_logprobs = 0;  // [0, 20]
  int32_t n = 1;             // choices; they share the prompt's KV blocks
  // false: special tokens (<|python_tag|>, [TOOL_CALLS], ...) stay in the text, as HF's
  // decode(skip_special_tokens=False); the server's tool-call parsers need them.
  bool skip_special_tokens = true;
  OutputCallback on_output;  // required
  // Structured output: each choice samples under its own CloneInitial() of this constraint;
  // the EOS ids and stop_token_ids are allowed exactly when the constraint CanEnd(). A choice
  // whose constraint allows nothing more finishes with kStop; a constraint that fails (or
  // leaves no token while it cannot end) finishes it with kError and the reason.
  std::shared_ptr<const sampling::TokenConstraint> constraint;
};

// 32 prompt tokens next to a decode batch. TinyLlama-1.1B f16 on 2 AVX2 cores: a prompt token
// costs ~14.6 ms of GEMM (pp512 at 68.6 tok/s) and a 16-sequence decode step ~4.6x a
// 1-sequence one (~390 ms; llmrt-engine-bench, CPU time), so a 32-token chunk (~470 ms) about
// doubles that step, where letting 16 new 32-token prompts in at once made it ~20x longer
// (ITL p99 4 s, docs/performance.md "Serving"); a 64-token prompt still gets its first token
// in 2-3 steps.
constexpr int32_t kDefaultPrefillChunkTokens = 32;

struct EngineOptions {
  // Tokens of one step over all sequences; 0: the backend's max_tokens_per_step.
  int32_t max_batched_tokens = 0;
  // Prompt tokens a step may run while any sequence decodes (its prefill chunk), so that new
  // prompts lengthen a decode step by one bounded chunk, not by all of them at once: TPOT and
  // inter-token latency stay low, TTFT grows instead. 0: kDefaultPrefillChunkTokens; < 0: no
  // cap beyond max_batched_tokens. A step with no decode token runs prompts up to
  // max_batched_tokens either way.
  int32_t prefill_chunk_tokens = 0;
  // Sequences running at once; 0: 256 (capped by max_batched_tokens, one token each at least).
  int32_t max_seqs = 0;
  // EOS ids; empty: the plan's generation_config eos_token_ids, else the tokenizer's eos.
  std::vector<int32_t> eos_token_ids;
  // KV-cache events (kv::KvCacheEvent): when set, the pool records every block it registers or
  // evicts and the engine hands each step's events, in order, to this callback on the engine
  // thread at the end of the step (one call per step that changed the cache). It must not block
  // for long and must not call into the engine. Unset: nothing is recorded.
  std::function<void(std::vector<kv::KvCacheEvent>)> on_kv_events;
  // MoE plans: count the tokens routed to each expert of each MoE layer
  // (EngineStats::expert_tokens_total; `llmrt serve --expert-metrics`). Off: that stays empty,
  // and each stats snapshot copies no layers x experts table.
  bool expert_token_counts = false;
};

// A snapshot for /metrics. Counters are totals since the engine was created.
struct EngineStats {
  // Choices in the running batch and in the waiting queue: each sequence, plus the choices
  // still to fork from it after its first token, so a request with n = 2 counts 2 from the
  // start. vLLM (v1) runs n > 1 as n child requests, so this is what its
  // num_requests_running / num_requests_waiting report.
  int32_t running = 0;
  int32_t waiting = 0;
  // Requests: one per Submit(), whatever its n. A request is running while any of its choices
  // is in the running batch, waiting while it has choices and none of them runs.
  int32_t running_requests = 0;
  int32_t waiting_requests = 0;
  int32_t kv_block_size = 0;
  int32_t kv_blocks_total = 0;
  int32_t kv_blocks_used = 0;
  double kv_usage = 0.0;  // used / total
  int64_t prefix_queried_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t prompt_tokens_total = 0;      // prompt tokens of finished or running requests
  int64_t generation_tokens_total = 0;  // sampled tokens
  int64_t preemptions_total = 0;
  int64_t steps_total = 0;
  int64_t requests_finished_total = 0;
  // Decode steps: steps in which every scheduled sequence ran exactly one token. Their
  // backend time, and the bytes they had to read: DecodeWeightBytes() once per step (a batch
  // reads each weight once), the experts the step's tokens chose (each chosen expert once:
  // Model::last_step_active_expert_bytes), plus each sequence's KV cache up to its new
  // position. bytes / seconds is the achieved decode bandwidth; sequences / steps the mean
  // decode batch.
  int64_t decode_steps_total = 0;
  int64_t decode_sequences_total = 0;
  double decode_seconds_total = 0.0;
  double decode_bytes_total = 0.0;
  // Where the engine thread's time goes, over every step that ran the model: the whole Step()
  // (inbox, schedule, model, sampling, outputs, freeing), the backend step alone, and Sample()
  // (sampling, detokenization, stop strings and the on_output callbacks). step - model is the
  // engine's own overhead, during which the backend's other threads idle.
  double step_seconds_total = 0.0;
  double model_seconds_total = 0.0;
  double sample_seconds_total = 0.0;
  // Mixture of experts, over every step that ran the model (0 / empty for a dense plan).
  // moe_layers: the plan's ROUTER ops; num_experts: the widest one's experts.
  // expert_tokens_total[layer * num_experts + expert]: tokens routed there, with
  // EngineOptions::expert_token_counts (else empty; zeros when the backend does not record
  // expert load). moe_active_experts_total: sum over steps and MoE
  // layers of the experts chosen by at least one token of the step (the batch's union);
  // divided by moe_layer_steps_total (steps x MoE layers) it is the mean union per layer.
  int32_t moe_layers = 0;
  int32_t num_experts = 0;
  std::vector<int64_t> expert_tokens_total;
  int64_t moe_active_experts_total = 0;
  int64_t moe_layer_steps_total = 0;
};

class Engine {
 public:
  // `model` and `tokenizer` must outlive the engine; `tokenizer` may be null (then there is no
  // text in the outputs and stop strings are refused). The engine takes the model's KV pool:
  // do not use the model's Sessions while an engine has work.
  Engine(Model& model, const Tokenizer* tokenizer, const EngineOptions& options);
  ~Engine();  // Stop()s; unfinished requests get a kCancelled output
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Checks the request (InvalidArgument naming the field; OutOfRange when the prompt is longer
  // than the context, stating both numbers) and queues it.
  absl::StatusOr<RequestId> Submit(GenerationRequest request);
  // Submit()'s checks, except that on_output may still be empty: lets a caller refuse a bad
  // request before it takes a queue slot (the server answers 400, never 429, to one).
  absl::Status Validate(const GenerationRequest& request) const;
  // Finishes every choice of the request with kCancelled at the start of the next step and
  // frees its blocks there. Unknown or finished ids are ignored.
  void Cancel(RequestId id);

  // Runs one step; returns false when there was nothing to do. A failing backend step
  // finishes the sequences of that step with kError and returns the status.
  absl::StatusOr<bool> Step();
  // Steps until no request is left.
  absl::Status RunUntilIdle();
  // Whether any request is queued or running.
  bool HasWork() const;

  // Background stepping thread: runs Step() while there is work, sleeps otherwise.
  void Start();
  void Stop();

  EngineStats GetStats() const;
  // The prefix cache's registered blocks, read between steps (any thread but the engine's:
  // it waits for a running step to end, so an on_output callback must not call it). A KV-event
  // subscriber's mirror of this replica must equal it.
  std::vector<kv::CachedBlock> CachedBlocks() const;
  int64_t max_context() const { return model_.max_context(); }

 private:
  struct Inbox;
  void TakeInbox();
  void Schedule();
  absl::Status CopyBlocks();
  absl::Status RunModel();
  void Sample();
  void FreeFinished();
  void Finish(Sequence& sequence, FinishReason reason, RequestOutput& output);
  void FailScheduled(const absl::Status& status);
  void SampleOne(Sequence& sequence, const float* logits);
  FinishReason ConstrainedMask(Sequence& sequence, absl::Status& status);
  std::unique_ptr<Sequence> Fork(Sequence& parent, int32_t index);
  void PublishStats();
  void CountExpertLoad();             // after a MoE plan's step: the model's last-step routing
  absl::StatusOr<bool> StepLocked();  // Step() under step_mutex_

  Model& model_;
  const Tokenizer* tokenizer_;
  kv::BlockPool& pool_;
  int32_t max_batched_tokens_;
  int32_t max_seqs_;
  int32_t prefill_chunk_tokens_;  // <= 0: no cap
  std::vector<int32_t> eos_token_ids_;

  // Engine-thread state.
  absl::flat_hash_map<RequestId, std::unique_ptr<RequestState>> requests_;
  std::vector<std::unique_ptr<Sequence>> sequences_;  // every live sequence
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;
  RunningPolicy running_policy_;
  AdmissionPolicy admission_policy_;
  ScheduleResult schedule_;
  StepBuilder builder_;
  std::unique_ptr<float[]> step_logits_;
  std::vector<int32_t> logit_row_of_scheduled_;  // -1: no logits for that entry
  uint64_t next_arrival_ = 0;
  int64_t preemptions_ = 0, steps_ = 0, prompt_tokens_ = 0, generation_tokens_ = 0;
  int64_t requests_finished_ = 0;
  const int64_t decode_weight_bytes_;
  const double kv_bytes_per_token_;
  int64_t decode_steps_ = 0, decode_sequences_ = 0;
  double decode_seconds_ = 0.0, decode_bytes_ = 0.0;
  double step_seconds_ = 0.0, model_seconds_ = 0.0, sample_seconds_ = 0.0;
  std::vector<int64_t> expert_tokens_;  // EngineOptions::expert_token_counts, else empty
  int64_t moe_active_experts_ = 0, moe_layer_steps_ = 0;

  uint64_t stats_epoch_ = 0;
  std::function<void(std::vector<kv::KvCacheEvent>)> on_kv_events_;
  // Held by Step() for the whole step and by CachedBlocks(): the pool is the engine thread's
  // otherwise.
  mutable std::mutex step_mutex_;

  // Shared with other threads, under mutex_.
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::unique_ptr<Inbox> inbox_;
  RequestId next_id_ = 1;
  std::mt19937_64 seed_source_;
  EngineStats stats_;
  int64_t live_requests_ = 0;  // submitted and not finished
  bool stop_thread_ = false;
  std::thread thread_;
};

}  // namespace llmrt::engine

#endif  // LLMRT_ENGINE_ENGINE_H_
