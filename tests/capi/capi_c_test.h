/* Functions of capi_c_test.c (C) that capi_test.cc (C++) calls. Each returns 0 on success,
 * else 1 with a message in `error`. */
#ifndef LLMRT_TESTS_CAPI_CAPI_C_TEST_H_
#define LLMRT_TESTS_CAPI_CAPI_C_TEST_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Opens `plan_path`, appends `prompt` with BOS, generates `max_tokens` greedily and writes the
 * streamed text (NUL-terminated) to `text`. */
int llmrt_c_generate(const char* plan_path, const char* prompt, int64_t max_tokens, char* text,
                     size_t text_capacity, char* error, size_t error_size);
/* NULL handles and paths give INVALID_ARGUMENT with a message; frees accept NULL. */
int llmrt_c_null_handles(char* error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif /* LLMRT_TESTS_CAPI_CAPI_C_TEST_H_ */
