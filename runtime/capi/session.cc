// llmrt_session_*: one conversation over an engine::Model of its own.
//
// The session keeps every token it holds in `tokens`; the KV cache holds the first
// session->num_tokens() of them. The last generated token is kept but not run through the model
// until something needs the logits after it (the next generate, or an append, which runs it
// together with the appended tokens): a reply that ends at max_tokens costs no extra step, as in
// `llmrt run`.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "llmrt/llmrt.h"
#include "runtime/base/status_macros.h"
#include "runtime/capi/capi_internal.h"
#include "runtime/capi/session_file.h"

struct llmrt_session {
  std::shared_ptr<const llmrt::capi::PlanState> plan;
  std::unique_ptr<llmrt::engine::Model> model;
  std::unique_ptr<llmrt::engine::Session> session;
  std::vector<int32_t> tokens;  // every token held; the KV cache has the first num_tokens()
  std::vector<float> logits;    // after the last token, when logits_valid
  bool logits_valid = false;

  int64_t num_cached() const { return session->num_tokens(); }

  // Runs `appended` after the held tokens, together with any held token not yet in the cache.
  // Nothing changes on error.
  absl::Status Append(const std::vector<int32_t>& appended) {
    std::vector<int32_t> run(tokens.begin() + num_cached(), tokens.end());
    run.insert(run.end(), appended.begin(), appended.end());
    if (run.empty()) return absl::OkStatus();
    if (static_cast<int64_t>(tokens.size() + appended.size()) > model->max_context()) {
      return absl::OutOfRangeError(
          absl::StrFormat("the session holds %d tokens; %d more exceed its context of %d tokens",
                          tokens.size(), appended.size(), model->max_context()));
    }
    LLMRT_ASSIGN_OR_RETURN(logits, session->Append(run, false));
    tokens.insert(tokens.end(), appended.begin(), appended.end());
    logits_valid = true;
    return absl::OkStatus();
  }
};

using llmrt::capi::Guard;
using llmrt::capi::NullArgument;
using llmrt::capi::PlanState;

namespace {

// Appends `tokens` to an empty, reset session.
absl::Status Refill(llmrt_session& session, const std::vector<int32_t>& tokens) {
  session.session->Reset();
  session.tokens.clear();
  session.logits_valid = false;
  if (tokens.empty()) return absl::OkStatus();
  return session.Append(tokens);
}

}  // namespace

extern "C" {

void(llmrt_session_options_init)(llmrt_session_options* options) {
  if (options == nullptr) return;
  std::memset(options, 0, sizeof(*options));
  options->struct_size = sizeof(*options);
  options->num_threads = 0;  // one per allowed CPU, as everywhere else
  options->max_tokens_per_step = 256;
}

void llmrt_session_options_init_sized(llmrt_session_options* options, size_t size) {
  llmrt::capi::InitSized(&(llmrt_session_options_init), options, size);
}

void(llmrt_generate_result_init)(llmrt_generate_result* result) {
  if (result == nullptr) return;
  std::memset(result, 0, sizeof(*result));
  result->struct_size = sizeof(*result);
}

void llmrt_generate_result_init_sized(llmrt_generate_result* result, size_t size) {
  llmrt::capi::InitSized(&(llmrt_generate_result_init), result, size);
}

llmrt_status_t* llmrt_session_create(llmrt_plan_t* plan, const llmrt_session_options* options,
                                     llmrt_session_t** out_session) {
  return Guard(__func__, [&](const char* function) -> absl::Status {
    if (plan == nullptr) return NullArgument(function, "plan");
    if (out_session == nullptr) return NullArgument(function, "out_session");
    llmrt_session_options merged;
    LLMRT_RETURN_IF_ERROR(
        llmrt::capi::MergeStruct(function, "options", llmrt_session_options_init, options, merged));
    if (merged.context_tokens < 0 || merged.num_threads < 0 || merged.max_tokens_per_step <= 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: options: context_tokens %d and num_threads %d must be >= 0, "
          "max_tokens_per_step %d > 0",
          function, merged.context_tokens, merged.num_threads, merged.max_tokens_per_step));
    }
    llmrt::engine::ModelOptions model_options;
    model_options.backend = llmrt::engine::BackendChoice::kCpu;
    model_options.num_threads = merged.num_threads;
    model_options.max_tokens_per_step = merged.max_tokens_per_step;
    // One conversation: the KV pool is exactly its context; by default the context a plan
    // compiled with --max-memory was sized for (0 otherwise: the Model's default).
    const int64_t context = merged.context_tokens > 0
                                ? merged.context_tokens
                                : plan->state->meta().memory_budget().max_context();
    model_options.kv_cache_tokens = context;
    model_options.max_seq_len = context;
    auto session = std::make_unique<llmrt_session>();
    session->plan = plan->state;
    LLMRT_ASSIGN_OR_RETURN(session->model, plan->state->NewModel(model_options));
    session->session = session->model->NewSession();
    *out_session = session.release();
    return absl::OkStatus();
  });
}

void llmrt_session_free(llmrt_session_t* session) {
  if (session == nullptr) return;
  session->session.reset();  // returns its blocks to the model's pool before the model goes
  delete session;
}

llmrt_status_t* llmrt_session_append_text(llmrt_session_t* session, const char* text,
                                          size_t text_size, int32_t add_special_tokens) {
  return Guard(__func__, [&](const char* function) -> absl::Status {
    if (session == nullptr) return NullArgument(function, "session");
    if (text == nullptr && text_size > 0) return NullArgument(function, "text");
    const PlanState& plan = *session->plan;
    if (plan.tokenizer == nullptr) {
      return absl::FailedPreconditionError(absl::StrFormat("%s: %s: the plan's tokenizer: %s",
                                                           function, plan.plan->path(),
                                                           plan.tokenizer_status.message()));
    }
    const std::vector<int32_t> tokens = plan.tokenizer->Encode(
        std::string_view(text == nullptr ? "" : text, text_size), add_special_tokens != 0);
    absl::Status appended = session->Append(tokens);
    if (!appended.ok()) {
      return absl::Status(appended.code(), absl::StrCat(function, ": ", appended.message()));
    }
    return absl::OkStatus();
  });
}

llmrt_status_t* llmrt_session_append_tokens(llmrt_session_t* session, const int32_t* tokens,
                                            size_t count) {
  return Guard(__func__, [&](const char* function) -> absl::Status {
    if (session == nullptr) return NullArgument(function, "session");
    if (tokens == nullptr && count > 0) return NullArgument(function, "tokens");
    const int64_t vocab_size = session->model->vocab_size();
    for (size_t index = 0; index < count; ++index) {
      if (tokens[index] < 0 || tokens[index] >= vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: token %d at index %d is outside the vocabulary [0, %d)", function,
                            tokens[index], index, vocab_size));
      }
    }
    absl::Status appended = session->Append(std::vector<int32_t>(tokens, tokens + count));
    if (!appended.ok()) {
      return absl::Status(appended.code(), absl::StrCat(function, ": ", appended.message()));
    }
    return absl::OkStatus();
  });
}

llmrt_status_t* llmrt_session_generate(llmrt_session_t* session, const llmrt_sampler_params* params,
                                       llmrt_token_callback callback, void* user_data,
                                       llmrt_generate_result* out_result) {
  return Guard(__func__, [&](const char* function) -> absl::Status {
    if (session == nullptr) return NullArgument(function, "session");
    if (out_result != nullptr && out_result->struct_size < sizeof(uint32_t)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: out_result->struct_size is %d; call llmrt_generate_result_init() first", function,
          out_result->struct_size));
    }
    llmrt_plan_t plan{session->plan};
    llmrt_sampler_params given;
    if (params == nullptr) {
      llmrt_sampler_params_init_from_plan(&plan, &given);
      params = &given;
    }
    llmrt_sampler_params merged;
    llmrt::sampling::SamplingParams sampling;
    LLMRT_RETURN_IF_ERROR(
        llmrt::capi::ToSamplingParams(*params, session->model->vocab_size(), merged, sampling));
    if (session->tokens.empty()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: the session holds no tokens; append a prompt before generating", function));
    }
    const PlanState& state = *session->plan;
    llmrt::sampling::Sampler sampler(sampling);
    sampler.SetPrompt(session->tokens);
    std::unique_ptr<llmrt::StreamDecoder> decoder;
    if (state.tokenizer != nullptr) {
      decoder = std::make_unique<llmrt::StreamDecoder>(*state.tokenizer, session->tokens);
    }
    llmrt_generate_result result;
    llmrt_generate_result_init(&result);
    const int64_t vocab_size = session->model->vocab_size();
    absl::Status status;
    while (true) {
      if (merged.max_tokens >= 0 && result.num_tokens >= merged.max_tokens) {
        result.finish_reason = LLMRT_FINISH_LENGTH;
        break;
      }
      // The session holds at most max_context tokens; the last generated one may still wait
      // for its KV slot (logits_valid false), which the next token's step fills.
      if (static_cast<int64_t>(session->tokens.size()) >= session->model->max_context()) {
        result.finish_reason = LLMRT_FINISH_LENGTH;
        break;
      }
      if (!session->logits_valid) {
        status = session->Append({});
        if (!status.ok()) break;
      }
      const int32_t token =
          sampler.Sample(session->logits.data(), static_cast<int32_t>(vocab_size));
      if (!merged.ignore_eos && std::find(state.eos_token_ids.begin(), state.eos_token_ids.end(),
                                          token) != state.eos_token_ids.end()) {
        result.finish_reason = LLMRT_FINISH_STOP;
        break;
      }
      sampler.Accept(token);
      session->tokens.push_back(token);
      session->logits_valid = false;
      ++result.num_tokens;
      const std::string text = decoder != nullptr ? decoder->Push(token) : std::string();
      if (callback != nullptr && callback(user_data, token, text.data(), text.size()) != 0) {
        result.finish_reason = LLMRT_FINISH_CANCELLED;
        break;
      }
    }
    if (decoder != nullptr && callback != nullptr) {
      const std::string rest = decoder->Finish();
      if (!rest.empty()) callback(user_data, -1, rest.data(), rest.size());
    }
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat(function, ": ", status.message()));
    }
    if (out_result != nullptr) {
      const uint32_t size = std::min<uint32_t>(out_result->struct_size, sizeof(result));
      result.struct_size = out_result->struct_size;
      std::memcpy(out_result, &result, size);
    }
    return absl::OkStatus();
  });
}

void llmrt_session_reset(llmrt_session_t* session) {
  if (session == nullptr) return;
  session->session->Reset();
  session->tokens.clear();
  session->logits_valid = false;
}

int64_t llmrt_session_num_tokens(const llmrt_session_t* session) {
  return session == nullptr ? 0 : static_cast<int64_t>(session->tokens.size());
}

int64_t llmrt_session_max_tokens(const llmrt_session_t* session) {
  return session == nullptr ? 0 : session->model->max_context();
}

llmrt_status_t* llmrt_session_get_tokens(const llmrt_session_t* session, int32_t** out_tokens,
                                         size_t* out_count) {
  return Guard(__func__, [&](const char* function) -> absl::Status {
    if (session == nullptr) return NullArgument(function, "session");
    if (out_tokens == nullptr) return NullArgument(function, "out_tokens");
    if (out_count == nullptr) return NullArgument(function, "out_count");
    return llmrt::capi::CopyOut(session->tokens, out_tokens, out_count);
  });
}

llmrt_status_t* llmrt_session_save(const llmrt_session_t* session, const char* path) {
  return Guard(__func__, [&](const char* function) -> absl::Status {
    if (session == nullptr) return NullArgument(function, "session");
    if (path == nullptr) return NullArgument(function, "path");
    llmrt::capi::SessionState state;
    state.plan_checksum = session->plan->checksum();
    state.tokens = session->tokens;
    return llmrt::capi::WriteSessionFile(path, state);
  });
}

llmrt_status_t* llmrt_session_restore(llmrt_session_t* session, const char* path) {
  return Guard(__func__, [&](const char* function) -> absl::Status {
    if (session == nullptr) return NullArgument(function, "session");
    if (path == nullptr) return NullArgument(function, "path");
    LLMRT_ASSIGN_OR_RETURN(llmrt::capi::SessionState state, llmrt::capi::ReadSessionFile(path));
    const PlanState& plan = *session->plan;
    if (state.plan_checksum != plan.checksum()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: %s was saved from a plan with checksum %016x; this session runs %s (checksum "
          "%016x)",
          function, path, state.plan_checksum, plan.plan->path(), plan.checksum()));
    }
    if (static_cast<int64_t>(state.tokens.size()) > session->model->max_context()) {
      return absl::FailedPreconditionError(
          absl::StrFormat("%s: %s holds %d tokens; this session's context is %d tokens", function,
                          path, state.tokens.size(), session->model->max_context()));
    }
    const int64_t vocab_size = session->model->vocab_size();
    for (size_t index = 0; index < state.tokens.size(); ++index) {
      if (state.tokens[index] < 0 || state.tokens[index] >= vocab_size) {
        return absl::DataLossError(
            absl::StrFormat("%s: %s: token %d at index %d is outside the vocabulary [0, %d)",
                            function, path, state.tokens[index], index, vocab_size));
      }
    }
    // Recompute the KV of the saved tokens (session_file.h says why). On failure the session
    // goes back to what it held.
    std::vector<int32_t> previous = session->tokens;
    absl::Status refilled = Refill(*session, state.tokens);
    if (!refilled.ok()) {
      if (absl::Status back = Refill(*session, previous); !back.ok()) {
        return absl::InternalError(absl::StrFormat(
            "%s: restoring %s failed (%s) and so did going back: %s; the session is empty",
            function, path, refilled.message(), back.message()));
      }
      return absl::Status(refilled.code(),
                          absl::StrFormat("%s: %s: %s", function, path, refilled.message()));
    }
    return absl::OkStatus();
  });
}

}  // extern "C"
