// `llmrt serve PLAN [...]`: the OpenAI-compatible HTTP server (runtime/server) over the
// continuous-batching engine.
#ifndef LLMRT_TOOLS_LLMRT_SERVE_H_
#define LLMRT_TOOLS_LLMRT_SERVE_H_

namespace llmrt {

// argv[1] is "serve"; returns the process exit status (0 also after a SIGTERM drain, 1 an
// error, 2 a usage error).
int Serve(int argc, char** argv);

}  // namespace llmrt

#endif  // LLMRT_TOOLS_LLMRT_SERVE_H_
