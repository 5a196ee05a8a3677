// The chat page served at GET / (chat_page.html): one self-contained HTML file with its CSS and
// JavaScript inline, compiled into the binary by embed_text.cmake at build time, so a server
// needs no files beside the plan and no web framework. It talks to POST /v1/chat/completions
// (stream: true) like any other client.
#ifndef LLMRT_SERVER_CHAT_PAGE_H_
#define LLMRT_SERVER_CHAT_PAGE_H_

#include <string_view>

namespace llmrt::server {

// The page's bytes; static storage, valid for the life of the process.
std::string_view ChatPageHtml();

}  // namespace llmrt::server

#endif  // LLMRT_SERVER_CHAT_PAGE_H_
