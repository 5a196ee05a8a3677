// llmrt_engine_*: the C face of engine::Engine (continuous batching, paged KV, prefix cache).
#include "runtime/engine/engine.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "llmrt/llmrt.h"
#include "runtime/base/status_macros.h"
#include "runtime/capi/capi_internal.h"

struct llmrt_engine {
  std::shared_ptr<const llmrt::capi::PlanState> plan;
  std::unique_ptr<llmrt::engine::Model> model;
  // Declared after `model`, so it is destroyed first (it borrows the model).
  std::unique_ptr<llmrt::engine::Engine> engine;
};

using llmrt::capi::Guard;
using llmrt::capi::NullArgument;

namespace {

llmrt_finish_reason ToCFinishReason(llmrt::engine::FinishReason reason) {
  switch (reason) {
    case llmrt::engine::FinishReason::kNone:
      return LLMRT_FINISH_NONE;
    case llmrt::engine::FinishReason::kStop:
      return LLMRT_FINISH_STOP;
    case llmrt::engine::FinishReason::kLength:
      return LLMRT_FINISH_LENGTH;
    case llmrt::engine::FinishReason::kCancelled:
      return LLMRT_FINISH_CANCELLED;
    case llmrt::engine::FinishReason::kError:
      return LLMRT_FINISH_ERROR;
  }
  return LLMRT_FINISH_ERROR;
}

}  // namespace

extern "C" {

void(llmrt_engine_options_init)(llmrt_engine_options* options) {
  if (options == nullptr) return;
  std::memset(options, 0, sizeof(*options));
  options->struct_size = sizeof(*options);
  options->num_threads = 0;  // one per allowed CPU, as everywhere else
  options->max_tokens_per_step = 256;
}

void llmrt_engine_options_init_sized(llmrt_engine_options* options, size_t size) {
  llmrt::capi::InitSized(&(llmrt_engine_options_init), options, size);
}

llmrt_status_t* llmrt_engine_create(llmrt_plan_t* plan, const llmrt_engine_options* options,
                                    llmrt_engine_t** out_engine) {
  return Guard(__func__, [&](const char* function) -> absl::Status {
    if (plan == nullptr) return NullArgument(function, "plan");
    if (out_engine == nullptr) return NullArgument(function, "out_engine");
    llmrt_engine_options merged;
    LLMRT_RETURN_IF_ERROR(
        llmrt::capi::MergeStruct(function, "options", llmrt_engine_options_init, options, merged));
    if (merged.kv_cache_tokens < 0 || merged.max_seqs < 0 || merged.num_threads < 0 ||
        merged.max_tokens_per_step <= 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: options: kv_cache_tokens %d, max_seqs %d and num_threads %d must be >= 0, "
          "max_tokens_per_step %d > 0",
          function, merged.kv_cache_tokens, merged.max_seqs, merged.num_threads,
          merged.max_tokens_per_step));
    }
    llmrt::engine::ModelOptions model_options;
    model_options.backend = llmrt::engine::BackendChoice::kCpu;
    model_options.num_threads = merged.num_threads;
    model_options.max_tokens_per_step = merged.max_tokens_per_step;
    model_options.kv_cache_tokens = merged.kv_cache_tokens;
    auto engine = std::make_unique<llmrt_engine>();
    engine->plan = plan->state;
    LLMRT_ASSIGN_OR_RETURN(engine->model, plan->state->NewModel(model_options));
    llmrt::engine::EngineOptions engine_options;
    engine_options.max_seqs = merged.max_seqs;
    engine_options.eos_token_ids = plan->state->eos_token_ids;
    engine->engine = std::make_unique<llmrt::engine::Engine>(
        *engine->model, plan->state->tokenizer.get(), engine_options);
    *out_engine = engine.release();
    return absl::OkStatus();
  });
}

void llmrt_engine_free(llmrt_engine_t* engine) { delete engine; }

llmrt_status_t* llmrt_engine_submit(llmrt_engine_t* engine, const int32_t* prompt,
                                    size_t prompt_size, const llmrt_sampler_params* params,
                                    llmrt_engine_callback callback, void* user_data,
                                    llmrt_request_id* out_request_id) {
  return Guard(__func__, [&](const char* function) -> absl::Status {
    if (engine == nullptr) return NullArgument(function, "engine");
    if (prompt == nullptr && prompt_size > 0) return NullArgument(function, "prompt");
    if (callback == nullptr) return NullArgument(function, "callback");
    llmrt_plan_t plan{engine->plan};
    llmrt_sampler_params given;
    if (params == nullptr) {
      llmrt_sampler_params_init_from_plan(&plan, &given);
      params = &given;
    }
    llmrt_sampler_params merged;
    llmrt::engine::GenerationRequest request;
    LLMRT_RETURN_IF_ERROR(llmrt::capi::ToSamplingParams(*params, engine->model->vocab_size(),
                                                        merged, request.sampling));
    request.prompt_ids.assign(prompt, prompt + prompt_size);
    request.seed = merged.seed;
    request.max_tokens = merged.max_tokens;
    request.ignore_eos = merged.ignore_eos != 0;
    llmrt::engine::Engine* runner = engine->engine.get();
    request.on_output = [runner, callback, user_data](const llmrt::engine::RequestOutput& output) {
      std::vector<int32_t> tokens;
      tokens.reserve(output.tokens.size());
      for (const llmrt::engine::TokenOutput& token : output.tokens) tokens.push_back(token.token);
      const std::string error(output.status.message());
      llmrt_engine_output out;
      out.request_id = output.request_id;
      out.tokens = tokens.data();
      out.num_tokens = tokens.size();
      out.text = output.text.data();
      out.text_size = output.text.size();
      out.finished = output.finished ? 1 : 0;
      out.finish_reason = ToCFinishReason(output.finish_reason);
      out.error_message = error.c_str();
      if (callback(user_data, &out) != 0 && !output.finished) runner->Cancel(output.request_id);
    };
    absl::StatusOr<llmrt::engine::RequestId> id = engine->engine->Submit(std::move(request));
    if (!id.ok()) {
      return absl::Status(id.status().code(), absl::StrCat(function, ": ", id.status().message()));
    }
    if (out_request_id != nullptr) *out_request_id = *id;
    return absl::OkStatus();
  });
}

void llmrt_engine_cancel(llmrt_engine_t* engine, llmrt_request_id request_id) {
  if (engine != nullptr) engine->engine->Cancel(request_id);
}

llmrt_status_t* llmrt_engine_step(llmrt_engine_t* engine, int32_t* out_did_work) {
  return Guard(__func__, [&](const char* function) -> absl::Status {
    if (engine == nullptr) return NullArgument(function, "engine");
    LLMRT_ASSIGN_OR_RETURN(const bool did_work, engine->engine->Step());
    if (out_did_work != nullptr) *out_did_work = did_work ? 1 : 0;
    return absl::OkStatus();
  });
}

llmrt_status_t* llmrt_engine_run_until_idle(llmrt_engine_t* engine) {
  return Guard(__func__, [&](const char* function) -> absl::Status {
    if (engine == nullptr) return NullArgument(function, "engine");
    return engine->engine->RunUntilIdle();
  });
}

void llmrt_engine_start(llmrt_engine_t* engine) {
  if (engine != nullptr) engine->engine->Start();
}

void llmrt_engine_stop(llmrt_engine_t* engine) {
  if (engine != nullptr) engine->engine->Stop();
}

int32_t llmrt_engine_has_work(const llmrt_engine_t* engine) {
  return engine != nullptr && engine->engine->HasWork() ? 1 : 0;
}

}  // extern "C"
