/* embed_c: one chat turn through the llmrt C API, the way an app embeds the runtime.
 *
 *   embed_c PLAN [MAX_TOKENS] < message.txt
 *
 * Opens PLAN, reads the user's message from stdin, renders it with the plan's chat template,
 * and streams the reply to stdout with the plan's sampling defaults (those of `llmrt chat`).
 * Ctrl-C stops the reply cleanly: the signal handler only sets a flag, which the per-token
 * callback returns, so generation ends after the current token and everything is freed.
 * Exit status: 0 on success (an interrupted reply included), 1 on an error (one line on stderr).
 */
#include <llmrt/llmrt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile sig_atomic_t interrupted = 0;

static void on_sigint(int signal_number) {
  (void)signal_number;
  interrupted = 1;
}

/* Streams each piece of text as it becomes final; a nonzero return stops generation. */
static int32_t on_token(void* user_data, int32_t token, const char* text, size_t text_size) {
  (void)user_data;
  (void)token;
  fwrite(text, 1, text_size, stdout);
  fflush(stdout);
  return interrupted ? 1 : 0;
}

static int report(llmrt_status_t* status, const char* what) {
  fprintf(stderr, "embed_c: %s: %s\n", what, llmrt_status_get_message(status));
  llmrt_status_free(status);
  return 1;
}

/* Reads all of stdin into a NUL-terminated buffer without its trailing newlines. */
static char* read_stdin(void) {
  size_t size = 0, capacity = 4096;
  char* text = malloc(capacity);
  size_t got;
  if (text == NULL) return NULL;
  while ((got = fread(text + size, 1, capacity - size - 1, stdin)) > 0) {
    size += got;
    if (capacity - size <= 1) {
      char* grown = realloc(text, capacity * 2);
      if (grown == NULL) {
        free(text);
        return NULL;
      }
      text = grown;
      capacity *= 2;
    }
  }
  while (size > 0 && (text[size - 1] == '\n' || text[size - 1] == '\r')) --size;
  text[size] = '\0';
  return text;
}

int main(int argc, char** argv) {
  llmrt_plan_t* plan = NULL;
  llmrt_session_t* session = NULL;
  llmrt_status_t* status;
  llmrt_sampler_params params;
  llmrt_generate_result result;
  llmrt_chat_message message;
  char* prompt = NULL;
  size_t prompt_size = 0;
  char* user_text;
  int exit_code = 1;
  struct sigaction action;

  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: embed_c PLAN [MAX_TOKENS] < message.txt\n");
    return 1;
  }
  if (llmrt_abi_version() != LLMRT_ABI_VERSION) {
    fprintf(stderr, "embed_c: libllmrt has ABI version %u, this program was built for %u\n",
            (unsigned)llmrt_abi_version(), (unsigned)LLMRT_ABI_VERSION);
    return 1;
  }
  memset(&action, 0, sizeof(action));
  action.sa_handler = on_sigint;
  /* A Ctrl-C while stdin is being read must not cut the message short. */
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, NULL);

  user_text = read_stdin();
  if (user_text == NULL) {
    fprintf(stderr, "embed_c: out of memory reading stdin\n");
    return 1;
  }
  if ((status = llmrt_plan_open(argv[1], NULL, &plan)) != NULL) {
    exit_code = report(status, "opening the plan");
    goto done;
  }
  if ((status = llmrt_session_create(plan, NULL, &session)) != NULL) {
    exit_code = report(status, "creating a session");
    goto done;
  }
  message.role = "user";
  message.content = user_text;
  if ((status = llmrt_plan_render_chat(plan, &message, 1, 1, &prompt, &prompt_size)) != NULL) {
    exit_code = report(status, "chat template");
    goto done;
  }
  /* The template wrote the special tokens itself. */
  if ((status = llmrt_session_append_text(session, prompt, prompt_size, 0)) != NULL) {
    exit_code = report(status, "prompt");
    goto done;
  }
  llmrt_sampler_params_init_from_plan(plan, &params);
  if (argc == 3) params.max_tokens = strtoll(argv[2], NULL, 10);
  llmrt_generate_result_init(&result);
  if ((status = llmrt_session_generate(session, &params, on_token, NULL, &result)) != NULL) {
    fputc('\n', stdout);
    exit_code = report(status, "generating");
    goto done;
  }
  fputc('\n', stdout);
  fflush(stdout);
  if (result.finish_reason == LLMRT_FINISH_CANCELLED) {
    fprintf(stderr, "embed_c: interrupted after %lld tokens\n", (long long)result.num_tokens);
  }
  exit_code = 0;

done:
  llmrt_free(prompt);
  llmrt_session_free(session);
  llmrt_plan_close(plan);
  free(user_text);
  return exit_code;
}
