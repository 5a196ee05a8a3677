#include "runtime/engine/model.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cuda/cuda_backend.h"
#include "runtime/kv/kv_storage.h"

namespace llmrt::engine {

namespace {

// MemAvailable from /proc/meminfo: what the kernel estimates can be allocated without swapping.
absl::StatusOr<int64_t> AvailableMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return absl::UnavailableError(
      "kv_memory_fraction: /proc/meminfo has no MemAvailable line; give kv_memory_bytes instead");
}

}  // namespace

Model::~Model() = default;

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& plan_path,
                                                   const ModelOptions& options) {
  plan::PlanOpenOptions open_options;
  open_options.verify_blob_checksums = options.verify;
  absl::StatusOr<std::unique_ptr<plan::Plan>> plan = plan::Plan::Open(plan_path, open_options);
  if (!plan.ok()) return plan.status();
  auto model = std::unique_ptr<Model>(new Model());
  model->plan_ = std::move(*plan);
  model->meta_ = &model->plan_->meta();
  const plan::Plan* mapped = model->plan_.get();
  absl::Status status = model->Init([mapped](int index) { return mapped->blob(index); }, options);
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrFormat("%s: %s", plan_path, status.message()));
  }
  return model;
}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const plan::PlanMeta& meta,
                                                     const BlobLookup& blobs,
                                                     const ModelOptions& options) {
  auto model = std::unique_ptr<Model>(new Model());
  model->owned_meta_ = std::make_unique<plan::PlanMeta>(meta);
  model->meta_ = model->owned_meta_.get();
  if (absl::Status status = model->Init(blobs, options); !status.ok()) return status;
  return model;
}

absl::Status Model::Init(const BlobLookup& blobs, const ModelOptions& options) {
  // A plan compiled with `llmc compile --max-memory` was sized for that much memory
  // (compiler/pipeline/memory_budget.h); with less available it would swap or be killed.
  const plan::MemoryBudget& memory_budget = meta_->memory_budget();
  if (memory_budget.max_memory_bytes() > 0) {
    absl::StatusOr<int64_t> available = AvailableMemoryBytes();
    if (available.ok() && *available < memory_budget.max_memory_bytes()) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "the plan was compiled for a memory budget of %.2f GiB (llmc compile --max-memory), "
          "but this machine has %.2f GiB available (MemAvailable in /proc/meminfo); recompile "
          "it with a smaller --max-memory",
          static_cast<double>(memory_budget.max_memory_bytes()) / (1 << 30),
          static_cast<double>(*available) / (1 << 30)));
    }
  }
  BackendOptions backend_options;
  backend_options.max_tokens_per_step = options.max_tokens_per_step;
  backend_options.num_threads = options.num_threads;
  backend_options.kv_cache_dtype = options.kv_cache_dtype;
  backend_options.matmul_observer = options.matmul_observer;
  backend_options.quantized_activations = options.quantized_activations;
  moe_routers_ = ExpertBytes(*meta_);
  for (const MoeRouter& router : moe_routers_) {
    moe_num_experts_ = std::max(moe_num_experts_, router.num_experts);
  }
  // The engine's expert metrics and the MBU on active bytes need every step's routing.
  backend_options.record_expert_load = !moe_routers_.empty();
  bool plan_has_cuda = false;
  for (const plan::KernelTable& table : meta_->program().kernel_tables()) {
    plan_has_cuda |= absl::StartsWith(table.target(), "cuda");
  }
  absl::StatusOr<std::unique_ptr<Backend>> backend;
  if (options.backend == BackendChoice::kCuda) {
    backend = cuda::CreateCudaBackend(*meta_, blobs, backend_options);
  } else if (options.backend == BackendChoice::kAuto && plan_has_cuda) {
    backend = cuda::CreateCudaOrCpuBackend(*meta_, blobs, backend_options, &backend_note_);
  } else {
    backend = cpu::CreateCpuBackend(*meta_, blobs, backend_options);
  }
  if (!backend.ok()) return backend.status();
  backend_ = std::move(*backend);

  int32_t block_size = options.kv_block_size;
  if (block_size == 0) block_size = meta_->kv_cache().default_block_size();
  if (block_size == 0) block_size = kv::kDefaultBlockSize;
  // 2^16 tokens per block: far past any useful size, and slot arithmetic stays in 32 bits.
  if (block_size < 0 || block_size > (1 << 16)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("kv_block_size must be in [1, 65536], got %d", block_size));
  }
  const int64_t max_positions = meta_->config().max_position_embeddings();
  const plan::KvCacheSpec& kv_spec = meta_->kv_cache();
  // K and V of every layer in the cache's dtype, I8 scales included (kv/kv_storage.h).
  kv_block_bytes_ =
      kv::KvBytesPerToken(kv_spec.num_layers(), kv_spec.num_kv_heads(), kv_spec.head_dim(),
                          kv::ResolveKvDType(options.kv_cache_dtype, kv_spec.dtype())) *
      block_size;
  int64_t cache_tokens = options.kv_cache_tokens;
  if (cache_tokens == 0 && (options.kv_memory_bytes > 0 || options.kv_memory_fraction > 0)) {
    int64_t budget = options.kv_memory_bytes;
    if (budget == 0) {
      if (!(options.kv_memory_fraction > 0 && options.kv_memory_fraction <= 1)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "kv_memory_fraction must be in (0, 1], got %g", options.kv_memory_fraction));
      }
      absl::StatusOr<int64_t> available = AvailableMemoryBytes();
      if (!available.ok()) return available.status();
      budget = static_cast<int64_t>(static_cast<double>(*available) * options.kv_memory_fraction);
    }
    if (kv_block_bytes_ <= 0) {
      cache_tokens = block_size;  // nothing to cache: one block keeps the bookkeeping simple
    } else {
      cache_tokens = budget / kv_block_bytes_ * block_size;
      if (cache_tokens == 0) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "KV memory budget of %d bytes holds no block; one block of %d tokens takes %d bytes",
            budget, block_size, kv_block_bytes_));
      }
    }
  }
  if (cache_tokens == 0) cache_tokens = memory_budget.kv_cache_tokens();  // 0 without a budget
  if (cache_tokens == 0)
    cache_tokens = max_positions > 0 ? std::min<int64_t>(max_positions, 8192) : 4096;
  // Slots are int32 in StepBatch: an explicit size past 2^30 tokens is refused, a size derived
  // from a memory budget is capped there.
  if (options.kv_cache_tokens < 0 || options.kv_cache_tokens > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("kv_cache_tokens must be in [1, 2^30], got %d", options.kv_cache_tokens));
  }
  cache_tokens = std::min<int64_t>(cache_tokens, int64_t{1} << 30);
  const int64_t num_blocks = (cache_tokens + block_size - 1) / block_size;
  if (absl::Status status = backend_->AllocateKvCache(static_cast<int32_t>(num_blocks), block_size);
      !status.ok()) {
    return status;
  }
  pool_ = std::make_unique<kv::BlockPool>(static_cast<int32_t>(num_blocks), block_size);
  builder_ = std::make_unique<StepBuilder>(block_size, backend_->max_tokens_per_step());
  max_context_ = num_blocks * block_size;
  if (max_positions > 0) max_context_ = std::min(max_context_, max_positions);
  if (options.max_seq_len < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_seq_len must be >= 0 (0: the model's), got %d", options.max_seq_len));
  }
  if (options.max_seq_len > 0) max_context_ = std::min(max_context_, options.max_seq_len);
  if (options.max_seq_len == 0 && memory_budget.max_context() > 0) {
    max_context_ = std::min(max_context_, memory_budget.max_context());
  }
  // Uninitialized on purpose: RunStep writes every row it returns, and zero-filling up to
  // max_tokens_per_step x vocab floats (65 MB for 512 x 32000) cost ~55 ms of plan load to
  // first token; untouched pages are never faulted in.
  step_logits_.reset(
      new float[static_cast<size_t>(backend_->max_tokens_per_step()) * backend_->vocab_size()]);
  return absl::OkStatus();
}

std::unique_ptr<Session> Model::NewSession() {
  return std::unique_ptr<Session>(new Session(*this));
}

absl::Status Model::AppendBatch(absl::Span<AppendRequest> requests) {
  absl::flat_hash_set<const Session*> seen;
  int64_t blocks_needed = 0;
  for (size_t index = 0; index < requests.size(); ++index) {
    const AppendRequest& request = requests[index];
    if (request.session == nullptr || &request.session->model_ != this) {
      return absl::InvalidArgumentError(
          absl::StrFormat("append request %d: no session, or a session of another model", index));
    }
    if (!seen.insert(request.session).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("append request %d: its session appears twice in one batch", index));
    }
    if (request.tokens.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat("append request %d: no tokens", index));
    }
    for (size_t position = 0; position < request.tokens.size(); ++position) {
      const int32_t token = request.tokens[position];
      if (token < 0 || token >= vocab_size()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "append request %d: token %d at index %d is outside the vocabulary [0, %d)", index,
            token, position, vocab_size()));
      }
    }
    const int64_t total =
        request.session->num_tokens_ + static_cast<int64_t>(request.tokens.size());
    if (total > max_context_) {
      return absl::OutOfRangeError(absl::StrFormat(
          "append request %d: %d + %d tokens exceed the context of %d tokens", index,
          request.session->num_tokens_, request.tokens.size(), max_context_));
    }
    const int64_t have = static_cast<int64_t>(request.session->table_.blocks().size());
    blocks_needed += std::max<int64_t>(0, (total + kv_block_size() - 1) / kv_block_size() - have);
  }
  if (blocks_needed > pool_->num_free_blocks()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "KV cache: the batch needs %d more blocks of %d tokens, %d of %d are free", blocks_needed,
        kv_block_size(), pool_->num_free_blocks(), pool_->num_blocks()));
  }
  for (AppendRequest& request : requests) {
    Session& session = *request.session;
    // Cannot fail: the free blocks were counted above.
    if (absl::Status status = session.table_.Reserve(
            *pool_, session.num_tokens_ + static_cast<int64_t>(request.tokens.size()));
        !status.ok()) {
      return status;
    }
    request.logits.assign(
        (request.all_logits ? request.tokens.size() : 1) * static_cast<size_t>(vocab_size()), 0.0f);
  }

  cursors_.assign(requests.size(), 0);
  const int64_t vocab = vocab_size();
  while (true) {
    builder_->Clear();
    placements_.clear();
    for (size_t index = 0; index < requests.size() && builder_->free_tokens() > 0; ++index) {
      AppendRequest& request = requests[index];
      const int64_t remaining = static_cast<int64_t>(request.tokens.size()) - cursors_[index];
      if (remaining == 0) continue;
      const int32_t count =
          static_cast<int32_t>(std::min<int64_t>(remaining, builder_->free_tokens()));
      const bool finishes = count == remaining;
      const LogitRows rows = request.all_logits ? LogitRows::kAll
                             : finishes         ? LogitRows::kLast
                                                : LogitRows::kNone;
      builder_->AddSequence(request.tokens.data() + cursors_[index], count,
                            request.session->num_tokens_, request.session->table_, rows);
      placements_.push_back({index, cursors_[index], count});
    }
    if (builder_->batch().num_tokens() == 0) break;
    // One request whole in one step (every decode step of a lone session): its logit rows are
    // exactly request.logits, so the backend writes them there instead of through
    // step_logits_ (a copy of vocab floats a step: 600 KB at Qwen3's 151936).
    const bool direct = placements_.size() == 1 && placements_[0].first_token_index == 0 &&
                        placements_[0].count ==
                            static_cast<int64_t>(requests[placements_[0].request].tokens.size());
    float* step_out = direct ? requests[placements_[0].request].logits.data() : step_logits_.get();
    if (absl::Status status = RunStep(builder_->batch(), step_out); !status.ok()) {
      return status;
    }
    // Logit rows were appended in request order, so they are consumed in the same order.
    size_t logit_row = 0;
    auto consume = [&](const Placement& placement) {
      AppendRequest& request = requests[placement.request];
      const bool finishes = placement.first_token_index + placement.count ==
                            static_cast<int64_t>(request.tokens.size());
      if (direct) {
        // RunStep wrote the rows in place.
      } else if (request.all_logits) {
        std::memcpy(request.logits.data() + placement.first_token_index * vocab,
                    step_logits_.get() + logit_row * vocab,
                    sizeof(float) * vocab * placement.count);
        logit_row += placement.count;
      } else if (finishes) {
        std::memcpy(request.logits.data(), step_logits_.get() + logit_row * vocab,
                    sizeof(float) * vocab);
        ++logit_row;
      }
      request.session->num_tokens_ += placement.count;
      cursors_[placement.request] += placement.count;
    };
    for (const Placement& placement : placements_) consume(placement);
  }
  return absl::OkStatus();
}

absl::Status Model::RunStep(const StepBatch& batch, float* logits) {
  if (absl::Status status = backend_->RunStep(batch, logits); !status.ok()) return status;
  if (!moe_routers_.empty()) ReadExpertLoad();
  return absl::OkStatus();
}

void Model::ReadExpertLoad() {
  absl::Status status = backend_->LastStepExpertLoad(expert_load_);
  absl::StatusOr<int64_t> bytes =
      status.ok() ? ActiveExpertBytes(moe_routers_, expert_load_, active_experts_)
                  : absl::StatusOr<int64_t>(status);
  if (!bytes.ok()) {
    if (!warned_expert_load_) {
      std::fprintf(stderr,
                   "llmrt: %s: %s; expert metrics count every expert of a MoE layer as active\n",
                   backend_->name().c_str(), std::string(bytes.status().message()).c_str());
      warned_expert_load_ = true;
    }
    expert_tokens_.clear();
    active_experts_.assign(moe_routers_.size(), 0);
    active_expert_bytes_ = 0;
    for (size_t r = 0; r < moe_routers_.size(); ++r) {
      active_experts_[r] = moe_routers_[r].num_experts;
      active_expert_bytes_ += moe_routers_[r].bytes_per_expert * moe_routers_[r].num_experts;
    }
    return;
  }
  expert_tokens_.assign(expert_load_.counts.begin(), expert_load_.counts.end());
  active_expert_bytes_ = *bytes;
}

Session::~Session() { table_.Release(*model_.pool_); }

void Session::Reset() {
  table_.Release(*model_.pool_);
  num_tokens_ = 0;
}

absl::StatusOr<std::vector<float>> Session::Append(const std::vector<int32_t>& tokens,
                                                   bool all_logits) {
  AppendRequest request;
  request.session = this;
  request.tokens = tokens;
  request.all_logits = all_logits;
  if (absl::Status status = model_.AppendBatch(absl::MakeSpan(&request, 1)); !status.ok()) {
    return status;
  }
  return std::move(request.logits);
}

absl::StatusOr<QuantizedActivations> ParseQuantizedActivations(const std::string& text) {
  if (text == "int8") return QuantizedActivations::kInt8;
  if (text == "f32") return QuantizedActivations::kF32;
  return absl::InvalidArgumentError(
      absl::StrFormat("--quant-activations: expected int8 or f32, found \"%s\"", text));
}

namespace {

// The tensors an EXPERT_MATMUL reads: its weights and their quantization companions.
std::vector<int32_t> ExpertTensors(const plan::PlanMeta& meta, const plan::Op& op) {
  std::vector<int32_t> tensors;
  for (int32_t index : op.weights()) {
    if (index < 0 || index >= meta.tensors_size()) continue;  // CheckProgram refuses such plans
    tensors.push_back(index);
    const plan::Quantization& quantization = meta.tensors(index).quantization();
    if (quantization.has_scales()) tensors.push_back(quantization.scales());
    if (quantization.has_zero_points()) tensors.push_back(quantization.zero_points());
  }
  return tensors;
}

}  // namespace

std::vector<MoeRouter> ExpertBytes(const plan::PlanMeta& meta) {
  std::vector<MoeRouter> routers;
  absl::flat_hash_map<int32_t, size_t> router_of_ids;  // ids value -> router index
  for (const plan::Op& op : meta.program().ops()) {
    if (op.kind() == plan::ROUTER && op.outputs_size() > 0) {
      router_of_ids[op.outputs(0)] = routers.size();
      routers.push_back({op.router().num_experts(), op.router().top_k(), 0});
    }
  }
  for (const plan::Op& op : meta.program().ops()) {
    if (op.kind() != plan::EXPERT_MATMUL || op.inputs_size() < 2) continue;
    const auto router = router_of_ids.find(op.inputs(1));
    if (router == router_of_ids.end()) continue;  // CheckProgram refuses such plans
    MoeRouter& moe = routers[router->second];
    int64_t bytes = 0;
    for (int32_t index : ExpertTensors(meta, op)) {
      bytes += static_cast<int64_t>(meta.tensors(index).size_bytes());
    }
    moe.bytes_per_expert += moe.num_experts > 0 ? bytes / moe.num_experts : 0;
  }
  return routers;
}

absl::StatusOr<int64_t> ActiveExpertBytes(const std::vector<MoeRouter>& routers,
                                          const ExpertLoad& load,
                                          std::vector<int32_t>& active_experts) {
  int32_t widest = 0;
  for (const MoeRouter& router : routers) widest = std::max(widest, router.num_experts);
  const size_t num_routers = routers.size();
  if (load.num_routers != static_cast<int32_t>(num_routers) || load.num_experts != widest ||
      load.counts.size() != num_routers * widest) {
    return absl::InternalError(absl::StrFormat(
        "the backend reported the expert load of %d routers of %d experts (%d counts); the plan "
        "has %d routers of at most %d experts",
        load.num_routers, load.num_experts, load.counts.size(), num_routers, widest));
  }
  active_experts.assign(num_routers, 0);
  int64_t bytes = 0;
  for (size_t r = 0; r < num_routers; ++r) {
    const int32_t* counts = load.counts.data() + r * widest;
    active_experts[r] = static_cast<int32_t>(
        std::count_if(counts, counts + routers[r].num_experts, [](int32_t n) { return n > 0; }));
    bytes += routers[r].bytes_per_expert * active_experts[r];
  }
  return bytes;
}

int64_t DecodeWeightBytes(const plan::PlanMeta& meta) {
  absl::flat_hash_set<int32_t> skipped;  // expert weights and kernel code
  for (const plan::Op& op : meta.program().ops()) {
    if (op.kind() != plan::EXPERT_MATMUL) continue;
    for (int32_t index : ExpertTensors(meta, op)) skipped.insert(index);
  }
  for (const plan::KernelTable& table : meta.program().kernel_tables()) {
    for (const plan::KernelTable::Kernel& kernel : table.kernels()) {
      // code_tensor is a plain int32 (0 when unset, a valid index): only kernels with code.
      if (kernel.code_size() > 0) skipped.insert(kernel.code_tensor());
    }
  }
  int64_t bytes = 0;
  for (int32_t index = 0; index < meta.tensors_size(); ++index) {
    if (skipped.contains(index)) continue;
    const plan::Tensor& tensor = meta.tensors(index);
    int64_t size = static_cast<int64_t>(tensor.size_bytes());
    if (tensor.name() == "model.embed_tokens.weight" && !meta.config().tie_word_embeddings() &&
        tensor.shape_size() > 0 && tensor.shape(0) > 0) {
      size /= tensor.shape(0);
    }
    bytes += size;
  }
  return bytes;
}

}  // namespace llmrt::engine
