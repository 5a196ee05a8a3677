// llmrt: runs and inspects plan files.
//
//   llmrt run plan.bin -p "text" [-n N] [--temp T] [--top-k K] [--top-p P] [--seed S]
//                                [--verify] [--threads N] [--backend auto|cpu|cuda]
//                                [--kv-cache f32|f16|bf16|int8] [--quant-activations int8|f32]
//                                [--ctx N]
//   llmrt chat plan.bin [--system TEXT] [-n N] [sampling flags as for run]
//   llmrt inspect plan.bin [--verify]
//   llmrt eval plan.bin --tokens FILE --logits-out OUT                 (see eval.cc)
//   llmrt perplexity plan.bin TEXT_FILE [--ctx N] [--kl-base F] [--save-logits F] (perplexity.cc)
//   llmrt tokenize plan.bin TEXT [--special] [--ids-only]   (see tokenize.cc)
//   llmrt bench plan.bin [-p 512] [-n 128] [-t 1,2] [--reps 5] [--json]   (see bench.cc)
//   llmrt bench --bandwidth [-t 1,2]
//
// Exit status: 0 success, 1 an error (message on stderr), 2 a usage error.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/engine/model.h"
#include "runtime/plan/output_file.h"
#include "runtime/plan/plan_reader.h"
#include "runtime/sampling/sampler.h"
#include "runtime/template/plan_chat_template.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tools/llmrt/arguments.h"
#include "tools/llmrt/bench.h"
#include "tools/llmrt/eval.h"
#include "tools/llmrt/generate.h"
#include "tools/llmrt/render.h"
#include "tools/llmrt/serve.h"
#include "tools/llmrt/tokenize.h"

namespace llmrt {
namespace {

constexpr int kUsageError = 2;
constexpr int kError = 1;
constexpr char kUsage[] =
    "usage: llmrt run PLAN -p TEXT [-n N] [--temp T] [--top-k K] [--top-p P] [--seed S]\n"
    "                 [--repetition-penalty R] (sampling defaults: the plan's generation_config)\n"
    "                 [--verify] [--threads N (default: one per core)]\n"
    "                 [--ctx N (most tokens, prompt + generated; default: the plan's context)]\n"
    "                 [--kv-cache f32|f16|bf16|int8 (default: the plan's)]\n"
    "                 [--quant-activations int8|f32 (default int8; f32: exact, slow)]\n"
    "       llmrt inspect PLAN [--verify]\n"
    "       llmrt eval PLAN --tokens FILE --logits-out OUT   (llmrt eval --help)\n"
    "       llmrt perplexity PLAN TEXT_FILE [--ctx N] [--kl-base LOGITS] [--save-logits FILE]\n"
    "                 (llmrt perplexity --help)\n"
    "       llmrt bench PLAN [-p 512] [-n 128] [-t 1,2] [--reps 5] [--ubatch 512] [--json]\n"
    "       llmrt bench --bandwidth [-t 1,2] [--reps 5] [--bandwidth-mib 1024] [--json]\n"
    "       llmrt render PLAN MESSAGES.json [--add-generation-prompt] [--template NAME]\n"
    "       llmrt tokenize PLAN TEXT [--special] [--ids-only]\n"
    "       llmrt chat PLAN [--system TEXT] [-n N] [--temp T] [--top-k K] [--top-p P] [--seed S]\n"
    "                 [--repetition-penalty R]\n"
    "       llmrt serve PLAN [--host H] [--port P] [--api-key K] ...   (llmrt serve --help)\n";

int UsageError(const std::string& message) {
  std::fprintf(stderr, "llmrt: %s\n%s", message.c_str(), kUsage);
  return kUsageError;
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "llmrt: %s\n", std::string(status.message()).c_str());
  return kError;
}

// What `run` and `chat` share: the plan loaded, its tokenizer, sampling parameters (the plan's
// generation defaults overridden by flags) and the token limits.
struct GenerationSetup {
  Arguments arguments;
  std::unique_ptr<engine::Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  sampling::SamplingParams params;
  GenerateLimits limits;
};

// Returns 0 and fills `setup`, or the exit status to return (after printing why).
int SetUpGeneration(int argc, char** argv, const std::vector<std::string>& extra_valued,
                    const std::vector<std::string>& extra_switches, GenerationSetup& setup) {
  std::vector<std::string> valued = {
      "-n", "--temp", "--top-k", "--top-p", "--repetition-penalty", "--seed", "--ctx"};
  valued.insert(valued.end(), kModelValuedFlags.begin(), kModelValuedFlags.end());
  valued.insert(valued.end(), extra_valued.begin(), extra_valued.end());
  std::vector<std::string> switches = kModelSwitches;
  switches.insert(switches.end(), extra_switches.begin(), extra_switches.end());
  Arguments& arguments = setup.arguments;
  const std::string parse_error =
      ParseArguments(argc, argv, valued, switches, {"the plan file"}, arguments);
  if (!parse_error.empty()) return UsageError(parse_error);

  std::string error;
  engine::ModelOptions options;
  if (!ParseNumber(arguments, "-n", setup.limits.max_new_tokens, error) ||
      !ParseNumber(arguments, "--ctx", options.max_seq_len, error)) {
    return UsageError(error);
  }
  if (setup.limits.max_new_tokens < 0) return UsageError("-n must be >= 0");
  if (options.max_seq_len < 0) return UsageError("--ctx must be >= 0 (0: the plan's context)");
  if (error = ParseModelOptions(arguments, options); !error.empty()) return UsageError(error);

  absl::StatusOr<std::unique_ptr<engine::Model>> model =
      engine::Model::Load(arguments.plan_path, options);
  if (!model.ok()) return Fail(model.status());
  setup.model = *std::move(model);
  if (!setup.model->backend_note().empty()) {
    std::fprintf(stderr, "[llmrt] %s; running on the CPU\n", setup.model->backend_note().c_str());
  }
  const plan::PlanMeta& meta = setup.model->meta();

  sampling::SamplingParams& params = setup.params;
  params = sampling::SamplingFromGenerationConfig(meta.generation());
  if (!ParseNumber(arguments, "--temp", params.temperature, error) ||
      !ParseNumber(arguments, "--repetition-penalty", params.repetition_penalty, error) ||
      !ParseNumber(arguments, "--top-k", params.top_k, error) ||
      !ParseNumber(arguments, "--top-p", params.top_p, error) ||
      !ParseNumber(arguments, "--seed", params.seed, error)) {
    return UsageError(error);
  }
  if (absl::Status status = sampling::Sampler::Validate(params); !status.ok()) {
    return UsageError(std::string(status.message()));
  }

  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Create(meta.tokenizer());
  if (!tokenizer.ok()) {
    return Fail(absl::Status(
        tokenizer.status().code(),
        absl::StrFormat("%s: tokenizer: %s", arguments.plan_path, tokenizer.status().message())));
  }
  setup.tokenizer = *std::move(tokenizer);
  const plan::GenerationDefaults& generation = meta.generation();
  setup.limits.eos_ids.assign(generation.eos_token_ids().begin(), generation.eos_token_ids().end());
  if (setup.limits.eos_ids.empty() && setup.tokenizer->eos_id() >= 0) {
    setup.limits.eos_ids.push_back(setup.tokenizer->eos_id());
  }
  return 0;
}

int Run(int argc, char** argv) {
  GenerationSetup setup;
  if (int status = SetUpGeneration(argc, argv, {"-p"}, {}, setup); status != 0) return status;
  if (setup.arguments.values.count("-p") == 0) return UsageError("run needs a prompt: -p TEXT");
  const std::string prompt = setup.arguments.values["-p"];
  const std::unique_ptr<engine::Model>& model = setup.model;
  const std::unique_ptr<Tokenizer>& tokenizer = setup.tokenizer;
  const std::vector<int32_t> prompt_ids = tokenizer->Encode(prompt, true);
  if (prompt_ids.empty()) {
    return Fail(absl::InvalidArgumentError("the prompt encodes to no tokens; give some text"));
  }
  // Checked before the prompt is echoed, so a refused prompt prints nothing to stdout.
  if (static_cast<int64_t>(prompt_ids.size()) >= model->max_context()) {
    return Fail(absl::OutOfRangeError(absl::StrFormat(
        "the prompt is %d tokens; the context holds %d (prompt and output), so nothing could be "
        "generated (--ctx sets the context, up to the plan's)",
        prompt_ids.size(), model->max_context())));
  }

  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);

  std::unique_ptr<engine::Session> session = model->NewSession();
  sampling::Sampler sampler(setup.params);
  StreamDecoder decoder(*tokenizer, prompt_ids);
  absl::StatusOr<GenerateResult> result = Generate(
      *model, *session, prompt_ids, sampler, decoder, setup.limits, [](const std::string& text) {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
      });
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!result.ok()) return Fail(result.status());
  // Said rather than stopping silently: a reply cut short by the context looks like the model's
  // own ending otherwise. Exit status stays 0, as llama.cpp's: the output is valid, only short.
  if (result->stopped_at_context_limit) {
    std::fprintf(stderr,
                 "llmrt: stopped at the context limit (%lld tokens) after %zu generated tokens; "
                 "-n asked for %lld (--ctx sets the limit, up to the plan's context)\n",
                 static_cast<long long>(model->max_context()), result->tokens.size(),
                 static_cast<long long>(setup.limits.max_new_tokens));
  }
  std::fprintf(stderr, "[llmrt] prompt %zu tokens %.1f tok/s, generated %zu tokens %.1f tok/s\n",
               prompt_ids.size(), prompt_ids.size() / std::max(result->prefill_seconds, 1e-9),
               result->tokens.size(),
               result->tokens.size() / std::max(result->decode_seconds, 1e-9));
  return 0;
}

// Set by SIGINT during `chat`: the first Ctrl-C stops the reply being generated.
std::atomic<bool> chat_interrupted{false};

// `llmrt chat PLAN [--system TEXT]`: a multi-turn conversation through the plan's chat template.
// The session keeps the conversation's KV cache across turns: each turn renders the whole
// conversation, and only the text after what the cache already holds is encoded and prefilled.
// When the template renders earlier turns differently (some drop old reasoning), the cache no
// longer matches and the conversation is prefilled again from the start.
int Chat(int argc, char** argv) {
  GenerationSetup setup;
  if (int status = SetUpGeneration(argc, argv, {"--system"}, {}, setup); status != 0) {
    return status;
  }
  engine::Model& model = *setup.model;
  const Tokenizer& tokenizer = *setup.tokenizer;
  absl::StatusOr<jinja::PlanChatTemplate> chat_template =
      jinja::PlanChatTemplate::Create(model.meta().tokenizer());
  if (!chat_template.ok()) {
    return Fail(absl::Status(
        chat_template.status().code(),
        absl::StrFormat("%s: %s", setup.arguments.plan_path, chat_template.status().message())));
  }
  std::signal(SIGINT, [](int) { chat_interrupted.store(true); });
  setup.limits.cancel = &chat_interrupted;

  const bool interactive = isatty(STDIN_FILENO) != 0;
  std::vector<jinja::ChatMessage> messages;
  auto add_message = [&messages](const std::string& role, const std::string& content) {
    jinja::ChatMessage message;
    message.role = role;
    message.content = jinja::Value::String(content);
    messages.push_back(std::move(message));
  };
  auto start_conversation = [&]() {
    messages.clear();
    if (setup.arguments.values.count("--system")) {
      add_message("system", setup.arguments.values["--system"]);
    }
  };
  start_conversation();
  std::unique_ptr<engine::Session> session = model.NewSession();
  sampling::Sampler sampler(setup.params);
  std::string cached_text;  // the text whose tokens the session's KV cache holds
  std::vector<int32_t> cached_ids;
  if (interactive) std::fputs("(/reset starts over, /exit or Ctrl-D ends)\n", stderr);
  for (int turn = 1;; ++turn) {
    if (interactive) std::fputs("> ", stdout), std::fflush(stdout);
    std::string line;
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line == "/reset") {
      start_conversation();
      session->Reset();
      cached_text.clear();
      cached_ids.clear();
      std::fputs("[llmrt] conversation reset\n", stderr);
      continue;
    }
    if (line.empty()) continue;
    add_message("user", line);
    jinja::ChatOptions options;
    options.add_generation_prompt = true;
    absl::StatusOr<std::string> rendered = chat_template->Render(messages, options);
    if (!rendered.ok()) {
      // The template refused the conversation (e.g. a system message Gemma does not take):
      // report it and drop the turn, the conversation goes on.
      std::fprintf(stderr, "llmrt: %s\n", std::string(rendered.status().message()).c_str());
      messages.pop_back();
      continue;
    }
    std::vector<int32_t> input;
    int64_t reused = static_cast<int64_t>(cached_ids.size());
    if (rendered->compare(0, cached_text.size(), cached_text) == 0) {
      // transformers' apply_chat_template encodes without adding special tokens: the template
      // writes them (bos_token) itself.
      input = tokenizer.Encode(std::string_view(*rendered).substr(cached_text.size()), false);
    } else {
      session->Reset();
      cached_ids.clear();
      reused = 0;
      input = tokenizer.Encode(*rendered, false);
    }
    if (input.empty()) input.push_back(tokenizer.bos_id() >= 0 ? tokenizer.bos_id() : 0);
    if (session->num_tokens() + static_cast<int64_t>(input.size()) + setup.limits.max_new_tokens >
        model.max_context()) {
      std::fprintf(stderr,
                   "llmrt: the conversation no longer fits the context (%lld tokens); "
                   "use /reset\n",
                   static_cast<long long>(model.max_context()));
      messages.pop_back();
      continue;
    }
    cached_ids.insert(cached_ids.end(), input.begin(), input.end());
    chat_interrupted.store(false);
    StreamDecoder decoder(tokenizer, cached_ids);
    absl::StatusOr<GenerateResult> reply = Generate(
        model, *session, input, sampler, decoder, setup.limits, [](const std::string& text) {
          std::fwrite(text.data(), 1, text.size(), stdout);
          std::fflush(stdout);
        });
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (!reply.ok()) return Fail(reply.status());
    // Generate leaves the last token out of the cache when it stopped at the limit; put it in so
    // the cache holds exactly the reply's text.
    if (!reply->stopped_at_eos && !reply->tokens.empty() &&
        session->num_tokens() < static_cast<int64_t>(cached_ids.size() + reply->tokens.size())) {
      absl::StatusOr<std::vector<float>> appended = session->Append({reply->tokens.back()}, false);
      if (!appended.ok()) return Fail(appended.status());
    }
    cached_ids.insert(cached_ids.end(), reply->tokens.begin(), reply->tokens.end());
    cached_text = *rendered + reply->text;
    add_message("assistant", reply->text);
    std::fprintf(stderr,
                 "[llmrt] turn %d: prefilled %zu tokens (%lld reused from the cache), generated "
                 "%zu tokens%s\n",
                 turn, input.size(), static_cast<long long>(reused), reply->tokens.size(),
                 chat_interrupted.load() ? " (interrupted)" : "");
  }
  return 0;
}

std::string Shape(const google::protobuf::RepeatedField<int64_t>& shape) {
  return "[" + absl::StrJoin(shape, ", ") + "]";
}

// How a quantized matrix's values are stored (plan.proto, Quantization), e.g. "i4 g32 asym
// (f16 scales, u8 zeros) rtn 0.594 B/weight", counting the codes and every companion tensor;
// "" for other tensors.
std::string QuantizedEncoding(const plan::PlanMeta& meta, const plan::Tensor& tensor) {
  if (!tensor.has_quantization() || tensor.shape_size() != 2) return "";
  const plan::Quantization& q = tensor.quantization();
  const int64_t weights = tensor.shape(0) * tensor.shape(1);
  uint64_t bytes = tensor.size_bytes();
  auto companion = [&](bool present, int32_t index) -> const plan::Tensor* {
    if (!present || index < 0 || index >= meta.tensors_size()) return nullptr;
    bytes += meta.tensors(index).size_bytes();
    return &meta.tensors(index);
  };
  const plan::Tensor* scales = companion(q.has_scales(), q.scales());
  const plan::Tensor* zeros = companion(q.has_zero_points(), q.zero_points());
  const plan::Tensor* permutation = companion(q.has_input_permutation(), q.input_permutation());
  std::string group = q.group_size() == tensor.shape(1) ? std::string("per-row")
                                                        : absl::StrFormat("g%d", q.group_size());
  std::string parts =
      absl::StrFormat("%s scales", scales != nullptr ? plan::DTypeName(scales->dtype()) : "no");
  if (zeros != nullptr)
    absl::StrAppendFormat(&parts, ", %s zeros", plan::DTypeName(zeros->dtype()));
  if (permutation != nullptr) parts += ", act-order";
  return absl::StrFormat(
      "%s %s %s (%s)%s %.4g B/weight", plan::DTypeName(tensor.dtype()), group,
      q.scheme() == plan::Quantization::ASYMMETRIC ? "asym" : "sym", parts,
      q.method().empty() ? "" : " " + q.method(),
      weights > 0 ? static_cast<double>(bytes) / static_cast<double>(weights) : 0.0);
}

int Inspect(int argc, char** argv) {
  Arguments arguments;
  const std::string parse_error =
      ParseArguments(argc, argv, {}, {"--verify"}, {"the plan file"}, arguments);
  if (!parse_error.empty()) return UsageError(parse_error);
  plan::PlanOpenOptions open_options;
  open_options.verify_blob_checksums = arguments.switches.count("--verify") > 0;
  if (open_options.verify_blob_checksums) {
    // Everything `llmrt run` checks before its first token: the blobs' checksums, the program
    // (CheckProgram), the tokenizer and the CPU backend's own requirements.
    engine::ModelOptions model_options;
    model_options.backend = engine::BackendChoice::kCpu;
    model_options.num_threads = 1;
    model_options.verify = true;
    absl::StatusOr<std::unique_ptr<engine::Model>> model =
        engine::Model::Load(arguments.plan_path, model_options);
    if (!model.ok()) return Fail(model.status());
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
        Tokenizer::Create((*model)->meta().tokenizer());
    if (!tokenizer.ok()) return Fail(tokenizer.status());
    open_options.verify_blob_checksums = false;  // done
  }
  absl::StatusOr<std::unique_ptr<plan::Plan>> opened =
      plan::Plan::Open(arguments.plan_path, open_options);
  if (!opened.ok()) return Fail(opened.status());
  const plan::Plan& plan = **opened;
  const plan::PlanMeta& meta = plan.meta();
  const plan::ModelConfig& config = meta.config();
  std::string out;
  absl::StrAppendFormat(&out, "plan: %s\n", plan.path());
  absl::StrAppendFormat(&out, "version: %d.%d\nproducer: %s\nfile size: %d bytes\n",
                        plan.header().major, plan.header().minor, meta.producer(),
                        plan.file_size());
  if (arguments.switches.count("--verify") > 0) {
    out += "verified: blob checksums, program, tokenizer, CPU backend (as `llmrt run` loads it)\n";
  }
  absl::StrAppendFormat(&out, "weight dtype: %s\n", plan::DTypeName(meta.weight_dtype()));
  if (!meta.quantization().empty()) {
    absl::StrAppendFormat(&out, "quantization: %s\n", meta.quantization());
  }
  absl::StrAppendFormat(
      &out,
      "model: %s (%s)\n  vocab %d, hidden %d, intermediate %d, layers %d, heads %d, kv heads %d, "
      "head_dim %d\n  max positions %d, rms_norm_eps %g, act %s, tie embeddings %s, attention "
      "bias %s, sliding window %d, checkpoint dtype %s\n",
      config.architecture(), config.model_type(), config.vocab_size(), config.hidden_size(),
      config.intermediate_size(), config.num_layers(), config.num_attention_heads(),
      config.num_kv_heads(), config.head_dim(), config.max_position_embeddings(),
      config.rms_norm_eps(), config.hidden_act(), config.tie_word_embeddings() ? "yes" : "no",
      config.attention_bias() ? "yes" : "no", config.sliding_window(),
      plan::DTypeName(config.checkpoint_dtype()));
  const plan::RopeConfig& rope = config.rope();
  absl::StrAppendFormat(&out, "  rope theta %g, scaling %s", rope.theta(),
                        plan::RopeConfig::Scaling_Name(rope.scaling()));
  if (rope.scaling() != plan::RopeConfig::SCALING_NONE) {
    absl::StrAppendFormat(&out, " factor %g", rope.factor());
  }
  if (rope.scaling() == plan::RopeConfig::LLAMA3) {
    absl::StrAppendFormat(&out, " low %g high %g original max positions %d", rope.low_freq_factor(),
                          rope.high_freq_factor(), rope.original_max_position_embeddings());
  }
  if (rope.scaling() == plan::RopeConfig::LONGROPE) {
    // Which factor set the plan's context chose (docs/architecture.md, LongRoPE).
    absl::StrAppendFormat(&out,
                          " original max positions %d, %s_factor [%s] chosen for max positions "
                          "%d, cos/sin scale %g",
                          rope.original_max_position_embeddings(),
                          rope.long_factors() ? "long" : "short",
                          absl::StrJoin(rope.ext_factors(), ", "), config.max_position_embeddings(),
                          rope.attention_factor());
  }
  if (rope.scaling() == plan::RopeConfig::DYNAMIC) {
    absl::StrAppendFormat(&out, " (default frequencies up to max positions %d, the plan's limit)",
                          config.max_position_embeddings());
  }
  if (rope.rotary_dim() > 0) {
    absl::StrAppendFormat(&out, ", rotary_dim %d of head_dim %d", rope.rotary_dim(),
                          config.head_dim());
  }
  out += "\n";
  if (config.moe().num_experts() > 0) {
    const plan::MoeConfig& moe = config.moe();
    absl::StrAppendFormat(
        &out,
        "  moe: %d experts, top %d, %s%s, expert intermediate %d, shared expert intermediate %d, "
        "decoder_sparse_step %d, dense layers [%s], expert bias %s, router bias %s",
        moe.num_experts(), moe.top_k(), plan::RouterAttrs::Scoring_Name(moe.scoring()),
        moe.normalize_top_k() ? " renormalised" : "", moe.expert_intermediate_size(),
        moe.shared_expert_intermediate_size(), moe.decoder_sparse_step(),
        absl::StrJoin(moe.dense_layers(), ", "), moe.expert_bias() ? "yes" : "no",
        moe.router_bias() ? "yes" : "no");
    if (moe.swiglu_limit() > 0) {
      absl::StrAppendFormat(&out, ", clamped SwiGLU alpha %g limit %g", moe.swiglu_alpha(),
                            moe.swiglu_limit());
    }
    out += "\n";
  }
  absl::StrAppendFormat(&out, "  attention sinks %s\n", config.attention_sinks() ? "yes" : "no");
  const plan::GenerationDefaults& generation = meta.generation();
  absl::StrAppendFormat(
      &out,
      "generation: bos %d, eos [%s], pad %d, do_sample %s, temperature %g, top_k %d, top_p %g, "
      "repetition_penalty %g, max_length %d\n",
      generation.bos_token_id(), absl::StrJoin(generation.eos_token_ids(), ", "),
      generation.pad_token_id(), generation.do_sample() ? "yes" : "no", generation.temperature(),
      generation.top_k(), generation.top_p(), generation.repetition_penalty(),
      generation.max_length());
  const plan::TokenizerSpec& tokenizer = meta.tokenizer();
  absl::StrAppendFormat(
      &out,
      "tokenizer: %s, %d pieces, %d merges, %d added tokens, byte fallback %s, %d normalizers, "
      "%d pre-tokenizers, %d decoders, bos %d, eos %d, unk %d, chat template %d bytes\n",
      plan::TokenizerSpec::ModelType_Name(tokenizer.model()), tokenizer.pieces_size(),
      tokenizer.merges_size(), tokenizer.added_tokens_size(),
      tokenizer.byte_fallback() ? "yes" : "no", tokenizer.normalizers_size(),
      tokenizer.pre_tokenizers_size(), tokenizer.decoders_size(), tokenizer.bos_id(),
      tokenizer.eos_id(), tokenizer.unk_id(), tokenizer.chat_template().size());
  const plan::KvCacheSpec& kv = meta.kv_cache();
  absl::StrAppendFormat(
      &out, "kv cache: %d layers, %d kv heads, head_dim %d, %s, block %d tokens\n", kv.num_layers(),
      kv.num_kv_heads(), kv.head_dim(), plan::DTypeName(kv.dtype()), kv.default_block_size());
  uint64_t weight_bytes = 0;
  absl::StrAppendFormat(&out, "tensors: %d\n", meta.tensors_size());
  for (int index = 0; index < meta.tensors_size(); ++index) {
    const plan::Tensor& tensor = meta.tensors(index);
    weight_bytes += tensor.size_bytes();
    const std::string encoding = QuantizedEncoding(meta, tensor);
    // Only packed layouts are named (ROW_PANELS of n rows, LANE_CHUNKS for I4 codes).
    std::string layout;
    if (tensor.layout() == plan::Tensor::ROW_PANELS) {
      layout = absl::StrFormat(", ROW_PANELS/%d", tensor.panel_rows());
    } else if (tensor.layout() != plan::Tensor::ROW_MAJOR) {
      layout = ", " + plan::Tensor::Layout_Name(tensor.layout());
    }
    absl::StrAppendFormat(&out, "  %4d %-48s %-5s %-16s %d bytes%s%s\n", index, tensor.name(),
                          plan::DTypeName(tensor.dtype()), Shape(tensor.shape()),
                          tensor.size_bytes(), layout, encoding.empty() ? "" : "  " + encoding);
  }
  const plan::Program& program = meta.program();
  auto value_name = [&](int32_t id) {
    if (id < 0 || id >= program.values_size()) return absl::StrFormat("?%d", id);
    const plan::Value& value = program.values(id);
    return absl::StrFormat("%%%d:%s[%d]", id, value.name().empty() ? "v" : value.name(),
                           value.width());
  };
  auto kernel_name = [&](int32_t kernel) -> std::string {
    for (const plan::KernelTable& table : program.kernel_tables()) {
      if (table.target() == "cpu" && kernel >= 0 && kernel < table.kernels_size()) {
        return table.kernels(kernel).name();
      }
    }
    return "";
  };
  absl::StrAppendFormat(&out, "program: %d values, %d ops, arena %d bytes per token\n",
                        program.values_size(), program.ops_size(), program.arena_bytes_per_token());
  for (int index = 0; index < program.ops_size(); ++index) {
    const plan::Op& op = program.ops(index);
    std::vector<std::string> inputs, outputs, weights;
    for (int32_t id : op.inputs()) inputs.push_back(value_name(id));
    for (int32_t id : op.outputs()) outputs.push_back(value_name(id));
    for (int32_t id : op.weights()) {
      weights.push_back(id >= 0 && id < meta.tensors_size() ? meta.tensors(id).name()
                                                            : absl::StrFormat("?%d", id));
    }
    absl::StrAppendFormat(&out, "  %4d %-18s %s -> %s", index, plan::OpKind_Name(op.kind()),
                          absl::StrJoin(inputs, ", "), absl::StrJoin(outputs, ", "));
    if (!weights.empty()) absl::StrAppendFormat(&out, "  weights %s", absl::StrJoin(weights, ", "));
    if (op.kind() == plan::ATTENTION) {
      absl::StrAppendFormat(&out, "  layer %d heads %d/%d head_dim %d scale %g window %d",
                            op.attention().layer(), op.attention().num_heads(),
                            op.attention().num_kv_heads(), op.attention().head_dim(),
                            op.attention().scale(), op.attention().sliding_window());
    } else if (op.kind() == plan::ROUTER) {
      absl::StrAppendFormat(&out, "  experts %d top_k %d %s%s", op.router().num_experts(),
                            op.router().top_k(),
                            plan::RouterAttrs::Scoring_Name(op.router().scoring()),
                            op.router().normalize() ? " normalize" : "");
    } else if (op.kind() == plan::EXPERT_MATMUL) {
      absl::StrAppendFormat(&out, "  experts %d top_k %d", op.expert().num_experts(),
                            op.expert().top_k());
    } else if (op.kind() == plan::CLAMPED_SWIGLU) {
      absl::StrAppendFormat(&out, "  alpha %g limit %g", op.swiglu().alpha(), op.swiglu().limit());
    }
    const std::string kernel = kernel_name(op.kernel());
    if (!kernel.empty()) absl::StrAppendFormat(&out, "  kernel %s", kernel);
    out += "\n";
  }
  for (const plan::KernelTable& table : program.kernel_tables()) {
    const bool cuda = table.target().rfind("cuda:", 0) == 0;
    absl::StrAppendFormat(&out, "kernels (%s%s): %d\n", table.target(),
                          table.compiler_version().empty() ? "" : ", " + table.compiler_version(),
                          table.kernels_size());
    if (cuda) {
      absl::StrAppendFormat(&out, "  %4s %-44s %5s %6s %6s %5s %10s %s\n", "", "entry", "block",
                            "smem", "regs", "spill", "code", "grid");
    }
    for (int index = 0; index < table.kernels_size(); ++index) {
      const plan::KernelTable::Kernel& kernel = table.kernels(index);
      if (!cuda) {
        absl::StrAppendFormat(&out, "  %4d %s\n", index, kernel.name());
        continue;
      }
      // The grid as the runtime computes it: the scaled axis grows with the step's rows.
      std::string grid[3] = {absl::StrCat(kernel.grid_x()), absl::StrCat(kernel.grid_y()),
                             absl::StrCat(kernel.grid_z())};
      if (kernel.grid_scaled_axis() >= 0 && kernel.grid_scaled_axis() < 3) {
        std::string rows =
            kernel.grid_rows() == plan::KernelTable::Kernel::GRID_ROWS_LOGITS ? "rows" : "tokens";
        if (kernel.grid_row_multiplier() > 1) {
          rows = absl::StrCat(rows, "*", kernel.grid_row_multiplier());
        }
        if (kernel.grid_rows_per_block() > 1) {
          rows = absl::StrCat("ceil(", rows, "/", kernel.grid_rows_per_block(), ")");
        }
        grid[kernel.grid_scaled_axis()] = rows;
      }
      const std::string registers =
          kernel.registers() < 0 ? "jit" : absl::StrCat(kernel.registers());
      const int32_t spills = kernel.spill_store_bytes() + kernel.spill_load_bytes();
      absl::StrAppendFormat(&out, "  %4d %-44s %5d %6d %6s %5d %10d (%s, %s, %s)%s\n", index,
                            kernel.name(), kernel.block_x(), kernel.shared_bytes(), registers,
                            spills, kernel.code_size(), grid[0], grid[1], grid[2],
                            spills > 0 ? "  SPILLS" : "");
    }
  }
  absl::StrAppendFormat(&out, "total: %d bytes of weights in a %d-byte file\n", weight_bytes,
                        plan.file_size());
  // What a decode step reads (engine::DecodeWeightBytes, ExpertBytes): the MBU figures' bytes.
  const std::vector<engine::MoeRouter> routers = engine::ExpertBytes(meta);
  absl::StrAppendFormat(&out, "decode step reads: %d bytes of weights",
                        engine::DecodeWeightBytes(meta));
  if (!routers.empty()) {
    int64_t one_token = 0, all = 0;
    for (const engine::MoeRouter& router : routers) {
      one_token += router.bytes_per_expert * router.top_k;
      all += router.bytes_per_expert * router.num_experts;
    }
    absl::StrAppendFormat(&out,
                          " besides %d MoE layers' experts: + %d bytes for one token's top-k "
                          "experts (every expert: %d)",
                          routers.size(), one_token, all);
  }
  out += "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace
}  // namespace llmrt

int main(int argc, char** argv) {
  // A plan or logits file in progress is not left behind by Ctrl-C.
  llmrt::RemoveTemporaryFilesOnSignals();
  if (argc < 2) return llmrt::UsageError("missing a subcommand");
  const std::string command = argv[1];
  if (command == "run") return llmrt::Run(argc, argv);
  if (command == "inspect") return llmrt::Inspect(argc, argv);
  if (command == "eval") return llmrt::Eval(argc, argv);
  if (command == "perplexity") return llmrt::Perplexity(argc, argv);
  if (command == "bench") return llmrt::Bench(argc, argv);
  if (command == "render") return llmrt::Render(argc, argv);
  if (command == "tokenize") return llmrt::Tokenize(argc, argv);
  if (command == "chat") return llmrt::Chat(argc, argv);
  if (command == "serve") return llmrt::Serve(argc, argv);
  if (command == "-h" || command == "--help" || command == "help") {
    std::fputs(llmrt::kUsage, stdout);
    return 0;
  }
  return llmrt::UsageError("unknown subcommand " + command);
}
