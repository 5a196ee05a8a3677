// Early-return helpers for absl::Status / absl::StatusOr, shared by every module that parses
// user input (importers, tokenizer, templates, server) so each does not grow its own copy.
//
//   LLMRT_RETURN_IF_ERROR(CheckHeader(file));
//   LLMRT_ASSIGN_OR_RETURN(std::string text, ReadFile(path));   // declares `text`
//   LLMRT_ASSIGN_OR_RETURN(config.vocab, ParseInt(json, "vocab_size"));  // assigns
//
// LLMRT_ASSIGN_OR_RETURN expands to several statements (so its left side may declare a
// variable): never use it as the lone body of an unbraced if/else/for.
#ifndef LLMRT_BASE_STATUS_MACROS_H_
#define LLMRT_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define LLMRT_RETURN_IF_ERROR(expression)                                 \
  do {                                                                    \
    if (absl::Status llmrt_status_ = (expression); !llmrt_status_.ok()) { \
      return llmrt_status_;                                               \
    }                                                                     \
  } while (false)

#define LLMRT_STATUS_CONCAT_INNER(a, b) a##b
#define LLMRT_STATUS_CONCAT(a, b) LLMRT_STATUS_CONCAT_INNER(a, b)
#define LLMRT_ASSIGN_OR_RETURN_IMPL(status_or, lhs, expression) \
  auto status_or = (expression);                                \
  if (!status_or.ok()) return status_or.status();               \
  lhs = *std::move(status_or)
#define LLMRT_ASSIGN_OR_RETURN(lhs, expression) \
  LLMRT_ASSIGN_OR_RETURN_IMPL(LLMRT_STATUS_CONCAT(llmrt_status_or_, __LINE__), lhs, expression)

#endif  // LLMRT_BASE_STATUS_MACROS_H_
