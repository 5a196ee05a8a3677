/* llmrt.h: the C API of the llmrt runtime (plain C99; also compiles as C++).
 *
 * Objects:
 *   llmrt_plan_t     a compiled plan (llmc compile), mapped read-only: weights, config, tokenizer,
 *                    chat template. Immutable; one plan serves any number of sessions and engines
 *                    on any threads, and the weights are mapped once however many there are.
 *   llmrt_session_t  one conversation: its own KV cache, the tokens it holds, a backend. Append
 *                    text or tokens, generate with a per-token callback, reset, save and restore.
 *   llmrt_engine_t   in-process continuous batching: many requests share each step of one
 *                    backend, with a paged KV cache and prefix caching (the serving engine of
 *                    `llmrt serve` without HTTP).
 *   llmrt_status_t   an error: a code and a message. Every function that can fail returns one;
 *                    NULL means success. There is no global error state.
 *
 * Conventions: names are llmrt_<noun>_<verb>; handles are opaque; each create/open has a
 * free/close; results go to out_ parameters, which are written only on success. Strings passed
 * in are UTF-8 with an explicit length (a NUL inside is data) unless the parameter says it is
 * NUL-terminated. Memory the library allocates for the caller is freed with llmrt_free() unless
 * the function says otherwise. Option structs start with `struct_size` and have an _init()
 * that fills the defaults: always call it, so a program built against this header keeps working
 * with a library that has grown the struct. Each _init(p) is a macro passing the program's own
 * sizeof(*p) to the exported _init_sized(p, size), which writes only those bytes (an older,
 * shorter struct is not overrun) and zeros bytes past the library's struct (a newer, longer
 * one); struct_size then records the program's size. The functions of the _init names are
 * exported too, for programs built against ABI 1's header, whose structs are these.
 *
 * Thread-safety, unless a function says otherwise: plan functions may be called from any number
 * of threads at once; a session is used by one thread at a time (different sessions on different
 * threads run in parallel); engine functions may be called from any thread except where noted.
 *
 * Lifetimes: sessions and engines keep their plan alive, so llmrt_plan_close() may be called
 * while they exist; the mapping goes away with the last of them.
 */
#ifndef LLMRT_LLMRT_H_
#define LLMRT_LLMRT_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define LLMRT_API __declspec(dllexport)
#elif defined(__GNUC__)
#define LLMRT_API __attribute__((visibility("default")))
#else
#define LLMRT_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version: bumped when a function's signature or meaning, or the layout of a struct's
 * existing fields, changes. Adding functions, or fields at the end of a struct with
 * struct_size, does not bump it. A program compares llmrt_abi_version() with the value it was
 * compiled against and refuses to run when they differ. */
#define LLMRT_ABI_VERSION 1
/* Thread-safe; never fails. */
LLMRT_API uint32_t llmrt_abi_version(void);

/* ---------------------------------------------------------------------------------------- */
/* Status                                                                                   */

/* The codes of absl::Status (and gRPC), so they map one to one. */
typedef enum llmrt_status_code {
  LLMRT_STATUS_OK = 0,
  LLMRT_STATUS_CANCELLED = 1,
  LLMRT_STATUS_UNKNOWN = 2,
  LLMRT_STATUS_INVALID_ARGUMENT = 3,
  LLMRT_STATUS_DEADLINE_EXCEEDED = 4,
  LLMRT_STATUS_NOT_FOUND = 5,
  LLMRT_STATUS_ALREADY_EXISTS = 6,
  LLMRT_STATUS_PERMISSION_DENIED = 7,
  LLMRT_STATUS_RESOURCE_EXHAUSTED = 8,
  LLMRT_STATUS_FAILED_PRECONDITION = 9,
  LLMRT_STATUS_ABORTED = 10,
  LLMRT_STATUS_OUT_OF_RANGE = 11,
  LLMRT_STATUS_UNIMPLEMENTED = 12,
  LLMRT_STATUS_INTERNAL = 13,
  LLMRT_STATUS_UNAVAILABLE = 14,
  LLMRT_STATUS_DATA_LOSS = 15
} llmrt_status_code;

/* An error. NULL is success. Owned by the caller: free it with llmrt_status_free(). */
typedef struct llmrt_status llmrt_status_t;

/* LLMRT_STATUS_OK for NULL. Thread-safe. */
LLMRT_API llmrt_status_code llmrt_status_get_code(const llmrt_status_t* status);
/* NUL-terminated message naming the file, field or handle, what was expected and what was
 * found; "" for NULL. Owned by the status: valid until llmrt_status_free(). */
LLMRT_API const char* llmrt_status_get_message(const llmrt_status_t* status);
/* A static name such as "INVALID_ARGUMENT". */
LLMRT_API const char* llmrt_status_code_name(llmrt_status_code code);
/* Frees a status; NULL is allowed. */
LLMRT_API void llmrt_status_free(llmrt_status_t* status);

/* Frees memory the library returned (token arrays, strings); NULL is allowed. */
LLMRT_API void llmrt_free(void* memory);

/* ---------------------------------------------------------------------------------------- */
/* Plan                                                                                     */

typedef struct llmrt_plan llmrt_plan_t;

typedef struct llmrt_plan_options {
  uint32_t struct_size;
  /* Nonzero: hash every weight blob while opening (reads the whole file). Default 0. */
  int32_t verify_checksums;
} llmrt_plan_options;
LLMRT_API void(llmrt_plan_options_init)(llmrt_plan_options* options);
LLMRT_API void llmrt_plan_options_init_sized(llmrt_plan_options* options, size_t size);
#define llmrt_plan_options_init(options) \
  llmrt_plan_options_init_sized((options), sizeof(*(options)))

/* Maps and validates the plan at `path` (NUL-terminated). `options` may be NULL (defaults).
 * On success *out_plan is a new plan; close it with llmrt_plan_close(). Errors: NOT_FOUND,
 * INVALID_ARGUMENT / DATA_LOSS for a file that is not a valid plan, FAILED_PRECONDITION for a
 * plan of another major version. A plan whose tokenizer this runtime cannot run still opens
 * (token ids work); every text function then returns FAILED_PRECONDITION saying why. */
LLMRT_API llmrt_status_t* llmrt_plan_open(const char* path, const llmrt_plan_options* options,
                                          llmrt_plan_t** out_plan);
/* Drops the caller's reference; sessions and engines made from the plan keep working. NULL is
 * allowed. Not to be called while another thread uses the same handle. */
LLMRT_API void llmrt_plan_close(llmrt_plan_t* plan);

/* What a plan says about its model. Strings point into the plan and live as long as it. */
typedef struct llmrt_model_config {
  uint32_t struct_size;
  const char* architecture; /* e.g. "LlamaForCausalLM" (NUL-terminated) */
  int64_t vocab_size;
  int64_t hidden_size;
  int64_t num_layers;
  int64_t num_attention_heads;
  int64_t num_kv_heads;
  int64_t head_dim;
  int64_t max_position_embeddings; /* 0: not given */
  int32_t bos_token_id;            /* -1: none */
  int32_t eos_token_id;            /* the tokenizer's; -1: none */
  int32_t has_chat_template;       /* nonzero when the plan carries one */
  uint64_t plan_checksum;          /* xxh64 of the plan's meta: identifies the compiled plan */
} llmrt_model_config;
LLMRT_API void(llmrt_model_config_init)(llmrt_model_config* config);
LLMRT_API void llmrt_model_config_init_sized(llmrt_model_config* config, size_t size);
#define llmrt_model_config_init(config) llmrt_model_config_init_sized((config), sizeof(*(config)))

/* Fills *out_config (set out_config->struct_size first, llmrt_model_config_init does). */
LLMRT_API llmrt_status_t* llmrt_plan_get_config(const llmrt_plan_t* plan,
                                                llmrt_model_config* out_config);

/* The plan's chat template source (Jinja), not NUL-terminated: *out_size bytes at *out_text,
 * owned by the plan. FAILED_PRECONDITION when the plan has none. */
LLMRT_API llmrt_status_t* llmrt_plan_get_chat_template(const llmrt_plan_t* plan,
                                                       const char** out_text, size_t* out_size);

/* ---------------------------------------------------------------------------------------- */
/* Tokenizer and chat template helpers (thread-safe: they only read the plan)               */

/* Encodes `text` like HF tokenizers' encode(text, add_special_tokens). On success
 * *out_tokens is a new array of *out_count ids (NULL when the count is 0): llmrt_free() it. */
LLMRT_API llmrt_status_t* llmrt_plan_tokenize(const llmrt_plan_t* plan, const char* text,
                                              size_t text_size, int32_t add_special_tokens,
                                              int32_t** out_tokens, size_t* out_count);
/* Decodes like HF decode(ids, skip_special_tokens). *out_text is a new NUL-terminated string of
 * *out_size bytes (the size excludes the NUL): llmrt_free() it. INVALID_ARGUMENT for an id
 * outside the vocabulary. */
LLMRT_API llmrt_status_t* llmrt_plan_detokenize(const llmrt_plan_t* plan, const int32_t* tokens,
                                                size_t count, int32_t skip_special_tokens,
                                                char** out_text, size_t* out_size);

/* One chat message; role and content are NUL-terminated UTF-8. */
typedef struct llmrt_chat_message {
  const char* role; /* "system", "user", "assistant", ... */
  const char* content;
} llmrt_chat_message;

/* Renders a conversation through the plan's chat template the way transformers'
 * apply_chat_template(messages, add_generation_prompt=...) does (bos/eos tokens from the plan).
 * *out_text is a new NUL-terminated string of *out_size bytes: llmrt_free() it. The rendered
 * text already holds the special tokens the template writes: append it to a session with
 * add_special_tokens = 0. FAILED_PRECONDITION when the plan has no template; the template's own
 * error (e.g. raise_exception) otherwise; UNIMPLEMENTED, for every plan, from a libllmrt built
 * without the chat-template interpreter (CMake option LLMRT_WITH_TEMPLATES=OFF). */
LLMRT_API llmrt_status_t* llmrt_plan_render_chat(const llmrt_plan_t* plan,
                                                 const llmrt_chat_message* messages,
                                                 size_t num_messages, int32_t add_generation_prompt,
                                                 char** out_text, size_t* out_size);
/* llmrt_plan_render_chat through the plan's chat template named `template_name`: "default", or
 * one of the named templates transformers knows (tokenizer_config.json's list,
 * additional_chat_templates/NAME.jinja), e.g. "tool_use". NULL or "" is the default template.
 * NOT_FOUND, naming the plan's templates, when it has no such template. */
LLMRT_API llmrt_status_t* llmrt_plan_render_chat_with_template(
    const llmrt_plan_t* plan, const char* template_name, const llmrt_chat_message* messages,
    size_t num_messages, int32_t add_generation_prompt, char** out_text, size_t* out_size);

/* ---------------------------------------------------------------------------------------- */
/* Sampling                                                                                 */

/* How to pick tokens and when to stop. The order of the transformations is vLLM's (see
 * runtime/sampling/sampler.h): bias/penalties, temperature, top-k, top-p, min-p, one draw. */
typedef struct llmrt_sampler_params {
  uint32_t struct_size;
  float temperature;        /* 0: greedy (argmax, lowest id on ties). Default 1 */
  int32_t top_k;            /* 0 or -1: off. Default 0 */
  float top_p;              /* 1: off. Default 1 */
  float min_p;              /* 0: off. Default 0 */
  float repetition_penalty; /* 1: off; > 0. Default 1 */
  float presence_penalty;   /* [-2, 2]. Default 0 */
  float frequency_penalty;  /* [-2, 2]. Default 0 */
  uint64_t seed;            /* the sampler's random stream. Default 0 */
  int64_t max_tokens; /* most tokens to generate; -1: until the context is full. Default 256 */
  int32_t ignore_eos; /* nonzero: do not stop at end-of-sequence tokens. Default 0 */
} llmrt_sampler_params;

/* Defaults as listed above (OpenAI's: temperature 1, no truncation). */
LLMRT_API void(llmrt_sampler_params_init)(llmrt_sampler_params* params);
LLMRT_API void llmrt_sampler_params_init_sized(llmrt_sampler_params* params, size_t size);
#define llmrt_sampler_params_init(params) \
  llmrt_sampler_params_init_sized((params), sizeof(*(params)))
/* The defaults above overridden by the plan's generation_config.json (greedy unless it sets
 * do_sample, then its temperature, top_k, top_p; its repetition_penalty either way), as `llmrt
 * run`, `llmrt chat` and `llmrt serve` use. */
LLMRT_API void(llmrt_sampler_params_init_from_plan)(const llmrt_plan_t* plan,
                                                    llmrt_sampler_params* params);
LLMRT_API void llmrt_sampler_params_init_from_plan_sized(const llmrt_plan_t* plan,
                                                         llmrt_sampler_params* params, size_t size);
#define llmrt_sampler_params_init_from_plan(plan, params) \
  llmrt_sampler_params_init_from_plan_sized((plan), (params), sizeof(*(params)))

/* ---------------------------------------------------------------------------------------- */
/* Session                                                                                  */

typedef struct llmrt_session llmrt_session_t;

typedef struct llmrt_session_options {
  uint32_t struct_size;
  /* Tokens the session holds at most (prompt + generated), which sizes its KV cache;
   * 0: the plan's max_position_embeddings capped at 8192 (the plan's recorded budget when
   * compiled with --max-memory); more than the plan's context is capped to it
   * (llmrt_session_max_tokens says what was granted). Default 0 */
  int64_t context_tokens;
  /* Worker threads for a step, the calling thread included; 0: one per CPU the process may
   * run on (its affinity mask), as in the llmrt tools. An app that keeps cores for its own
   * work sets a number; at most 1024. Default 0 */
  int32_t num_threads;
  /* Most tokens one step processes (a longer prompt is prefilled in chunks). Default 256 */
  int32_t max_tokens_per_step;
} llmrt_session_options;
LLMRT_API void(llmrt_session_options_init)(llmrt_session_options* options);
LLMRT_API void llmrt_session_options_init_sized(llmrt_session_options* options, size_t size);
#define llmrt_session_options_init(options) \
  llmrt_session_options_init_sized((options), sizeof(*(options)))

/* A new, empty session over `plan` (options NULL: defaults). It allocates its own KV cache and
 * activation memory; the weights are the plan's mapping. Free with llmrt_session_free().
 * RESOURCE_EXHAUSTED (saying both sizes) when the plan was compiled with `llmc compile
 * --max-memory` for more memory than this machine has available; likewise for engines. */
LLMRT_API llmrt_status_t* llmrt_session_create(llmrt_plan_t* plan,
                                               const llmrt_session_options* options,
                                               llmrt_session_t** out_session);
/* NULL is allowed. */
LLMRT_API void llmrt_session_free(llmrt_session_t* session);

/* Encodes `text` (add_special_tokens as in llmrt_plan_tokenize) and appends it: the tokens are
 * run through the model now (prefill). OUT_OF_RANGE when the session's context would overflow;
 * then nothing is appended. */
LLMRT_API llmrt_status_t* llmrt_session_append_text(llmrt_session_t* session, const char* text,
                                                    size_t text_size, int32_t add_special_tokens);
/* Appends token ids (each in [0, vocab_size)); as llmrt_session_append_text otherwise. */
LLMRT_API llmrt_status_t* llmrt_session_append_tokens(llmrt_session_t* session,
                                                      const int32_t* tokens, size_t count);

/* Called once per generated token, on the generating thread, with the token id and the text
 * that became final with it (whole UTF-8 characters, special tokens left out, continuing the
 * session's text as detokenize(all tokens, skip_special_tokens = 1) would; may be empty, e.g.
 * while a character is split across tokens; not NUL-terminated). Return 0 to go on, nonzero to stop
 * after this token. The text pointer is valid only during the call. */
typedef int32_t (*llmrt_token_callback)(void* user_data, int32_t token, const char* text,
                                        size_t text_size);

typedef enum llmrt_finish_reason {
  LLMRT_FINISH_NONE = 0,
  LLMRT_FINISH_STOP = 1,      /* an end-of-sequence token (not reported, not kept) */
  LLMRT_FINISH_LENGTH = 2,    /* max_tokens, or the session's context is full */
  LLMRT_FINISH_CANCELLED = 3, /* the callback returned nonzero */
  LLMRT_FINISH_ERROR = 4      /* engine only: the step failed */
} llmrt_finish_reason;

typedef struct llmrt_generate_result {
  uint32_t struct_size;
  int64_t num_tokens; /* generated and kept in the session */
  llmrt_finish_reason finish_reason;
} llmrt_generate_result;
LLMRT_API void(llmrt_generate_result_init)(llmrt_generate_result* result);
LLMRT_API void llmrt_generate_result_init_sized(llmrt_generate_result* result, size_t size);
#define llmrt_generate_result_init(result) \
  llmrt_generate_result_init_sized((result), sizeof(*(result)))

/* Generates after what the session holds (append a prompt first). Each kept token becomes part
 * of the session, so the next append or generate continues the conversation. The final text
 * piece (characters held back until the end) comes through the callback with token -1.
 * `params` NULL: llmrt_sampler_params_init_from_plan; `callback` may be NULL; `out_result` may
 * be NULL. FAILED_PRECONDITION when the session is empty; INVALID_ARGUMENT for a parameter out
 * of range (named). */
LLMRT_API llmrt_status_t* llmrt_session_generate(llmrt_session_t* session,
                                                 const llmrt_sampler_params* params,
                                                 llmrt_token_callback callback, void* user_data,
                                                 llmrt_generate_result* out_result);

/* Forgets every token; the KV cache is free again. */
LLMRT_API void llmrt_session_reset(llmrt_session_t* session);
/* Tokens the session holds (appended and generated). */
LLMRT_API int64_t llmrt_session_num_tokens(const llmrt_session_t* session);
/* The most tokens the session can hold. */
LLMRT_API int64_t llmrt_session_max_tokens(const llmrt_session_t* session);
/* Copies the session's tokens: *out_tokens is a new array of *out_count ids (NULL when 0):
 * llmrt_free() it. */
LLMRT_API llmrt_status_t* llmrt_session_get_tokens(const llmrt_session_t* session,
                                                   int32_t** out_tokens, size_t* out_count);

/* Writes the session's state (tokens and KV cache; format in runtime/capi/session_file.h) to
 * `path` (NUL-terminated) through a temporary file renamed into place, so a failure never
 * leaves a partial file. */
LLMRT_API llmrt_status_t* llmrt_session_save(const llmrt_session_t* session, const char* path);
/* Replaces the session's state with the one saved at `path`. FAILED_PRECONDITION when the file
 * was saved from a different plan (the message gives both plan checksums) or holds more tokens
 * than this session's context; DATA_LOSS for a truncated or corrupt file. On error the session
 * is unchanged. */
LLMRT_API llmrt_status_t* llmrt_session_restore(llmrt_session_t* session, const char* path);

/* ---------------------------------------------------------------------------------------- */
/* Engine: continuous batching of many requests                                             */

typedef struct llmrt_engine llmrt_engine_t;

typedef struct llmrt_engine_options {
  uint32_t struct_size;
  /* KV cache size in tokens over all requests; 0: the plan's max_position_embeddings capped at
   * 8192. Default 0 */
  int64_t kv_cache_tokens;
  /* Requests running at once; 0: 256. Default 0 */
  int32_t max_seqs;
  int32_t num_threads;         /* as in llmrt_session_options. Default 0 */
  int32_t max_tokens_per_step; /* tokens of one step over all requests. Default 256 */
} llmrt_engine_options;
LLMRT_API void(llmrt_engine_options_init)(llmrt_engine_options* options);
LLMRT_API void llmrt_engine_options_init_sized(llmrt_engine_options* options, size_t size);
#define llmrt_engine_options_init(options) \
  llmrt_engine_options_init_sized((options), sizeof(*(options)))

typedef uint64_t llmrt_request_id;

/* One request's news from one step. Pointers are valid only during the callback. */
typedef struct llmrt_engine_output {
  llmrt_request_id request_id;
  const int32_t* tokens; /* tokens kept this step (end-of-sequence tokens are not) */
  size_t num_tokens;
  const char* text; /* their text, whole UTF-8 characters; not NUL-terminated */
  size_t text_size;
  int32_t finished; /* nonzero exactly once per request, on its last output */
  llmrt_finish_reason finish_reason;
  const char* error_message; /* NUL-terminated; "" unless finish_reason is LLMRT_FINISH_ERROR */
} llmrt_engine_output;

/* Called on the thread that runs the engine's steps, once per step in which the request
 * produced tokens or finished. Return nonzero to cancel the request (it then finishes with
 * LLMRT_FINISH_CANCELLED at the next step). It must not call llmrt_engine_step(),
 * llmrt_engine_run_until_idle(), llmrt_engine_stop() or llmrt_engine_free(); it may submit and
 * cancel requests. */
typedef int32_t (*llmrt_engine_callback)(void* user_data, const llmrt_engine_output* output);

/* An engine over `plan` with its own KV cache and backend (options NULL: defaults). Free with
 * llmrt_engine_free(). */
LLMRT_API llmrt_status_t* llmrt_engine_create(llmrt_plan_t* plan,
                                              const llmrt_engine_options* options,
                                              llmrt_engine_t** out_engine);
/* Stops the engine; requests still running get a LLMRT_FINISH_CANCELLED output first. NULL is
 * allowed. Not from a callback. */
LLMRT_API void llmrt_engine_free(llmrt_engine_t* engine);

/* Queues a request: `prompt` tokens (non-empty, copied), sampling and stop settings (`params`
 * NULL: llmrt_sampler_params_init_from_plan), and the callback that receives its outputs
 * (required). Requests with a common prompt prefix share its KV blocks. *out_request_id may be
 * NULL. Any thread. INVALID_ARGUMENT naming the field; OUT_OF_RANGE for a prompt longer than
 * the context. */
LLMRT_API llmrt_status_t* llmrt_engine_submit(llmrt_engine_t* engine, const int32_t* prompt,
                                              size_t prompt_size,
                                              const llmrt_sampler_params* params,
                                              llmrt_engine_callback callback, void* user_data,
                                              llmrt_request_id* out_request_id);
/* Cancels a request (unknown or finished ids are ignored). Any thread, callbacks included. */
LLMRT_API void llmrt_engine_cancel(llmrt_engine_t* engine, llmrt_request_id request_id);

/* Drive the engine from the calling thread: one step (*out_did_work = 0 when there was nothing
 * to do; may be NULL), or steps until no request is left. Not while started, and from one
 * thread at a time. */
LLMRT_API llmrt_status_t* llmrt_engine_step(llmrt_engine_t* engine, int32_t* out_did_work);
LLMRT_API llmrt_status_t* llmrt_engine_run_until_idle(llmrt_engine_t* engine);
/* Or let a background thread run steps while there is work; stop finishes the current step and
 * joins it. Any thread but a callback. */
LLMRT_API void llmrt_engine_start(llmrt_engine_t* engine);
LLMRT_API void llmrt_engine_stop(llmrt_engine_t* engine);
/* Nonzero while any request is queued or running. Any thread. */
LLMRT_API int32_t llmrt_engine_has_work(const llmrt_engine_t* engine);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LLMRT_LLMRT_H_ */
