// The C API's status, memory, plan, tokenizer, chat-template and sampler-parameter functions.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "llmrt/llmrt.h"
#include "runtime/base/status_macros.h"
#include "runtime/capi/capi_internal.h"

struct llmrt_status {
  llmrt_status_code code;
  std::string message;
};

namespace llmrt::capi {

llmrt_status_t* ToCStatus(const absl::Status& status) {
  if (status.ok()) return nullptr;
  // absl's codes are gRPC's, and so are ours (llmrt.h lists them in the same order).
  const int code = static_cast<int>(status.code());
  auto* out = new (std::nothrow) llmrt_status;
  if (out == nullptr) return nullptr;  // cannot even report it; never seen with a 40-byte object
  out->code = code >= 1 && code <= 15 ? static_cast<llmrt_status_code>(code) : LLMRT_STATUS_UNKNOWN;
  out->message = std::string(status.message());
  return out;
}

absl::Status NullArgument(const char* function, const char* name) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: %s is NULL", function, name));
}

absl::Status CopyOut(const std::vector<int32_t>& values, int32_t** out_values, size_t* out_count) {
  int32_t* copy = nullptr;
  if (!values.empty()) {
    copy = static_cast<int32_t*>(std::malloc(values.size() * sizeof(int32_t)));
    if (copy == nullptr) return absl::ResourceExhaustedError("out of memory for the token array");
    std::memcpy(copy, values.data(), values.size() * sizeof(int32_t));
  }
  *out_values = copy;
  *out_count = values.size();
  return absl::OkStatus();
}

absl::Status CopyOut(const std::string& text, char** out_text, size_t* out_size) {
  char* copy = static_cast<char*>(std::malloc(text.size() + 1));
  if (copy == nullptr) return absl::ResourceExhaustedError("out of memory for the text");
  std::memcpy(copy, text.data(), text.size());
  copy[text.size()] = '\0';
  *out_text = copy;
  if (out_size != nullptr) *out_size = text.size();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<engine::Model>> PlanState::NewModel(
    const engine::ModelOptions& options) const {
  const plan::Plan* mapped = plan.get();
  absl::StatusOr<std::unique_ptr<engine::Model>> model = engine::Model::Create(
      mapped->meta(), [mapped](int index) { return mapped->blob(index); }, options);
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrFormat("%s: %s", mapped->path(), model.status().message()));
  }
  return model;
}

absl::Status ToSamplingParams(const llmrt_sampler_params& params, int64_t vocab_size,
                              llmrt_sampler_params& merged, sampling::SamplingParams& sampling) {
  LLMRT_RETURN_IF_ERROR(
      MergeStruct("llmrt_sampler_params", "params", llmrt_sampler_params_init, &params, merged));
  sampling.temperature = merged.temperature;
  sampling.top_k = merged.top_k;
  sampling.top_p = merged.top_p;
  sampling.min_p = merged.min_p;
  sampling.repetition_penalty = merged.repetition_penalty;
  sampling.presence_penalty = merged.presence_penalty;
  sampling.frequency_penalty = merged.frequency_penalty;
  sampling.seed = merged.seed;
  if (merged.max_tokens < -1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "llmrt_sampler_params.max_tokens must be >= -1 (-1: until the context is full), got %d",
        merged.max_tokens));
  }
  absl::Status valid = sampling::Sampler::Validate(sampling, vocab_size);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat("llmrt_sampler_params: %s", valid.message()));
  }
  return absl::OkStatus();
}

namespace {

absl::Status NeedTokenizer(const PlanState& state, const char* function) {
  if (state.tokenizer != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat("%s: %s: the plan's tokenizer: %s", function,
                                                       state.plan->path(),
                                                       state.tokenizer_status.message()));
}

}  // namespace

}  // namespace llmrt::capi

using llmrt::capi::CopyOut;
using llmrt::capi::Guard;
using llmrt::capi::NullArgument;
using llmrt::capi::PlanState;

extern "C" {

uint32_t llmrt_abi_version(void) { return LLMRT_ABI_VERSION; }

llmrt_status_code llmrt_status_get_code(const llmrt_status_t* status) {
  return status == nullptr ? LLMRT_STATUS_OK : status->code;
}

const char* llmrt_status_get_message(const llmrt_status_t* status) {
  return status == nullptr ? "" : status->message.c_str();
}

const char* llmrt_status_code_name(llmrt_status_code code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS"};
  const int index = static_cast<int>(code);
  return index >= 0 && index < 16 ? kNames[index] : "UNKNOWN";
}

void llmrt_status_free(llmrt_status_t* status) { delete status; }

void llmrt_free(void* memory) { std::free(memory); }

void(llmrt_plan_options_init)(llmrt_plan_options* options) {
  if (options == nullptr) return;
  std::memset(options, 0, sizeof(*options));
  options->struct_size = sizeof(*options);
}

void llmrt_plan_options_init_sized(llmrt_plan_options* options, size_t size) {
  llmrt::capi::InitSized(&(llmrt_plan_options_init), options, size);
}

llmrt_status_t* llmrt_plan_open(const char* path, const llmrt_plan_options* options,
                                llmrt_plan_t** out_plan) {
  return Guard(__func__, [&](const char* function) -> absl::Status {
    if (path == nullptr) return NullArgument(function, "path");
    if (out_plan == nullptr) return NullArgument(function, "out_plan");
    llmrt_plan_options merged;
    LLMRT_RETURN_IF_ERROR(
        llmrt::capi::MergeStruct(function, "options", llmrt_plan_options_init, options, merged));
    llmrt::plan::PlanOpenOptions open_options;
    open_options.verify_blob_checksums = merged.verify_checksums != 0;
    auto state = std::make_shared<PlanState>();
    LLMRT_ASSIGN_OR_RETURN(state->plan, llmrt::plan::Plan::Open(path, open_options));
    const llmrt::plan::PlanMeta& meta = state->plan->meta();
    absl::StatusOr<std::unique_ptr<llmrt::Tokenizer>> tokenizer =
        llmrt::Tokenizer::Create(meta.tokenizer());
    if (tokenizer.ok()) {
      state->tokenizer = *std::move(tokenizer);
    } else {
      state->tokenizer_status = tokenizer.status();
    }
#ifdef LLMRT_WITH_TEMPLATES
    absl::StatusOr<llmrt::jinja::PlanChatTemplate> chat_template =
        llmrt::jinja::PlanChatTemplate::Create(meta.tokenizer());
    if (chat_template.ok()) {
      state->chat_template.emplace(*std::move(chat_template));
    } else {
      state->chat_template_status = chat_template.status();
    }
#endif
    for (int64_t id : meta.generation().eos_token_ids()) {
      state->eos_token_ids.push_back(static_cast<int32_t>(id));
    }
    if (state->eos_token_ids.empty() && state->tokenizer != nullptr &&
        state->tokenizer->eos_id() >= 0) {
      state->eos_token_ids.push_back(state->tokenizer->eos_id());
    }
    *out_plan = new llmrt_plan{std::move(state)};
    return absl::OkStatus();
  });
}

void llmrt_plan_close(llmrt_plan_t* plan) { delete plan; }

void(llmrt_model_config_init)(llmrt_model_config* config) {
  if (config == nullptr) return;
  std::memset(config, 0, sizeof(*config));
  config->struct_size = sizeof(*config);
  config->architecture = "";
  config->bos_token_id = -1;
  config->eos_token_id = -1;
}

void llmrt_model_config_init_sized(llmrt_model_config* config, size_t size) {
  llmrt::capi::InitSized(&(llmrt_model_config_init), config, size);
}

llmrt_status_t* llmrt_plan_get_config(const llmrt_plan_t* plan, llmrt_model_config* out_config) {
  return Guard(__func__, [&](const char* function) -> absl::Status {
    if (plan == nullptr) return NullArgument(function, "plan");
    if (out_config == nullptr) return NullArgument(function, "out_config");
    const PlanState& state = *plan->state;
    const llmrt::plan::ModelConfig& model = state.meta().config();
    llmrt_model_config config;
    llmrt_model_config_init(&config);
    config.architecture = model.architecture().c_str();
    config.vocab_size = model.vocab_size();
    config.hidden_size = model.hidden_size();
    config.num_layers = model.num_layers();
    config.num_attention_heads = model.num_attention_heads();
    config.num_kv_heads = model.num_kv_heads();
    config.head_dim = model.head_dim();
    config.max_position_embeddings = model.max_position_embeddings();
    if (state.tokenizer != nullptr) {
      config.bos_token_id = state.tokenizer->bos_id();
      config.eos_token_id = state.tokenizer->eos_id();
    }
#ifdef LLMRT_WITH_TEMPLATES
    config.has_chat_template = state.chat_template.has_value() ? 1 : 0;
#else
    // Carried, though this library cannot render it (llmrt_plan_get_chat_template returns it).
    config.has_chat_template = state.meta().tokenizer().chat_template().empty() &&
                                       state.meta().tokenizer().named_chat_templates().empty()
                                   ? 0
                                   : 1;
#endif
    config.plan_checksum = state.checksum();
    // Only the part of the struct the caller knows about.
    llmrt_model_config given;
    LLMRT_RETURN_IF_ERROR(llmrt::capi::MergeStruct(function, "out_config", llmrt_model_config_init,
                                                   out_config, given));
    const size_t size = std::min<size_t>(out_config->struct_size, sizeof(config));
    config.struct_size = out_config->struct_size;
    std::memcpy(out_config, &config, size);
    return absl::OkStatus();
  });
}

llmrt_status_t* llmrt_plan_get_chat_template(const llmrt_plan_t* plan, const char** out_text,
                                             size_t* out_size) {
  return Guard(__func__, [&](const char* function) -> absl::Status {
    if (plan == nullptr) return NullArgument(function, "plan");
    if (out_text == nullptr) return NullArgument(function, "out_text");
    if (out_size == nullptr) return NullArgument(function, "out_size");
    const std::string& source = plan->state->meta().tokenizer().chat_template();
    if (source.empty()) {
      return absl::FailedPreconditionError(
          absl::StrFormat("%s: %s has no chat template (compile it with llmc --chat-template FILE)",
                          function, plan->state->plan->path()));
    }
    *out_text = source.data();
    *out_size = source.size();
    return absl::OkStatus();
  });
}

llmrt_status_t* llmrt_plan_tokenize(const llmrt_plan_t* plan, const char* text, size_t text_size,
                                    int32_t add_special_tokens, int32_t** out_tokens,
                                    size_t* out_count) {
  return Guard(__func__, [&](const char* function) -> absl::Status {
    if (plan == nullptr) return NullArgument(function, "plan");
    if (text == nullptr && text_size > 0) return NullArgument(function, "text");
    if (out_tokens == nullptr) return NullArgument(function, "out_tokens");
    if (out_count == nullptr) return NullArgument(function, "out_count");
    LLMRT_RETURN_IF_ERROR(llmrt::capi::NeedTokenizer(*plan->state, function));
    return CopyOut(
        plan->state->tokenizer->Encode(std::string_view(text == nullptr ? "" : text, text_size),
                                       add_special_tokens != 0),
        out_tokens, out_count);
  });
}

llmrt_status_t* llmrt_plan_detokenize(const llmrt_plan_t* plan, const int32_t* tokens, size_t count,
                                      int32_t skip_special_tokens, char** out_text,
                                      size_t* out_size) {
  return Guard(__func__, [&](const char* function) -> absl::Status {
    if (plan == nullptr) return NullArgument(function, "plan");
    if (tokens == nullptr && count > 0) return NullArgument(function, "tokens");
    if (out_text == nullptr) return NullArgument(function, "out_text");
    LLMRT_RETURN_IF_ERROR(llmrt::capi::NeedTokenizer(*plan->state, function));
    const llmrt::Tokenizer& tokenizer = *plan->state->tokenizer;
    std::vector<int32_t> ids(tokens, tokens + count);
    for (size_t index = 0; index < ids.size(); ++index) {
      if (ids[index] < 0 || ids[index] >= tokenizer.vocab_size()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: token %d at index %d is outside the vocabulary [0, %d)", function,
                            ids[index], index, tokenizer.vocab_size()));
      }
    }
    return CopyOut(tokenizer.Decode(ids, skip_special_tokens != 0), out_text, out_size);
  });
}

namespace {

absl::Status RenderChat(const char* function, const llmrt_plan_t* plan, const char* template_name,
                        const llmrt_chat_message* messages, size_t num_messages,
                        int32_t add_generation_prompt, char** out_text, size_t* out_size) {
  {
    if (plan == nullptr) return NullArgument(function, "plan");
    if (messages == nullptr && num_messages > 0) return NullArgument(function, "messages");
    if (out_text == nullptr) return NullArgument(function, "out_text");
    const PlanState& state = *plan->state;
#ifndef LLMRT_WITH_TEMPLATES
    (void)num_messages;
    (void)add_generation_prompt;
    (void)out_size;
    (void)template_name;
    return absl::UnimplementedError(absl::StrFormat(
        "%s: this libllmrt was built without chat templates (CMake option "
        "LLMRT_WITH_TEMPLATES=OFF); format the prompt yourself (llmrt_plan_get_chat_template "
        "returns the template of %s) or use a libllmrt built with the option on",
        function, state.plan->path()));
#else
    if (!state.chat_template.has_value()) {
      return absl::Status(state.chat_template_status.code(),
                          absl::StrFormat("%s: %s: %s", function, state.plan->path(),
                                          state.chat_template_status.message()));
    }
    std::vector<llmrt::jinja::ChatMessage> conversation;
    for (size_t index = 0; index < num_messages; ++index) {
      if (messages[index].role == nullptr || messages[index].content == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: messages[%d] has a NULL %s", function, index,
                            messages[index].role == nullptr ? "role" : "content"));
      }
      llmrt::jinja::ChatMessage message;
      message.role = messages[index].role;
      message.content = llmrt::jinja::Value::String(messages[index].content);
      conversation.push_back(std::move(message));
    }
    llmrt::jinja::ChatOptions options;
    options.add_generation_prompt = add_generation_prompt != 0;
    absl::StatusOr<std::string> rendered = state.chat_template->Render(
        conversation, options, template_name == nullptr ? "" : template_name);
    if (!rendered.ok()) {
      return absl::Status(rendered.status().code(),
                          absl::StrFormat("%s: %s", function, rendered.status().message()));
    }
    return CopyOut(*rendered, out_text, out_size);
#endif
  }
}

}  // namespace

llmrt_status_t* llmrt_plan_render_chat(const llmrt_plan_t* plan, const llmrt_chat_message* messages,
                                       size_t num_messages, int32_t add_generation_prompt,
                                       char** out_text, size_t* out_size) {
  return Guard(__func__, [&](const char* function) -> absl::Status {
    return RenderChat(function, plan, nullptr, messages, num_messages, add_generation_prompt,
                      out_text, out_size);
  });
}

llmrt_status_t* llmrt_plan_render_chat_with_template(
    const llmrt_plan_t* plan, const char* template_name, const llmrt_chat_message* messages,
    size_t num_messages, int32_t add_generation_prompt, char** out_text, size_t* out_size) {
  return Guard(__func__, [&](const char* function) -> absl::Status {
    return RenderChat(function, plan, template_name, messages, num_messages, add_generation_prompt,
                      out_text, out_size);
  });
}

void(llmrt_sampler_params_init)(llmrt_sampler_params* params) {
  if (params == nullptr) return;
  std::memset(params, 0, sizeof(*params));
  params->struct_size = sizeof(*params);
  params->temperature = 1.0f;
  params->top_p = 1.0f;
  params->repetition_penalty = 1.0f;
  // 256: what `llmrt run` generates by default (-n).
  params->max_tokens = 256;
}

void llmrt_sampler_params_init_sized(llmrt_sampler_params* params, size_t size) {
  llmrt::capi::InitSized(&(llmrt_sampler_params_init), params, size);
}

void(llmrt_sampler_params_init_from_plan)(const llmrt_plan_t* plan, llmrt_sampler_params* params) {
  llmrt_sampler_params_init_from_plan_sized(plan, params, sizeof(*params));
}

void llmrt_sampler_params_init_from_plan_sized(const llmrt_plan_t* plan,
                                               llmrt_sampler_params* params, size_t size) {
  llmrt_sampler_params whole;
  (llmrt_sampler_params_init)(&whole);
  if (plan != nullptr) {
    const llmrt::sampling::SamplingParams defaults =
        llmrt::sampling::SamplingFromGenerationConfig(plan->state->meta().generation());
    whole.temperature = static_cast<float>(defaults.temperature);
    whole.top_k = defaults.top_k;
    whole.top_p = static_cast<float>(defaults.top_p);
    whole.repetition_penalty = static_cast<float>(defaults.repetition_penalty);
  }
  llmrt::capi::WriteSized(whole, params, size);
}

}  // extern "C"
