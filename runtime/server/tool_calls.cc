#include "runtime/server/tool_calls.h"

#include <algorithm>
#include <random>
#include <tuple>
#include <utility>

#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace llmrt::server {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralArgs = "[ARGS]";
using namespace markers;  // NOLINT: the format tables below read as the formats do

struct FormatInfo {
  ToolCallFormat format;
  const char* name;
  std::string_view start;  // "" for kNone
  std::string_view end;    // "": the call runs to the end of the output
};

constexpr FormatInfo kFormats[] = {
    {ToolCallFormat::kNone, "none", "", ""},
    {ToolCallFormat::kHermes, "hermes", "<tool_call>", "</tool_call>"},
    {ToolCallFormat::kLlama3Json, "llama3_json", kPythonTag, ""},
    {ToolCallFormat::kMistral, "mistral", kMistralCalls, ""},
    {ToolCallFormat::kPhi4Mini, "phi4_mini", "<|tool_call|>", "<|/tool_call|>"},
    {ToolCallFormat::kDeepSeekV3, "deepseek_v3", kDeepSeekCallsBegin, kDeepSeekCallsEnd},
    // Harmony's calls are messages with a header (OutputParser::PushHarmony), not marked spans.
    {ToolCallFormat::kHarmony, "harmony", "", ""},
};

const FormatInfo& Info(ToolCallFormat format) {
  for (const FormatInfo& info : kFormats) {
    if (info.format == format) return info;
  }
  return kFormats[0];
}

// Bytes at the end of `text` that could be the beginning of `marker` (held back from output).
size_t PartialMarkerSuffix(std::string_view text, std::string_view marker) {
  if (marker.empty()) return 0;
  for (size_t length = std::min(text.size(), marker.size() - 1); length > 0; --length) {
    if (text.substr(text.size() - length) == marker.substr(0, length)) return length;
  }
  return 0;
}

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view Trim(std::string_view text) {
  while (!text.empty() && IsSpace(text.front())) text.remove_prefix(1);
  while (!text.empty() && IsSpace(text.back())) text.remove_suffix(1);
  return text;
}

std::string_view StripLeading(std::string_view text, bool newlines_only) {
  size_t start = 0;
  while (start < text.size() && (newlines_only ? text[start] == '\n' : IsSpace(text[start]))) {
    ++start;
  }
  return text.substr(start);
}

// The arguments value as compact JSON text: an object as is, a string that holds a JSON object
// (some models quote it) parsed first, absent/null as {}. Anything else is not a call.
std::optional<std::string> ArgumentsText(const Json& call) {
  const Json* arguments = nullptr;
  for (const char* key : {"arguments", "parameters"}) {
    auto found = call.find(key);
    if (found != call.end()) {
      arguments = &*found;
      break;
    }
  }
  if (arguments == nullptr || arguments->is_null()) return std::string("{}");
  Json value = *arguments;
  if (value.is_string()) {
    value = Json::parse(value.get<std::string>(), nullptr, /*allow_exceptions=*/false);
  }
  if (!value.is_object()) return std::nullopt;
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::optional<ToolCall> CallFromJson(const Json& call) {
  if (!call.is_object()) return std::nullopt;
  auto name = call.find("name");
  if (name == call.end() || !name->is_string() || name->get<std::string>().empty()) {
    return std::nullopt;
  }
  std::optional<std::string> arguments = ArgumentsText(call);
  if (!arguments.has_value()) return std::nullopt;
  return ToolCall{"", name->get<std::string>(), *std::move(arguments)};
}

Json ParseJson(std::string_view text) {
  return Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

// One object or an array of objects.
std::optional<std::vector<ToolCall>> CallsFromJsonText(std::string_view text) {
  const Json value = ParseJson(Trim(text));
  std::vector<ToolCall> calls;
  if (value.is_array()) {
    for (const Json& item : value) {
      std::optional<ToolCall> call = CallFromJson(item);
      if (!call.has_value()) return std::nullopt;
      calls.push_back(*std::move(call));
    }
  } else {
    std::optional<ToolCall> call = CallFromJson(value);
    if (!call.has_value()) return std::nullopt;
    calls.push_back(*std::move(call));
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

// Where the JSON object or array starting at text[0] ends (one past its closing bracket), or
// npos. Strings and escapes are skipped so brackets inside them do not count.
size_t JsonValueEnd(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (size_t index = 0; index < text.size(); ++index) {
    const char c = text[index];
    if (in_string) {
      if (c == '\\') {
        ++index;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return index + 1;
    }
  }
  return std::string_view::npos;
}

// Llama 3: objects separated by ';' (and whitespace).
std::optional<std::vector<ToolCall>> ParseLlama3(std::string_view body) {
  std::vector<ToolCall> calls;
  std::string_view rest = Trim(body);
  while (!rest.empty()) {
    if (rest.front() != '{') return std::nullopt;
    const size_t end = JsonValueEnd(rest);
    if (end == std::string_view::npos) return std::nullopt;
    std::optional<ToolCall> call = CallFromJson(ParseJson(rest.substr(0, end)));
    if (!call.has_value()) return std::nullopt;
    calls.push_back(*std::move(call));
    rest = Trim(rest.substr(end));
    if (!rest.empty() && rest.front() == ';') rest = Trim(rest.substr(1));
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

// Mistral: a JSON list (tokenizers v3 - v7) or NAME[ARGS]{...} pieces split by [TOOL_CALLS].
std::optional<std::vector<ToolCall>> ParseMistral(std::string_view body) {
  const std::string_view trimmed = Trim(body);
  if (!trimmed.empty() && (trimmed.front() == '[' || trimmed.front() == '{')) {
    return CallsFromJsonText(trimmed);
  }
  std::vector<ToolCall> calls;
  std::vector<std::string_view> pieces;
  for (size_t start = 0;;) {
    const size_t next = trimmed.find(kMistralCalls, start);
    pieces.push_back(trimmed.substr(start, next == std::string_view::npos ? next : next - start));
    if (next == std::string_view::npos) break;
    start = next + kMistralCalls.size();
  }
  for (std::string_view piece : pieces) {
    piece = Trim(piece);
    if (piece.empty()) continue;
    const size_t args = piece.find(kMistralArgs);
    if (args == std::string_view::npos) return std::nullopt;
    std::string_view name = Trim(piece.substr(0, args));
    // v13 and later may put the call's id between the name and [ARGS].
    const size_t call_id = name.find("[CALL_ID]");
    if (call_id != std::string_view::npos) name = Trim(name.substr(0, call_id));
    const Json arguments = ParseJson(piece.substr(args + kMistralArgs.size()));
    if (name.empty() || !arguments.is_object()) return std::nullopt;
    calls.push_back(
        {"", std::string(name), arguments.dump(-1, ' ', false, Json::error_handler_t::replace)});
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

// DeepSeek: <call begin>function<sep>NAME\n```json\nARGS\n```<call end> (V3, R1) or
// <call begin>NAME<sep>ARGS<call end> (V3.1), repeated.
std::optional<std::vector<ToolCall>> ParseDeepSeek(std::string_view body) {
  std::vector<ToolCall> calls;
  std::string_view rest = Trim(body);
  while (!rest.empty()) {
    if (rest.substr(0, kDeepSeekCallBegin.size()) != kDeepSeekCallBegin) return std::nullopt;
    rest.remove_prefix(kDeepSeekCallBegin.size());
    const size_t end = rest.find(kDeepSeekCallEnd);
    if (end == std::string_view::npos) return std::nullopt;
    const std::string_view call = rest.substr(0, end);
    rest = Trim(rest.substr(end + kDeepSeekCallEnd.size()));
    const size_t sep = call.find(kDeepSeekSep);
    if (sep == std::string_view::npos) return std::nullopt;
    std::string_view left = call.substr(0, sep);
    std::string_view right = call.substr(sep + kDeepSeekSep.size());
    std::string_view name, arguments;
    const size_t fence = right.find("```json");
    if (fence != std::string_view::npos) {
      name = Trim(right.substr(0, fence));
      arguments = right.substr(fence + 7);
      const size_t close = arguments.rfind("```");
      if (close == std::string_view::npos) return std::nullopt;
      arguments = arguments.substr(0, close);
    } else {
      name = Trim(left);
      arguments = right;
    }
    const Json value = ParseJson(Trim(arguments));
    if (name.empty() || !value.is_object()) return std::nullopt;
    calls.push_back(
        {"", std::string(name), value.dump(-1, ' ', false, Json::error_handler_t::replace)});
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

// ---------------------------------------------------------------------------------------------
// Harmony.

constexpr std::string_view kHarmonyEnds[] = {kHarmonyEnd, kHarmonyCall, kHarmonyReturn};
constexpr std::string_view kFunctionsPrefix = "functions.";

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

// The earliest end marker in `text` at or after `from`: its position and the marker, or npos.
std::pair<size_t, std::string_view> FindHarmonyEnd(std::string_view text, size_t from) {
  std::pair<size_t, std::string_view> first{std::string_view::npos, {}};
  for (std::string_view marker : kHarmonyEnds) {
    const size_t at = text.find(marker, from);
    if (at < first.first) first = {at, marker};
  }
  return first;
}

// A header word: up to a space, a marker ("<|") or the end; removed from `text`.
std::string_view TakeWord(std::string_view& text) {
  size_t end = 0;
  while (end < text.size() && text[end] != ' ' && text.substr(end, 2) != "<|") ++end;
  const std::string_view word = text.substr(0, end);
  text.remove_prefix(end);
  return word;
}

struct HarmonyHeader {
  std::string channel;
  std::string recipient;  // "" when none
};

// A message header (the text before <|message|>, its <|start|>ROLE included when written);
// nullopt when it is not one the assistant writes: another role, no channel, two channels or
// recipients, another marker.
std::optional<HarmonyHeader> ParseHarmonyHeader(std::string_view header) {
  if (StartsWith(header, kHarmonyStart)) {
    header.remove_prefix(kHarmonyStart.size());
    if (TakeWord(header) != "assistant") return std::nullopt;
  }
  HarmonyHeader parsed;
  bool has_channel = false;
  while (!header.empty()) {
    if (header.front() == ' ') {
      header.remove_prefix(1);
    } else if (StartsWith(header, kHarmonyChannel)) {
      header.remove_prefix(kHarmonyChannel.size());
      const std::string_view channel = TakeWord(header);
      if (has_channel || channel.empty()) return std::nullopt;
      parsed.channel = std::string(channel);
      has_channel = true;
    } else if (StartsWith(header, kHarmonyConstrain)) {
      header.remove_prefix(kHarmonyConstrain.size());
      TakeWord(header);  // the content type ("json")
    } else if (StartsWith(header, "to=")) {
      header.remove_prefix(3);
      const std::string_view recipient = TakeWord(header);
      if (!parsed.recipient.empty() || recipient.empty()) return std::nullopt;
      parsed.recipient = std::string(recipient);
    } else if (StartsWith(header, "<|") || !has_channel) {
      return std::nullopt;
    } else {
      TakeWord(header);  // a bare content type after the channel ("commentary json")
    }
  }
  if (!has_channel) return std::nullopt;
  return parsed;
}

// Whether `text` (no <|message|> or end marker in it yet) is, or may still become, the start of
// a message header.
bool MayBeHarmonyHeader(std::string_view text) {
  for (std::string_view opener :
       {kHarmonyStart, kHarmonyChannel, std::string_view("to="), std::string_view(" to=")}) {
    const size_t common = std::min(text.size(), opener.size());
    if (text.substr(0, common) == opener.substr(0, common)) return true;
  }
  return false;
}

}  // namespace

std::optional<ToolCallFormat> ToolCallFormatFromName(std::string_view name) {
  if (name.empty()) return ToolCallFormat::kNone;
  for (const FormatInfo& info : kFormats) {
    if (name == info.name) return info.format;
  }
  return std::nullopt;
}

const char* ToolCallFormatName(ToolCallFormat format) { return Info(format).name; }

std::string ToolCallFormatNames() {
  std::vector<std::string> names;
  for (const FormatInfo& info : kFormats) names.emplace_back(info.name);
  return absl::StrJoin(names, ", ");
}

std::string NewToolCallId(ToolCallFormat format) {
  static constexpr char kAlphabet[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 random(std::random_device{}());
  const bool mistral = format == ToolCallFormat::kMistral;
  std::string id = mistral ? "" : "call_";
  for (int index = 0; index < (mistral ? 9 : 24); ++index) {
    id += kAlphabet[random() % (sizeof(kAlphabet) - 1)];
  }
  return id;
}

std::optional<std::vector<ToolCall>> ParseCallBody(ToolCallFormat format, std::string_view body) {
  switch (format) {
    case ToolCallFormat::kHermes:
    case ToolCallFormat::kPhi4Mini:
      return CallsFromJsonText(body);
    case ToolCallFormat::kLlama3Json:
      return ParseLlama3(body);
    case ToolCallFormat::kMistral:
      return ParseMistral(body);
    case ToolCallFormat::kDeepSeekV3:
      return ParseDeepSeek(body);
    case ToolCallFormat::kHarmony:
    case ToolCallFormat::kNone:
      break;
  }
  return std::nullopt;
}

OutputParser::OutputParser(ToolCallFormat tools, bool reasoning, bool starts_in_reasoning)
    : format_(tools),
      state_(!reasoning ? State::kText : (starts_in_reasoning ? State::kReasoning : State::kStart)),
      reasoning_(reasoning) {}

OutputParser OutputParser::HarmonyWithoutCalls() {
  OutputParser parser(ToolCallFormat::kHarmony, false, false);
  parser.harmony_calls_ = false;
  return parser;
}

void OutputParser::HarmonyBody(std::string_view body, bool final, std::string_view end_marker,
                               ParsedDelta& out) {
  switch (route_) {
    case Route::kReasoning:
      out.reasoning += body;
      return;
    case Route::kContent:
      EmitText(std::string(body), out);
      return;
    case Route::kCall:
    case Route::kRaw:
      break;
  }
  if (!final) return;  // held until the message ends
  if (route_ == Route::kCall) {
    const Json arguments = ParseJson(Trim(body));
    if (arguments.is_object()) {
      out.calls.push_back({NewToolCallId(format_), call_name_,
                           arguments.dump(-1, ' ', false, Json::error_handler_t::replace)});
      ++calls_;
      return;
    }
  }
  // Not a call (or a recipient this server does not call): the message as written.
  EmitText(header_ + std::string(body) + std::string(end_marker), out);
}

ParsedDelta OutputParser::PushHarmony(std::string_view text) {
  ParsedDelta out;
  pending_ += text;
  while (true) {
    if (!in_body_) {
      if (pending_.empty()) return out;
      const size_t message = pending_.find(kHarmonyMessage);
      const auto [end, end_marker] = FindHarmonyEnd(pending_, 0);
      if (!MayBeHarmonyHeader(pending_)) {
        // Text outside any message: content up to an end marker.
        header_.clear();
        route_ = Route::kContent;
        in_body_ = true;
        continue;
      }
      if (end < message) {
        // A header cut short by an end marker: as written.
        EmitText(pending_.substr(0, end + end_marker.size()), out);
        pending_.erase(0, end + end_marker.size());
        continue;
      }
      if (message == std::string::npos) return out;  // the header goes on
      header_ = pending_.substr(0, message + kHarmonyMessage.size());
      const std::optional<HarmonyHeader> header =
          ParseHarmonyHeader(std::string_view(pending_).substr(0, message));
      pending_.erase(0, header_.size());
      in_body_ = true;
      end_search_from_ = 0;
      if (!header.has_value()) {
        route_ = Route::kRaw;
      } else if (!header->recipient.empty()) {
        const bool function = StartsWith(header->recipient, kFunctionsPrefix) &&
                              header->recipient.size() > kFunctionsPrefix.size();
        route_ = function && harmony_calls_ ? Route::kCall : Route::kRaw;
        if (route_ == Route::kCall) call_name_ = header->recipient.substr(kFunctionsPrefix.size());
      } else {
        route_ = header->channel == "analysis" ? Route::kReasoning : Route::kContent;
      }
      continue;
    }
    // In a body: the first end marker ends it; for a call, the first after which the arguments
    // parse (an end marker's text inside a JSON string does not).
    auto [end, end_marker] = FindHarmonyEnd(pending_, end_search_from_);
    if (route_ == Route::kCall) {
      while (end != std::string::npos &&
             !ParseJson(Trim(std::string_view(pending_).substr(0, end))).is_object()) {
        std::tie(end, end_marker) = FindHarmonyEnd(pending_, end + 1);
      }
    }
    if (end != std::string::npos) {
      HarmonyBody(std::string_view(pending_).substr(0, end), true, end_marker, out);
      pending_.erase(0, end + end_marker.size());
      in_body_ = false;
      continue;
    }
    if (route_ == Route::kCall || route_ == Route::kRaw) {
      // Held; an end marker could start in the last bytes seen.
      end_search_from_ =
          pending_.size() < kHarmonyReturn.size() ? 0 : pending_.size() - kHarmonyReturn.size() + 1;
      return out;
    }
    size_t keep = 0;
    for (std::string_view marker : kHarmonyEnds) {
      keep = std::max(keep, PartialMarkerSuffix(pending_, marker));
    }
    HarmonyBody(std::string_view(pending_).substr(0, pending_.size() - keep), false, "", out);
    pending_.erase(0, pending_.size() - keep);
    end_search_from_ = 0;
    return out;
  }
}

void OutputParser::EmitText(std::string text, ParsedDelta& out) {
  for (char c : text) {
    if (!IsSpace(c)) {
      seen_text_ = true;
      break;
    }
  }
  out.content += text;
}

void OutputParser::Content(std::string_view text, bool final, ParsedDelta& out) {
  if (after_think_ && !content_started_) {
    text = StripLeading(text, /*newlines_only=*/false);
    if (text.empty()) return;
    content_started_ = true;
  }
  if (format_ == ToolCallFormat::kNone) {
    EmitText(std::string(text), out);
    return;
  }
  // Whitespace right before a call (and between calls) is not content: held until text that
  // is not a call follows.
  held_space_ += text;
  size_t keep = held_space_.size();
  while (keep > 0 && IsSpace(held_space_[keep - 1])) --keep;
  if (keep > 0) {
    EmitText(held_space_.substr(0, keep), out);
    held_space_.erase(0, keep);
  }
  if (final && calls_ == 0) {
    EmitText(std::move(held_space_), out);
    held_space_.clear();
  }
}

void OutputParser::Reasoning(std::string_view text, ParsedDelta& out) {
  if (!reasoning_started_) {
    text = StripLeading(text, /*newlines_only=*/true);
    if (text.empty()) return;
    reasoning_started_ = true;
  }
  out.reasoning += text;
}

void OutputParser::CloseCall(std::string_view end_marker, ParsedDelta& out) {
  std::optional<std::vector<ToolCall>> calls = ParseCallBody(format_, body_);
  if (calls.has_value()) {
    held_space_.clear();
    for (ToolCall& call : *calls) {
      call.id = NewToolCallId(format_);
      out.calls.push_back(std::move(call));
      ++calls_;
    }
  } else {
    // Not a call after all: everything the model wrote goes back as content.
    held_space_ += open_marker_ + body_ + std::string(end_marker);
    EmitText(std::move(held_space_), out);
    held_space_.clear();
  }
  body_.clear();
}

ParsedDelta OutputParser::Push(std::string_view text) {
  if (format_ == ToolCallFormat::kHarmony) return PushHarmony(text);
  ParsedDelta out;
  pending_ += text;
  const FormatInfo& info = Info(format_);
  while (true) {
    switch (state_) {
      case State::kStart: {
        const std::string_view head = StripLeading(pending_, /*newlines_only=*/false);
        if (head.substr(0, kThinkOpen.size()) == kThinkOpen) {
          pending_.erase(0, pending_.size() - head.size() + kThinkOpen.size());
          state_ = State::kReasoning;
          continue;
        }
        if (head.size() < kThinkOpen.size() && kThinkOpen.substr(0, head.size()) == head) {
          return out;  // may still become <think>
        }
        state_ = State::kText;
        continue;
      }
      case State::kReasoning: {
        const size_t close = pending_.find(kThinkClose);
        if (close != std::string::npos) {
          Reasoning(std::string_view(pending_).substr(0, close), out);
          pending_.erase(0, close + kThinkClose.size());
          state_ = State::kText;
          after_think_ = true;
          continue;
        }
        const size_t keep = PartialMarkerSuffix(pending_, kThinkClose);
        Reasoning(std::string_view(pending_).substr(0, pending_.size() - keep), out);
        pending_.erase(0, pending_.size() - keep);
        return out;
      }
      case State::kText: {
        if (format_ == ToolCallFormat::kNone) {
          Content(pending_, false, out);
          pending_.clear();
          return out;
        }
        // Llama 3 may write the JSON call without <|python_tag|>: a '{' opening the output.
        if (format_ == ToolCallFormat::kLlama3Json && !seen_text_) {
          const std::string_view head = StripLeading(pending_, false);
          if (!head.empty() && head.front() == '{') {
            held_space_.clear();
            open_marker_.clear();
            body_ = std::string(head);
            pending_.clear();
            state_ = State::kCall;
            continue;
          }
          if (head.empty()) {
            held_space_ += pending_;
            pending_.clear();
            return out;
          }
        }
        const size_t start = pending_.find(info.start);
        if (start != std::string::npos) {
          Content(std::string_view(pending_).substr(0, start), false, out);
          open_marker_ = std::string(info.start);
          body_ = pending_.substr(start + info.start.size());
          pending_.clear();
          state_ = State::kCall;
          continue;
        }
        const size_t keep = PartialMarkerSuffix(pending_, info.start);
        Content(std::string_view(pending_).substr(0, pending_.size() - keep), false, out);
        pending_.erase(0, pending_.size() - keep);
        return out;
      }
      case State::kCall: {
        body_ += pending_;
        pending_.clear();
        if (info.end.empty()) return out;  // runs to the end of the output
        // The first end marker whose body parses ends the call: an end marker inside a JSON
        // string of the arguments does not.
        size_t end = body_.find(info.end, end_search_from_);
        while (end != std::string::npos &&
               !ParseCallBody(format_, std::string_view(body_).substr(0, end)).has_value()) {
          end = body_.find(info.end, end + 1);
        }
        if (end == std::string::npos) {
          end_search_from_ =
              body_.size() < info.end.size() ? 0 : body_.size() - info.end.size() + 1;
          return out;
        }
        end_search_from_ = 0;
        pending_ = body_.substr(end + info.end.size());
        body_.resize(end);
        CloseCall(info.end, out);
        state_ = State::kText;
        continue;
      }
    }
  }
}

ParsedDelta OutputParser::Finish() {
  ParsedDelta out = Push("");
  if (format_ == ToolCallFormat::kHarmony) {
    // <|call|> and <|return|> are EOS tokens: the output ends inside its last message.
    if (in_body_) {
      HarmonyBody(pending_, true, "", out);
    } else {
      EmitText(std::move(pending_), out);  // a header the output never finished
    }
    pending_.clear();
    in_body_ = false;
    return out;
  }
  switch (state_) {
    case State::kStart:
    case State::kText:
      Content(pending_, /*final=*/true, out);
      break;
    case State::kReasoning:
      Reasoning(pending_, out);
      break;
    case State::kCall:
      CloseCall("", out);
      Content("", /*final=*/true, out);
      break;
  }
  pending_.clear();
  return out;
}

}  // namespace llmrt::server
