// What the C API's opaque handles are, and the helpers every entry point of runtime/capi uses to
// turn absl::Status into llmrt_status_t and to keep C++ exceptions from crossing into C.
//
// Ownership: a plan handle, every session and every engine hold a shared_ptr to one PlanState,
// so the mapping lives until the last of them is freed. PlanState is immutable after creation
// and therefore safe to share between threads.
#ifndef LLMRT_RUNTIME_CAPI_CAPI_INTERNAL_H_
#define LLMRT_RUNTIME_CAPI_CAPI_INTERNAL_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "llmrt/llmrt.h"
#include "runtime/engine/model.h"
#include "runtime/plan/plan_reader.h"
#include "runtime/sampling/sampler.h"
#include "runtime/tokenizer/tokenizer.h"
// LLMRT_WITH_TEMPLATES (CMake option of the same name, defined for runtime/capi only): the
// chat-template interpreter is part of libllmrt.
#ifdef LLMRT_WITH_TEMPLATES
#include "runtime/template/plan_chat_template.h"
#endif

namespace llmrt::capi {

struct PlanState {
  std::unique_ptr<plan::Plan> plan;
  // Null when the plan's tokenizer cannot run here (tokenizer_status says why): the plan still
  // runs on token ids, and every text function returns that status.
  std::unique_ptr<Tokenizer> tokenizer;
  absl::Status tokenizer_status;
#ifdef LLMRT_WITH_TEMPLATES
  std::optional<jinja::PlanChatTemplate> chat_template;
  absl::Status chat_template_status;  // why chat_template is unset
#endif
  // generation_config's EOS ids, else the tokenizer's EOS, else none.
  std::vector<int32_t> eos_token_ids;

  const plan::PlanMeta& meta() const { return plan->meta(); }
  // The plan's identity: xxh64 of its meta, as recorded in its header.
  uint64_t checksum() const { return plan->header().meta_checksum; }
  // A Model over this plan's mapping. The Model copies the meta; the weights stay in the mapping,
  // which `owner` (this state) must keep alive as long as the Model.
  absl::StatusOr<std::unique_ptr<engine::Model>> NewModel(
      const engine::ModelOptions& options) const;
};

// Returns null for OK, else a new status the caller frees with llmrt_status_free.
llmrt_status_t* ToCStatus(const absl::Status& status);

// Runs `body(function)` (returning absl::Status; `function` is the C entry point's name for its
// messages, since __func__ inside a lambda is "operator()") and converts the result; a C++
// exception becomes RESOURCE_EXHAUSTED (std::bad_alloc) or INTERNAL, so none escapes into C.
template <typename Body>
llmrt_status_t* Guard(const char* function, Body&& body) {
  try {
    return ToCStatus(body(function));
  } catch (const std::bad_alloc&) {
    return ToCStatus(absl::ResourceExhaustedError(std::string(function) + ": out of memory"));
  } catch (const std::exception& error) {
    return ToCStatus(
        absl::InternalError(std::string(function) + ": unexpected exception: " + error.what()));
  }
}

// InvalidArgument "FUNCTION: NAME is NULL".
absl::Status NullArgument(const char* function, const char* name);

// The caller's option struct over the defaults `init` fills: only the bytes the caller's
// struct_size covers are taken, so a program built against an older, shorter struct gets the
// defaults for the fields it does not know. `given` may be null (all defaults).
template <typename Struct>
absl::Status MergeStruct(const char* function, const char* name, void (*init)(Struct*),
                         const Struct* given, Struct& merged) {
  init(&merged);
  if (given == nullptr) return absl::OkStatus();
  if (given->struct_size < sizeof(uint32_t)) {
    return absl::InvalidArgumentError(std::string(function) + ": " + name + "->struct_size is " +
                                      std::to_string(given->struct_size) +
                                      "; call the struct's _init() function first");
  }
  std::memcpy(&merged, given, std::min<size_t>(given->struct_size, sizeof(Struct)));
  merged.struct_size = sizeof(Struct);
  return absl::OkStatus();
}

// The _init_sized functions: `defaults` written into the caller's `size` bytes at `out` (no
// more: an older program's shorter struct; zeros past ours: a newer program's longer one),
// struct_size set to `size`. Nothing for a null `out` or a size below struct_size's own.
template <typename Struct>
void WriteSized(const Struct& defaults, Struct* out, size_t size) {
  if (out == nullptr || size < sizeof(uint32_t)) return;
  std::memcpy(out, &defaults, std::min(size, sizeof(Struct)));
  if (size > sizeof(Struct)) {
    std::memset(reinterpret_cast<char*>(out) + sizeof(Struct), 0, size - sizeof(Struct));
  }
  const uint32_t struct_size = static_cast<uint32_t>(size);
  std::memcpy(out, &struct_size, sizeof(struct_size));  // struct_size is the first field
}
template <typename Struct>
void InitSized(void (*init)(Struct*), Struct* out, size_t size) {
  Struct defaults;
  init(&defaults);
  WriteSized(defaults, out, size);
}

// Copies `values` into memory the caller frees with llmrt_free (null for an empty vector).
absl::Status CopyOut(const std::vector<int32_t>& values, int32_t** out_values, size_t* out_count);
absl::Status CopyOut(const std::string& text, char** out_text, size_t* out_size);

// The sampler's parameters from the C struct, reading only the fields the caller's struct_size
// covers (the rest keep llmrt_sampler_params_init's defaults). Checks the ranges against the
// plan's vocabulary.
absl::Status ToSamplingParams(const llmrt_sampler_params& params, int64_t vocab_size,
                              llmrt_sampler_params& merged, sampling::SamplingParams& sampling);

}  // namespace llmrt::capi

struct llmrt_plan {
  std::shared_ptr<const llmrt::capi::PlanState> state;
};

#endif  // LLMRT_RUNTIME_CAPI_CAPI_INTERNAL_H_
