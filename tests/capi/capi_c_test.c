/* The C API used from C (compiled as C99, no C++ anywhere in this file): proves llmrt.h is plain
 * C and walks the life cycle a C app goes through. capi_test.cc calls these and checks the
 * results against the C++ path and the stories260K reference. */
#include "tests/capi/capi_c_test.h"

#include <stdio.h>
#include <string.h>

#include "llmrt/llmrt.h"

typedef struct collected_text {
  char* buffer;
  size_t size;
  size_t capacity;
  int32_t tokens;
  int32_t stop_after; /* 0: never */
} collected_text;

static int32_t collect(void* user_data, int32_t token, const char* text, size_t text_size) {
  collected_text* out = (collected_text*)user_data;
  if (out->size + text_size < out->capacity) {
    memcpy(out->buffer + out->size, text, text_size);
    out->size += text_size;
    out->buffer[out->size] = '\0';
  }
  if (token >= 0) ++out->tokens;
  return out->stop_after > 0 && out->tokens >= out->stop_after;
}

static int fail(llmrt_status_t* status, const char* what, char* error, size_t error_size) {
  snprintf(error, error_size, "%s: %s: %s", what,
           llmrt_status_code_name(llmrt_status_get_code(status)), llmrt_status_get_message(status));
  llmrt_status_free(status);
  return 1;
}

int llmrt_c_generate(const char* plan_path, const char* prompt, int64_t max_tokens, char* text,
                     size_t text_capacity, char* error, size_t error_size) {
  llmrt_plan_t* plan = NULL;
  llmrt_session_t* session = NULL;
  llmrt_session_options options;
  llmrt_sampler_params params;
  llmrt_generate_result result;
  collected_text out;
  llmrt_status_t* status;

  if (llmrt_abi_version() != LLMRT_ABI_VERSION) {
    snprintf(error, error_size, "ABI version %u, compiled against %u",
             (unsigned)llmrt_abi_version(), (unsigned)LLMRT_ABI_VERSION);
    return 1;
  }
  status = llmrt_plan_open(plan_path, NULL, &plan);
  if (status != NULL) return fail(status, "llmrt_plan_open", error, error_size);
  llmrt_session_options_init(&options);
  options.context_tokens = 512;
  status = llmrt_session_create(plan, &options, &session);
  llmrt_plan_close(plan); /* the session keeps the plan alive */
  if (status != NULL) return fail(status, "llmrt_session_create", error, error_size);

  status = llmrt_session_append_text(session, prompt, strlen(prompt), 1);
  if (status != NULL) {
    llmrt_session_free(session);
    return fail(status, "llmrt_session_append_text", error, error_size);
  }
  llmrt_sampler_params_init(&params);
  params.temperature = 0.0f;
  params.max_tokens = max_tokens;
  llmrt_generate_result_init(&result);
  out.buffer = text;
  out.size = 0;
  out.capacity = text_capacity;
  out.tokens = 0;
  out.stop_after = 0;
  text[0] = '\0';
  status = llmrt_session_generate(session, &params, collect, &out, &result);
  if (status != NULL) {
    llmrt_session_free(session);
    return fail(status, "llmrt_session_generate", error, error_size);
  }
  if (result.num_tokens != out.tokens) {
    snprintf(error, error_size, "result.num_tokens %lld, callback saw %d tokens",
             (long long)result.num_tokens, (int)out.tokens);
    llmrt_session_free(session);
    return 1;
  }
  llmrt_session_free(session);
  return 0;
}

int llmrt_c_null_handles(char* error, size_t error_size) {
  llmrt_plan_t* plan = NULL;
  llmrt_status_t* status = llmrt_plan_open(NULL, NULL, &plan);
  int32_t* tokens = NULL;
  size_t count = 0;
  if (llmrt_status_get_code(status) != LLMRT_STATUS_INVALID_ARGUMENT ||
      strstr(llmrt_status_get_message(status), "path is NULL") == NULL || plan != NULL) {
    snprintf(error, error_size, "llmrt_plan_open(NULL): %s", llmrt_status_get_message(status));
    llmrt_status_free(status);
    return 1;
  }
  llmrt_status_free(status);
  status = llmrt_plan_tokenize(NULL, "x", 1, 1, &tokens, &count);
  if (llmrt_status_get_code(status) != LLMRT_STATUS_INVALID_ARGUMENT) {
    snprintf(error, error_size, "llmrt_plan_tokenize(NULL plan) did not fail");
    llmrt_status_free(status);
    return 1;
  }
  llmrt_status_free(status);
  /* Frees and closes accept NULL. */
  llmrt_plan_close(NULL);
  llmrt_session_free(NULL);
  llmrt_engine_free(NULL);
  llmrt_status_free(NULL);
  llmrt_free(NULL);
  return 0;
}
