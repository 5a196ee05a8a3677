#include "runtime/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_format.h"
#include "runtime/base/status_macros.h"

namespace llmrt::engine {

using Clock = std::chrono::steady_clock;

// 256 sequences per step: vLLM's default max_num_seqs; each holds one logits row of the step.
constexpr int32_t kDefaultMaxSeqs = 256;

struct RequestState {
  RequestId id = 0;
  GenerationRequest request;
  uint64_t base_seed = 0;
  int32_t live_choices = 0;
  int64_t cached_prompt_tokens = 0;
  Clock::time_point submitted;
  double queue_seconds = -1.0;  // set when first scheduled
  uint64_t stats_epoch = 0;     // PublishStats() counted this request in that call
};

struct Engine::Inbox {
  std::vector<std::pair<RequestId, GenerationRequest>> submitted;
  std::vector<uint64_t> base_seeds;
  std::vector<Clock::time_point> submit_times;
  std::vector<RequestId> cancelled;
  bool empty() const { return submitted.empty() && cancelled.empty(); }
};

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "unknown";
}

Engine::Engine(Model& model, const Tokenizer* tokenizer, const EngineOptions& options)
    : model_(model),
      tokenizer_(tokenizer),
      pool_(model.mutable_block_pool()),
      builder_(model.kv_block_size(), model.backend().max_tokens_per_step()),
      decode_weight_bytes_(DecodeWeightBytes(model.meta())),
      kv_bytes_per_token_(static_cast<double>(model.kv_block_bytes()) / model.kv_block_size()),
      inbox_(std::make_unique<Inbox>()),
      seed_source_(std::random_device()()) {
  const int32_t step_tokens = model.backend().max_tokens_per_step();
  max_batched_tokens_ = options.max_batched_tokens > 0
                            ? std::min(options.max_batched_tokens, step_tokens)
                            : step_tokens;
  max_seqs_ = options.max_seqs > 0 ? options.max_seqs : kDefaultMaxSeqs;
  // Every running sequence gets at least one token a step, and each gets a logits row.
  max_seqs_ = std::min(max_seqs_, max_batched_tokens_);
  prefill_chunk_tokens_ =
      options.prefill_chunk_tokens == 0 ? kDefaultPrefillChunkTokens : options.prefill_chunk_tokens;
  eos_token_ids_ = options.eos_token_ids;
  on_kv_events_ = options.on_kv_events;
  pool_.set_record_events(static_cast<bool>(on_kv_events_));
  if (eos_token_ids_.empty()) {
    for (int64_t id : model.meta().generation().eos_token_ids()) {
      eos_token_ids_.push_back(static_cast<int32_t>(id));
    }
  }
  if (eos_token_ids_.empty() && tokenizer_ != nullptr && tokenizer_->eos_id() >= 0) {
    eos_token_ids_.push_back(tokenizer_->eos_id());
  }
  // Uninitialized, as in Model: RunStep writes every row the step reads.
  step_logits_.reset(new float[static_cast<size_t>(step_tokens) * model.vocab_size()]);
  if (options.expert_token_counts) {
    expert_tokens_.assign(model.moe_routers().size() * model.moe_num_experts(), 0);
  }
  PublishStats();
}

Engine::~Engine() {
  Stop();
  // A callback told of its cancellation may submit again (callbacks may submit): those requests
  // are taken and cancelled too, until a round submits nothing.
  for (bool cancelled_some = true; cancelled_some;) {
    TakeInbox();
    cancelled_some = false;
    for (const std::unique_ptr<Sequence>& sequence : sequences_) {
      if (sequence->finished) continue;
      RequestOutput output;
      Finish(*sequence, FinishReason::kCancelled, output);
      sequence->request->request.on_output(output);
      cancelled_some = true;
    }
  }
  FreeFinished();
  // The model's Sessions may use the pool after the engine: nobody would take the events.
  pool_.set_record_events(false);
  pool_.TakeEvents();
}

absl::StatusOr<RequestId> Engine::Submit(GenerationRequest request) {
  LLMRT_RETURN_IF_ERROR(Validate(request));
  if (!request.on_output) {
    return absl::InvalidArgumentError("request: on_output is required");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  const RequestId id = next_id_++;
  const uint64_t base_seed = request.seed.has_value() ? *request.seed : seed_source_();
  inbox_->submitted.emplace_back(id, std::move(request));
  inbox_->base_seeds.push_back(base_seed);
  inbox_->submit_times.push_back(Clock::now());
  ++live_requests_;
  wake_.notify_all();
  return id;
}

absl::Status Engine::Validate(const GenerationRequest& request) const {
  const int64_t vocab = model_.vocab_size();
  if (request.prompt_ids.empty()) {
    return absl::InvalidArgumentError("request: prompt_ids is empty; give at least one token");
  }
  for (size_t i = 0; i < request.prompt_ids.size(); ++i) {
    const int32_t token = request.prompt_ids[i];
    if (token < 0 || token >= vocab) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "request: prompt_ids[%d] = %d is outside the vocabulary [0, %d)", i, token, vocab));
    }
  }
  const int64_t prompt_size = static_cast<int64_t>(request.prompt_ids.size());
  if (prompt_size > model_.max_context()) {
    return absl::OutOfRangeError(
        absl::StrFormat("request: the prompt has %d tokens, the context holds %d", prompt_size,
                        model_.max_context()));
  }
  if (request.n < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("request: n must be >= 1, got %d", request.n));
  }
  if (request.max_tokens < -1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "request: max_tokens must be >= 0 (or -1: up to the context), got %d", request.max_tokens));
  }
  if (request.top_logprobs < 0 || request.top_logprobs > sampling::kMaxTopLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrFormat("request: top_logprobs must be in [0, 20], got %d", request.top_logprobs));
  }
  for (int32_t token : request.stop_token_ids) {
    if (token < 0 || token >= vocab) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "request: stop token id %d is outside the vocabulary [0, %d)", token, vocab));
    }
  }
  if (!request.stop.empty() && tokenizer_ == nullptr) {
    return absl::InvalidArgumentError(
        "request: stop strings need text, and this engine has no tokenizer");
  }
  if (absl::Status status = sampling::Sampler::Validate(request.sampling, vocab); !status.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat("request: %s", status.message()));
  }
  return absl::OkStatus();
}

void Engine::Cancel(RequestId id) {
  std::lock_guard<std::mutex> lock(mutex_);
  inbox_->cancelled.push_back(id);
  wake_.notify_all();
}

bool Engine::HasWork() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_requests_ > 0;
}

EngineStats Engine::GetStats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void Engine::Start() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (thread_.joinable()) return;
  stop_thread_ = false;
  thread_ = std::thread([this] {
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [this] { return stop_thread_ || live_requests_ > 0; });
        if (stop_thread_) return;
      }
      // Failures already reached the affected requests as kError outputs.
      Step().IgnoreError();
    }
  });
}

void Engine::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_thread_ = true;
    wake_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

absl::Status Engine::RunUntilIdle() {
  while (HasWork()) {
    absl::StatusOr<bool> stepped = Step();
    if (!stepped.ok()) return stepped.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Engine::Step() {
  std::lock_guard<std::mutex> step_lock(step_mutex_);
  absl::StatusOr<bool> stepped = StepLocked();
  if (on_kv_events_) {
    // After the whole step: evictions (Schedule, CopyBlocks) and registrations (Sample) of
    // this step in the order the pool made them.
    std::vector<kv::KvCacheEvent> events = pool_.TakeEvents();
    if (!events.empty()) on_kv_events_(std::move(events));
  }
  return stepped;
}

std::vector<kv::CachedBlock> Engine::CachedBlocks() const {
  std::lock_guard<std::mutex> step_lock(step_mutex_);
  return pool_.CachedBlocks();
}

absl::StatusOr<bool> Engine::StepLocked() {
  const Clock::time_point step_start = Clock::now();
  TakeInbox();
  FreeFinished();  // cancelled ones
  if (running_.empty() && waiting_.empty()) {
    PublishStats();
    return false;
  }
  Schedule();
  if (schedule_.scheduled.empty()) {
    // Only when every running sequence was preempted this step; the next step admits again.
    PublishStats();
    return true;
  }
  // A decode step: one token per sequence. Its bytes are counted before RunModel() moves
  // num_computed on.
  bool decode_step = true;
  double decode_bytes = static_cast<double>(decode_weight_bytes_);
  for (const ScheduledSequence& scheduled : schedule_.scheduled) {
    if (scheduled.num_tokens != 1) {
      decode_step = false;
      break;
    }
    decode_bytes += kv_bytes_per_token_ * static_cast<double>(scheduled.sequence->num_computed + 1);
  }
  absl::Status status = CopyBlocks();
  const Clock::time_point run_start = Clock::now();
  if (status.ok()) status = RunModel();
  const double model_seconds = std::chrono::duration<double>(Clock::now() - run_start).count();
  model_seconds_ += model_seconds;
  if (status.ok() && !model_.moe_routers().empty()) {
    decode_bytes += static_cast<double>(model_.last_step_active_expert_bytes());
    CountExpertLoad();
  }
  if (status.ok() && decode_step) {
    ++decode_steps_;
    decode_sequences_ += static_cast<int64_t>(schedule_.scheduled.size());
    decode_seconds_ += model_seconds;
    decode_bytes_ += decode_bytes;
  }
  if (!status.ok()) {
    FailScheduled(status);
    FreeFinished();
    PublishStats();
    return status;
  }
  const Clock::time_point sample_start = Clock::now();
  Sample();
  sample_seconds_ += std::chrono::duration<double>(Clock::now() - sample_start).count();
  FreeFinished();
  ++steps_;
  // Counted up to here: publishing is a copy under the lock.
  step_seconds_ += std::chrono::duration<double>(Clock::now() - step_start).count();
  PublishStats();
  return true;
}

void Engine::TakeInbox() {
  Inbox taken;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::swap(taken, *inbox_);
  }
  for (size_t i = 0; i < taken.submitted.size(); ++i) {
    auto state = std::make_unique<RequestState>();
    state->id = taken.submitted[i].first;
    state->request = std::move(taken.submitted[i].second);
    state->base_seed = taken.base_seeds[i];
    state->submitted = taken.submit_times[i];
    state->live_choices = state->request.n;
    const GenerationRequest& request = state->request;
    auto sequence = std::make_unique<Sequence>();
    sequence->arrival = next_arrival_++;
    sequence->index = 0;
    sequence->tokens = request.prompt_ids;
    sequence->prompt_size = static_cast<int64_t>(request.prompt_ids.size());
    sequence->request = state.get();
    sampling::SamplingParams params = request.sampling;
    params.seed = state->base_seed;
    sequence->sampler = std::make_unique<sampling::Sampler>(params);
    sequence->sampler->SetPrompt(request.prompt_ids);
    if (tokenizer_ != nullptr) {
      sequence->decoder = std::make_unique<StreamDecoder>(*tokenizer_, request.prompt_ids,
                                                          request.skip_special_tokens);
    }
    sequence->stop_matcher = std::make_unique<sampling::StopStringMatcher>(request.stop);
    if (request.constraint != nullptr) sequence->constraint = request.constraint->CloneInitial();
    sequence->pending_forks = request.n - 1;
    prompt_tokens_ += sequence->prompt_size;
    waiting_.push_back(sequence.get());
    sequences_.push_back(std::move(sequence));
    requests_[state->id] = std::move(state);
  }
  for (RequestId id : taken.cancelled) {
    auto found = requests_.find(id);
    if (found == requests_.end()) continue;
    for (const std::unique_ptr<Sequence>& sequence : sequences_) {
      if (sequence->request != found->second.get() || sequence->finished) continue;
      RequestOutput output;
      Finish(*sequence, FinishReason::kCancelled, output);
      sequence->request->request.on_output(output);
    }
  }
}

void Engine::Schedule() {
  schedule_.scheduled.clear();
  schedule_.paused.clear();
  schedule_.copies.clear();
  StepBudget budget{max_batched_tokens_, max_seqs_, prefill_chunk_tokens_};
  running_policy_.Schedule(running_, pool_, budget, schedule_);
  if (!schedule_.paused.empty()) {
    preemptions_ += static_cast<int64_t>(schedule_.paused.size());
    RequeuePaused(schedule_.paused, waiting_);
    return;  // vLLM's rule: no admissions in a step that had to preempt
  }
  const size_t before = schedule_.scheduled.size();
  admission_policy_.Schedule(waiting_, running_, pool_, budget, schedule_);
  const Clock::time_point now = Clock::now();
  for (size_t i = before; i < schedule_.scheduled.size(); ++i) {
    Sequence& sequence = *schedule_.scheduled[i].sequence;
    if (sequence.request != nullptr && sequence.request->queue_seconds < 0) {
      sequence.request->queue_seconds =
          std::chrono::duration<double>(now - sequence.request->submitted).count();
    }
    // The first admission of the request's first choice reports the prefix-cache hit.
    if (sequence.index == 0 && sequence.num_generated == 0 && sequence.request != nullptr) {
      sequence.request->cached_prompt_tokens =
          std::max(sequence.request->cached_prompt_tokens, sequence.num_computed);
    }
  }
}

absl::Status Engine::CopyBlocks() {
  for (const kv::BlockCopy& copy : schedule_.copies) {
    if (absl::Status status = model_.backend().CopyKvBlock(copy.source, copy.destination);
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

absl::Status Engine::RunModel() {
  builder_.Clear();
  logit_row_of_scheduled_.assign(schedule_.scheduled.size(), -1);
  int32_t logit_rows = 0;
  for (size_t i = 0; i < schedule_.scheduled.size(); ++i) {
    const ScheduledSequence& scheduled = schedule_.scheduled[i];
    Sequence& sequence = *scheduled.sequence;
    const bool reaches_end = scheduled.num_tokens == sequence.remaining();
    builder_.AddSequence(sequence.tokens.data() + sequence.num_computed, scheduled.num_tokens,
                         sequence.num_computed, sequence.table,
                         reaches_end ? LogitRows::kLast : LogitRows::kNone);
    if (reaches_end) logit_row_of_scheduled_[i] = logit_rows++;
  }
  if (absl::Status status = model_.RunStep(builder_.batch(), step_logits_.get()); !status.ok()) {
    return status;
  }
  for (const ScheduledSequence& scheduled : schedule_.scheduled) {
    Sequence& sequence = *scheduled.sequence;
    sequence.num_computed += scheduled.num_tokens;
    sequence.table.CommitFullBlocks(pool_, sequence.tokens, sequence.num_computed);
  }
  return absl::OkStatus();
}

std::unique_ptr<Sequence> Engine::Fork(Sequence& parent, int32_t index) {
  auto child = std::make_unique<Sequence>();
  child->arrival = parent.arrival;
  child->index = index;
  child->tokens = parent.tokens;
  child->prompt_size = parent.prompt_size;
  child->num_computed = parent.num_computed;
  child->table = parent.table.Fork(pool_);
  child->request = parent.request;
  sampling::SamplingParams params = parent.request->request.sampling;
  // Choice i draws from seed + i: reproducible per choice, different between choices.
  params.seed = parent.request->base_seed + static_cast<uint64_t>(index);
  child->sampler = std::make_unique<sampling::Sampler>(params);
  child->sampler->SetPrompt(parent.request->request.prompt_ids);
  if (tokenizer_ != nullptr) {
    child->decoder =
        std::make_unique<StreamDecoder>(*tokenizer_, parent.request->request.prompt_ids,
                                        parent.request->request.skip_special_tokens);
  }
  child->stop_matcher = std::make_unique<sampling::StopStringMatcher>(parent.request->request.stop);
  if (parent.request->request.constraint != nullptr) {
    child->constraint = parent.request->request.constraint->CloneInitial();
  }
  return child;
}

void Engine::Sample() {
  const int32_t vocab = static_cast<int32_t>(model_.vocab_size());
  std::vector<Sequence*> forked_running;
  forked_running.reserve(running_.size());
  bool forked = false;
  // Logits rows follow scheduled order; forks go right after their parent in running_.
  absl::flat_hash_map<Sequence*, std::vector<Sequence*>> children_of;
  for (size_t i = 0; i < schedule_.scheduled.size(); ++i) {
    const int32_t row = logit_row_of_scheduled_[i];
    if (row < 0) continue;
    Sequence& sequence = *schedule_.scheduled[i].sequence;
    const float* logits = step_logits_.get() + static_cast<size_t>(row) * vocab;
    if (sequence.pending_forks > 0) {
      const int32_t choices = sequence.pending_forks + 1;
      sequence.pending_forks = 0;
      for (int32_t index = 1; index < choices; ++index) {
        std::unique_ptr<Sequence> child = Fork(sequence, index);
        children_of[&sequence].push_back(child.get());
        SampleOne(*child, logits);
        sequences_.push_back(std::move(child));
      }
      forked = true;
    }
    SampleOne(sequence, logits);
  }
  if (forked) {
    for (Sequence* sequence : running_) {
      forked_running.push_back(sequence);
      auto found = children_of.find(sequence);
      if (found == children_of.end()) continue;
      for (Sequence* child : found->second) forked_running.push_back(child);
    }
    running_.swap(forked_running);
  }
}

// The constraint's mask plus, when it may end, the EOS and stop token ids. kStop: nothing may
// follow any more; kError (status set): the constraint failed or is stuck.
FinishReason Engine::ConstrainedMask(Sequence& sequence, absl::Status& status) {
  const int32_t vocab = static_cast<int32_t>(model_.vocab_size());
  const GenerationRequest& request = sequence.request->request;
  sequence.allowed.resize(sampling::MaskWords(vocab));
  const absl::Span<uint32_t> mask = absl::MakeSpan(sequence.allowed);
  status = sequence.constraint->FillNextTokenMask(mask);
  if (!status.ok()) return FinishReason::kError;
  const bool can_end = sequence.constraint->CanEnd();
  if (can_end) {
    auto allow = [&](int32_t token) {
      if (token >= 0 && token < vocab) mask[token >> 5] |= 1u << (token & 31);
    };
    if (!request.ignore_eos) {
      for (int32_t token : eos_token_ids_) allow(token);
    }
    for (int32_t token : request.stop_token_ids) allow(token);
  }
  if (std::any_of(mask.begin(), mask.end(), [](uint32_t word) { return word != 0; })) {
    return FinishReason::kNone;
  }
  if (can_end) return FinishReason::kStop;
  status = absl::FailedPreconditionError(
      "structured output: no token of the vocabulary can continue the text here");
  return FinishReason::kError;
}

void Engine::SampleOne(Sequence& sequence, const float* logits) {
  const int32_t vocab = static_cast<int32_t>(model_.vocab_size());
  const GenerationRequest& request = sequence.request->request;
  // Nothing may be generated: max_tokens 0, or a prompt that fills the context by itself.
  if (request.max_tokens == 0 ||
      static_cast<int64_t>(sequence.tokens.size()) >= model_.max_context()) {
    RequestOutput output;
    Finish(sequence, FinishReason::kLength, output);
    request.on_output(output);
    return;
  }
  const uint32_t* allowed = nullptr;
  if (sequence.constraint != nullptr) {
    absl::Status status;
    const FinishReason early = ConstrainedMask(sequence, status);
    if (early != FinishReason::kNone) {
      RequestOutput output;
      output.status = status;
      Finish(sequence, early, output);
      request.on_output(output);
      return;
    }
    allowed = sequence.allowed.data();
  }
  const int32_t token = sequence.sampler->Sample(logits, vocab, allowed);
  sequence.sampler->Accept(token);
  sequence.tokens.push_back(token);
  ++sequence.num_generated;
  ++generation_tokens_;

  RequestOutput output;
  const bool is_eos = !request.ignore_eos && std::find(eos_token_ids_.begin(), eos_token_ids_.end(),
                                                       token) != eos_token_ids_.end();
  const bool is_stop_token = std::find(request.stop_token_ids.begin(), request.stop_token_ids.end(),
                                       token) != request.stop_token_ids.end();
  FinishReason reason = FinishReason::kNone;
  if (is_eos || is_stop_token) {
    reason = FinishReason::kStop;
  } else if (absl::Status status = sequence.constraint != nullptr
                                       ? sequence.constraint->Accept(token)
                                       : absl::OkStatus();
             !status.ok()) {
    output.status = status;
    reason = FinishReason::kError;
  } else {
    TokenOutput token_output;
    token_output.token = token;
    if (request.logprobs) {
      sequence.sampler->Logprobs(logits, vocab, token, request.top_logprobs, token_output.logprob,
                                 token_output.top);
    }
    output.tokens.push_back(std::move(token_output));
    if (sequence.decoder != nullptr) {
      output.text = sequence.stop_matcher->Push(sequence.decoder->Push(token));
    }
    if (sequence.stop_matcher->stopped()) {
      reason = FinishReason::kStop;
    } else if (request.max_tokens >= 0 && sequence.num_generated >= request.max_tokens) {
      reason = FinishReason::kLength;
    } else if (static_cast<int64_t>(sequence.tokens.size()) >= model_.max_context()) {
      // Prompt and output together fill the context (vLLM's max_model_len, the bound the server
      // checks prompt + max_tokens against), so a request without max_tokens ends where one
      // asking for the rest of the context would.
      reason = FinishReason::kLength;
    }
  }
  if (reason != FinishReason::kNone) {
    Finish(sequence, reason, output);
  } else {
    output.request_id = sequence.request->id;
    output.index = sequence.index;
    output.prompt_tokens = sequence.prompt_size;
    output.completion_tokens = sequence.num_generated;
    output.cached_prompt_tokens = sequence.request->cached_prompt_tokens;
    output.queue_seconds = sequence.request->queue_seconds;
  }
  request.on_output(output);
}

void Engine::Finish(Sequence& sequence, FinishReason reason, RequestOutput& output) {
  // The decoder's held-back bytes and the matcher's held-back tail become final now; a stop
  // string may still complete inside them.
  const bool natural_end = reason == FinishReason::kStop || reason == FinishReason::kLength;
  if (sequence.decoder != nullptr && natural_end && !sequence.stop_matcher->stopped()) {
    output.text += sequence.stop_matcher->Push(sequence.decoder->Finish());
    if (sequence.stop_matcher->stopped()) reason = FinishReason::kStop;
    output.text += sequence.stop_matcher->Finish();
  }
  if (sequence.stop_matcher != nullptr && sequence.stop_matcher->stopped()) {
    output.stop_string = sequence.stop_matcher->matched();
  }
  sequence.finished = true;
  output.request_id = sequence.request->id;
  output.index = sequence.index;
  output.finished = true;
  output.finish_reason = reason;
  output.prompt_tokens = sequence.prompt_size;
  output.completion_tokens = sequence.num_generated;
  output.cached_prompt_tokens = sequence.request->cached_prompt_tokens;
  output.queue_seconds = sequence.request->queue_seconds;
  --sequence.request->live_choices;
  // A parent that has not forked yet finishes (cancel, error) for all of its choices.
  if (sequence.pending_forks > 0) {
    sequence.request->live_choices -= sequence.pending_forks;
    for (int32_t index = 1; index <= sequence.pending_forks; ++index) {
      RequestOutput sibling = output;
      sibling.index = index;
      sibling.completion_tokens = 0;
      sibling.text.clear();
      sibling.tokens.clear();
      sequence.request->request.on_output(sibling);
    }
    sequence.pending_forks = 0;
  }
}

void Engine::FailScheduled(const absl::Status& status) {
  for (const ScheduledSequence& scheduled : schedule_.scheduled) {
    Sequence& sequence = *scheduled.sequence;
    if (sequence.finished) continue;
    RequestOutput output;
    output.status = status;
    Finish(sequence, FinishReason::kError, output);
    sequence.request->request.on_output(output);
  }
}

void Engine::FreeFinished() {
  auto finished = [](const Sequence* sequence) { return sequence->finished; };
  running_.erase(std::remove_if(running_.begin(), running_.end(), finished), running_.end());
  waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(), finished), waiting_.end());
  int64_t done_requests = 0;
  for (std::unique_ptr<Sequence>& sequence : sequences_) {
    if (!sequence->finished) continue;
    sequence->table.Release(pool_);
    RequestState* request = sequence->request;
    sequence.reset();
    if (request->live_choices == 0) {
      request->live_choices = -1;  // erased once, below
      ++done_requests;
    }
  }
  sequences_.erase(std::remove(sequences_.begin(), sequences_.end(), nullptr), sequences_.end());
  if (done_requests == 0) return;
  for (auto it = requests_.begin(); it != requests_.end();) {
    if (it->second->live_choices < 0) {
      requests_.erase(it++);
    } else {
      ++it;
    }
  }
  requests_finished_ += done_requests;
  std::lock_guard<std::mutex> lock(mutex_);
  live_requests_ -= done_requests;
}

void Engine::CountExpertLoad() {
  const std::vector<int32_t>& active = model_.last_step_active_experts();
  for (int32_t experts : active) moe_active_experts_ += experts;
  moe_layer_steps_ += static_cast<int64_t>(active.size());
  const std::vector<int32_t>& tokens = model_.last_step_expert_tokens();
  if (tokens.size() != expert_tokens_.size()) return;  // not asked for, or not recorded
  for (size_t i = 0; i < tokens.size(); ++i) expert_tokens_[i] += tokens[i];
}

void Engine::PublishStats() {
  EngineStats stats;
  // Requests by their choices, running first: a request with a running choice is running.
  // The epoch marks a request counted in this call without clearing marks between calls.
  const uint64_t epoch = ++stats_epoch_;
  int32_t running_requests = 0, waiting_requests = 0;
  for (Sequence* sequence : running_) {
    stats.running += 1 + sequence->pending_forks;
    if (sequence->request->stats_epoch == epoch) continue;
    sequence->request->stats_epoch = epoch;
    ++running_requests;
  }
  for (Sequence* sequence : waiting_) {
    stats.waiting += 1 + sequence->pending_forks;
    if (sequence->request->stats_epoch == epoch) continue;
    sequence->request->stats_epoch = epoch;
    ++waiting_requests;
  }
  stats.running_requests = running_requests;
  stats.waiting_requests = waiting_requests;
  stats.kv_block_size = pool_.block_size();
  stats.kv_blocks_total = pool_.num_blocks();
  stats.kv_blocks_used = pool_.num_used_blocks();
  stats.kv_usage = stats.kv_blocks_total > 0
                       ? static_cast<double>(stats.kv_blocks_used) / stats.kv_blocks_total
                       : 0.0;
  stats.prefix_queried_tokens = pool_.stats().prefix_queried_tokens;
  stats.prefix_hit_tokens = pool_.stats().prefix_hit_tokens;
  stats.prompt_tokens_total = prompt_tokens_;
  stats.generation_tokens_total = generation_tokens_;
  stats.preemptions_total = preemptions_;
  stats.steps_total = steps_;
  stats.requests_finished_total = requests_finished_;
  stats.decode_steps_total = decode_steps_;
  stats.decode_sequences_total = decode_sequences_;
  stats.decode_seconds_total = decode_seconds_;
  stats.decode_bytes_total = decode_bytes_;
  stats.step_seconds_total = step_seconds_;
  stats.model_seconds_total = model_seconds_;
  stats.sample_seconds_total = sample_seconds_;
  stats.moe_layers = static_cast<int32_t>(model_.moe_routers().size());
  stats.num_experts = model_.moe_num_experts();
  stats.expert_tokens_total = expert_tokens_;
  stats.moe_active_experts_total = moe_active_experts_;
  stats.moe_layer_steps_total = moe_layer_steps_;
  std::lock_guard<std::mutex> lock(mutex_);
  stats_ = stats;
}

}  // namespace llmrt::engine
