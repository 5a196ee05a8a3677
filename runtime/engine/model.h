// Model and Session: the engine's entry points for running a plan.
//
// A Model owns the mapped plan (or borrows in-memory weights), a backend, the KV block pool
// and the backend's KV cache. Sessions are sequences: each holds a block table and a token
// count, and appends tokens through the Model, alone (Session::Append) or together with other
// sessions in shared steps (Model::AppendBatch). Appends are split into steps of at most
// max_tokens_per_step tokens (chunked prefill).
//
// Ownership: a Session borrows its Model, which must outlive it. Thread-safety: none; one
// thread drives a Model and all of its sessions.
#ifndef LLMRT_ENGINE_MODEL_H_
#define LLMRT_ENGINE_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "runtime/backend/backend.h"
#include "runtime/engine/step_builder.h"
#include "runtime/kv/block_pool.h"
#include "runtime/plan/plan_reader.h"

namespace llmrt::engine {

// Which backend runs the plan.
enum class BackendChoice {
  kAuto,  // CUDA when the plan carries CUDA kernels and a GPU works, else the CPU
  kCpu,
  kCuda,  // CUDA or an error saying why not
};

struct ModelOptions {
  BackendChoice backend = BackendChoice::kAuto;
  int32_t num_threads = 0;    // 0: one per allowed CPU (ThreadPool::DefaultThreadCount)
  int32_t kv_block_size = 0;  // 0: the plan's KvCacheSpec.default_block_size, else 16
  // KV pool size, first that is set: kv_cache_tokens (tokens over all sessions), kv_memory_bytes
  // (a byte budget for K and V of every layer), kv_memory_fraction (of the memory the system
  // has available now, MemAvailable in /proc/meminfo). None set: the plan's
  // max_position_embeddings capped at 8192 (one full-length session of most models; 8192 x
  // 256 KiB = 2 GiB for Llama-3-8B).
  int64_t kv_cache_tokens = 0;
  int64_t kv_memory_bytes = 0;
  double kv_memory_fraction = 0.0;  // (0, 1]
  int32_t max_tokens_per_step = 256;
  // The most tokens one sequence may hold (prompt + generated); 0: the plan's
  // max_position_embeddings. Longer prompts are refused up front.
  int64_t max_seq_len = 0;
  bool verify = false;  // check every blob's checksum when opening the plan
  // KV cache element type (F32, F16, BF16, I8); DTYPE_UNSPECIFIED: the plan's
  // KvCacheSpec.dtype. kv_block_bytes and the kv_memory_* budgets follow it.
  plan::DType kv_cache_dtype = plan::DTYPE_UNSPECIFIED;
  // Passed to the backend (BackendOptions::matmul_observer); the CPU backend honours it.
  MatmulObserver matmul_observer;
  // Passed to the backend (BackendOptions::quantized_activations); the CPU backend honours it.
  QuantizedActivations quantized_activations = QuantizedActivations::kInt8;
};

class Session;

// Weight bytes one decode step reads from memory besides the experts: every tensor of the plan
// except the expert weights (EXPERT_MATMUL's weights, their quantization companions and
// biases) and the CUDA kernels' code (KernelTable code_tensor: loaded once into the module,
// never read by a step), and an embedding table not shared with the LM head is read one row
// per token. A step's MoE layers add the experts its tokens chose (ActiveExpertBytes,
// Model::last_step_active_expert_bytes).
// What MBU figures (`llmrt bench`, the server's decode gauge) divide by the step time.
int64_t DecodeWeightBytes(const plan::PlanMeta& meta);

// One ROUTER op of a plan (a MoE layer), in program order.
struct MoeRouter {
  int32_t num_experts = 0;
  int32_t top_k = 0;
  // Bytes of one expert: the weights, quantization companions and biases of every
  // EXPERT_MATMUL reading this router's ids, divided by num_experts (experts are equal slices).
  int64_t bytes_per_expert = 0;
};
// The plan's ROUTER ops; empty for a dense plan.
std::vector<MoeRouter> ExpertBytes(const plan::PlanMeta& meta);

// What one step's routing (`load`, from Backend::LastStepExpertLoad) read of `routers`' experts:
// active_experts[r] = the experts of MoE layer r chosen by at least one token of the step (the
// batch's expert union); returns their bytes, the sum over layers of union x bytes_per_expert.
// The one place that turns expert load into the bytes MBU divides by (Model::RunStep, the GPU
// kit's bench). InternalError, naming both sides, when `load` does not describe `routers`
// (router count, the widest router's experts, the count table's size).
absl::StatusOr<int64_t> ActiveExpertBytes(const std::vector<MoeRouter>& routers,
                                          const ExpertLoad& load,
                                          std::vector<int32_t>& active_experts);

// "int8" or "f32" (the --quant-activations flag of llmrt run / bench); an error names the text.
absl::StatusOr<QuantizedActivations> ParseQuantizedActivations(const std::string& text);

// One session's share of a Model::AppendBatch call.
struct AppendRequest {
  Session* session = nullptr;
  std::vector<int32_t> tokens;
  bool all_logits = false;
  // Out: all_logits ? tokens.size() rows : 1 row (the last token), of vocab_size() floats.
  std::vector<float> logits;
};

class Model {
 public:
  static absl::StatusOr<std::unique_ptr<Model>> Load(const std::string& plan_path,
                                                     const ModelOptions& options);
  // From a meta and weights in memory (tests, self-checks); `blobs` must outlive the Model.
  static absl::StatusOr<std::unique_ptr<Model>> Create(const plan::PlanMeta& meta,
                                                       const BlobLookup& blobs,
                                                       const ModelOptions& options);
  ~Model();

  const plan::PlanMeta& meta() const { return *meta_; }
  // Why the CUDA kernels of a plan that has them are not used ("" when they are, or when the
  // plan has none); tools print it so a silent CPU fallback never hides a broken GPU setup.
  const std::string& backend_note() const { return backend_note_; }
  const plan::Plan* plan() const { return plan_.get(); }  // nullptr when created from memory
  int64_t vocab_size() const { return backend_->vocab_size(); }
  // The most tokens one session may hold: the smallest of max_position_embeddings (if set),
  // max_seq_len (if set) and the KV pool.
  int64_t max_context() const { return max_context_; }
  int32_t kv_block_size() const { return pool_->block_size(); }
  const kv::BlockPool& block_pool() const { return *pool_; }
  // For the Engine, which schedules the pool's blocks itself.
  kv::BlockPool& mutable_block_pool() { return *pool_; }
  // Bytes one block of KV takes (K and V, every layer); 0 for a plan without attention.
  int64_t kv_block_bytes() const { return kv_block_bytes_; }
  Backend& backend() { return *backend_; }

  // One backend step; for a MoE plan it then reads how the step routed its tokens (below).
  // Every step of a Model or an Engine runs through here.
  absl::Status RunStep(const StepBatch& batch, float* logits);
  // The plan's MoE layers (ExpertBytes); empty for a dense plan.
  const std::vector<MoeRouter>& moe_routers() const { return moe_routers_; }
  // The last RunStep's routing, per MoE layer r: experts chosen by at least one token (the
  // batch's expert union), and tokens per expert at [r * moe_num_experts() + e]. A backend that
  // does not record expert load (Backend::LastStepExpertLoad unimplemented) gets every expert
  // counted as active (an upper bound, said once on stderr) and no token counts (empty).
  int32_t moe_num_experts() const { return moe_num_experts_; }
  const std::vector<int32_t>& last_step_active_experts() const { return active_experts_; }
  const std::vector<int32_t>& last_step_expert_tokens() const { return expert_tokens_; }
  // Bytes of the experts the last step read: sum over MoE layers of union x bytes_per_expert.
  int64_t last_step_active_expert_bytes() const { return active_expert_bytes_; }

  std::unique_ptr<Session> NewSession();

  // Appends every request's tokens to its session, running as many steps as needed; all
  // sessions share each step. Checks everything first (distinct sessions of this model,
  // non-empty tokens inside the vocabulary, context and KV pool room), so on such errors no
  // session changes. A failing step leaves each session at its last completed step.
  absl::Status AppendBatch(absl::Span<AppendRequest> requests);

 private:
  Model() = default;
  absl::Status Init(const BlobLookup& blobs, const ModelOptions& options);

  std::unique_ptr<plan::Plan> plan_;
  std::unique_ptr<plan::PlanMeta> owned_meta_;
  const plan::PlanMeta* meta_ = nullptr;
  std::unique_ptr<Backend> backend_;
  std::string backend_note_;
  std::unique_ptr<kv::BlockPool> pool_;
  std::unique_ptr<StepBuilder> builder_;
  std::unique_ptr<float[]> step_logits_;  // max_tokens_per_step rows of vocab_size
  std::vector<int64_t> cursors_;          // per request of the running AppendBatch: tokens done
  // Which tokens of which request the current step holds (capacity kept between steps).
  struct Placement {
    size_t request;
    int64_t first_token_index;
    int32_t count;
  };
  std::vector<Placement> placements_;
  int64_t max_context_ = 0;
  int64_t kv_block_bytes_ = 0;
  // MoE accounting (RunStep).
  void ReadExpertLoad();
  std::vector<MoeRouter> moe_routers_;
  int32_t moe_num_experts_ = 0;  // the widest router's
  ExpertLoad expert_load_;
  std::vector<int32_t> active_experts_;
  std::vector<int32_t> expert_tokens_;
  int64_t active_expert_bytes_ = 0;
  bool warned_expert_load_ = false;
  friend class Session;
};

class Session {
 public:
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Appends `tokens`; returns the logits of every appended position (all_logits: row-major
  // [tokens.size(), vocab_size]) or of the last one ([vocab_size]).
  absl::StatusOr<std::vector<float>> Append(const std::vector<int32_t>& tokens, bool all_logits);

  int64_t num_tokens() const { return num_tokens_; }
  // Forgets every token and returns the blocks to the pool.
  void Reset();

 private:
  explicit Session(Model& model) : model_(model) {}
  Model& model_;
  kv::BlockTable table_;
  int64_t num_tokens_ = 0;
  friend class Model;
};

}  // namespace llmrt::engine

#endif  // LLMRT_ENGINE_MODEL_H_
