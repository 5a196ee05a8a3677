// `llmrt render PLAN MESSAGES.json [--add-generation-prompt]`: prints the prompt the plan's chat
// template makes from an OpenAI-style messages file.
#ifndef LLMRT_TOOLS_LLMRT_RENDER_H_
#define LLMRT_TOOLS_LLMRT_RENDER_H_

namespace llmrt {

// argv[1] is "render"; returns the process exit status (0, 1 error, 2 usage error).
int Render(int argc, char** argv);

}  // namespace llmrt

#endif  // LLMRT_TOOLS_LLMRT_RENDER_H_
