#include "runtime/backend/cuda/kernel_backend.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_format.h"
#include "runtime/backend/step_batch_check.h"
#include "runtime/plan/dtype.h"
#include "runtime/plan/plan_reader.h"
#include "runtime/plan/program_check.h"

namespace llmrt::cuda {
namespace {

using Kernel = plan::KernelTable::Kernel;

// Device buffers are carved at 256-byte boundaries: the alignment cudaMalloc guarantees and
// the widest access (128-bit vectors, 128-byte transactions) any kernel makes.
constexpr uint64_t kDeviceAlignment = 256;

uint64_t AlignUp(uint64_t value) {
  return (value + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
}

// The layout every generated kernel was compiled against (kernel_params.h): 18 addresses, 4
// ints, the 2 addresses added for int8 KV caches, then the 2 added for mixture of experts.
static_assert(sizeof(LlmcKernelParams) == 224, "kernel_params.h changed: update its comment");

// Metadata arrays of a step, max_tokens i32 each (RunStep): token ids, positions, slots,
// query index, block table offset, logit rows, then the prefill tiles as (first, count) pairs
// (at most one tile per token: 2 arrays).
constexpr int kMetadataArrays = 8;

struct OpLaunch {
  plan::OpKind kind = plan::OP_UNSPECIFIED;
  LlmcKernelParams params = {};
  std::vector<int32_t> kernels;
  int32_t layer = 0;
};

// Bytes per KV cache element for KvCacheSpec.dtype (I8: the codes; scales come on top).
absl::StatusOr<int> KvElementBytes(plan::DType dtype) {
  switch (dtype) {
    case plan::DTYPE_UNSPECIFIED:
    case plan::F32:
      return 4;
    case plan::F16:
    case plan::BF16:
      return 2;
    case plan::I8:
      return 1;
    default:
      return absl::UnimplementedError(
          absl::StrFormat("KV cache dtype %s has no CUDA kernels (F32, F16, BF16 and I8 do)",
                          plan::DType_Name(dtype)));
  }
}

class KernelBackend final : public KernelStepBackend {
 public:
  KernelBackend(std::unique_ptr<Device> device, std::string name)
      : device_(std::move(device)), name_(std::move(name)) {}
  ~KernelBackend() override {
    for (DevicePointer pointer : allocations_) device_->Free(pointer);
    if (kv_ != 0) device_->Free(kv_);
    if (block_tables_ != 0) device_->Free(block_tables_);
  }

  std::string name() const override { return name_; }
  // The CUDA kernels are generated per plan (llmc --target cuda): this backend runs what its
  // kernel table binds to its own program's ops. A ROPE with no kernel of its own is fused into
  // the attention that reads it.
  absl::Status Supports(const plan::PlanMeta& meta, int op_index) const override {
    if (op_index < 0 || op_index >= meta.program().ops_size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("program op %d outside [0, %d)", op_index, meta.program().ops_size()));
    }
    const plan::OpKind kind = meta.program().ops(op_index).kind();
    if (op_index >= static_cast<int>(ops_.size()) || ops_[op_index].kind != kind) {
      return absl::UnimplementedError(absl::StrFormat(
          "program op %d (%s): %s holds kernels for its own plan's ops only; compile this plan "
          "with llmc --target cuda for its kernels",
          op_index, plan::OpKind_Name(kind), name_));
    }
    if (ops_[op_index].kernels.empty() && kind != plan::ROPE) {
      return absl::UnimplementedError(
          absl::StrFormat("program op %d (%s): the kernel table binds no kernel to it", op_index,
                          plan::OpKind_Name(kind)));
    }
    return absl::OkStatus();
  }
  absl::Status AllocateKvCache(int32_t num_blocks, int32_t block_size) override;
  absl::Status RunStep(const StepBatch& batch, float* logits) override;
  int32_t top_k() const override { return top_k_; }
  absl::Status RunStepTopK(const StepBatch& batch, float* values, int32_t* ids) override;
  absl::Status CopyKvBlock(int32_t source, int32_t destination) override;
  int32_t max_tokens_per_step() const override { return max_tokens_; }
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t arena_bytes() const override { return arena_bytes_; }
  int64_t kv_cache_bytes() const override { return kv_bytes_; }
  absl::Status LastStepExpertLoad(ExpertLoad& load) const override;

  absl::Status Create(const plan::PlanMeta& meta, const plan::KernelTable& table,
                      const BlobLookup& blobs, const BackendOptions& options);

 private:
  absl::StatusOr<DevicePointer> Allocate(uint64_t bytes) {
    absl::StatusOr<DevicePointer> pointer = device_->Allocate(std::max<uint64_t>(bytes, 1));
    if (pointer.ok()) allocations_.push_back(*pointer);
    return pointer;
  }
  // An I8 cache's f32 scales per slot, for K (or V) of one layer; 0 for other dtypes.
  int64_t KvScaleBytesPerSlot() const {
    return kv_scaled_ ? int64_t{kv_heads_} * static_cast<int64_t>(sizeof(float)) : 0;
  }
  // Where the scale planes start: after every code plane, at a device-aligned offset (the
  // int8 code planes may end anywhere; f32 loads need 4-byte alignment).
  uint64_t KvScalesOffset() const {
    return AlignUp(uint64_t{2} * kv_layers_ * num_blocks_ * block_size_ * kv_width_ *
                   kv_element_bytes_);
  }
  absl::Status CheckBatch(const StepBatch& batch) const;
  // Uploads the step's metadata and launches every op's kernels.
  absl::Status Execute(const StepBatch& batch);
  absl::Status Launch(int32_t kernel, const LlmcKernelParams& params, int64_t tokens,
                      int64_t logit_rows);
  // After a step: one device-to-host copy of the routers' expert counts (record_expert_load).
  absl::Status ReadExpertLoad();

  std::unique_ptr<Device> device_;
  std::string name_;
  std::vector<DevicePointer> allocations_;
  std::vector<Kernel> kernels_;
  std::vector<OpLaunch> ops_;
  int32_t max_tokens_ = 0;
  int64_t vocab_size_ = 0;
  int64_t max_token_id_ = 0;  // exclusive
  int64_t arena_bytes_ = 0;
  DevicePointer arena_ = 0;
  DevicePointer metadata_ = 0;  // 6 x max_tokens i32: see RunStep
  DevicePointer logits_ = 0;
  DevicePointer scratch_ = 0;
  // Logits top-k prefilter output: [max_tokens, top_k_] f32 values and i32 ids.
  int32_t top_k_ = 0;
  DevicePointer top_values_ = 0;
  DevicePointer top_ids_ = 0;
  // KV cache: kv_layers_ x {K, V} x num_slots x kv_width_ elements of kv_element_bytes_,
  // then, for an I8 cache, at KvScalesOffset(), kv_layers_ x {K, V} x num_slots x kv_heads_ f32
  // scales (the layout of runtime/kv/kv_storage.h), one allocation.
  int32_t kv_layers_ = 0;
  int64_t kv_width_ = 0;
  int32_t kv_heads_ = 0;
  int kv_element_bytes_ = 4;
  bool kv_scaled_ = false;
  int32_t num_blocks_ = 0;
  int32_t block_size_ = 0;
  DevicePointer kv_ = 0;
  int64_t kv_bytes_ = 0;
  DevicePointer block_tables_ = 0;
  int64_t block_tables_capacity_ = 0;  // i32 entries
  std::vector<int32_t> host_metadata_;
  std::vector<int32_t> host_block_tables_;
  // BackendOptions::record_expert_load: i32 [num_routers_, max_experts_] on the device (ROUTER
  // op r counts into row r), zeroed with the step's metadata upload, and its last step's copy.
  bool record_expert_load_ = false;
  bool stepped_ = false;
  int32_t num_routers_ = 0;
  int32_t max_experts_ = 0;
  DevicePointer expert_counts_ = 0;
  std::vector<int32_t> host_expert_counts_;
};

absl::Status KernelBackend::Create(const plan::PlanMeta& meta, const plan::KernelTable& table,
                                   const BlobLookup& blobs, const BackendOptions& options) {
  // The one program validator; what the kernels additionally need, EmitCuda checked when it
  // emitted this table (and the table is checked against the program below).
  absl::StatusOr<plan::ProgramFacts> facts = plan::CheckProgram(meta, blobs);
  if (!facts.ok()) return facts.status();
  if (options.max_tokens_per_step <= 0 || options.max_tokens_per_step > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "max_tokens_per_step must be in [1, 2^20], got %d", options.max_tokens_per_step));
  }
  max_tokens_ = options.max_tokens_per_step;
  vocab_size_ = facts->vocab_size;
  // The generated kernels read the cache dtype the plan was compiled for; another one needs
  // another plan.
  const plan::DType plan_kv_dtype =
      meta.kv_cache().dtype() == plan::DTYPE_UNSPECIFIED ? plan::F32 : meta.kv_cache().dtype();
  if (options.kv_cache_dtype != plan::DTYPE_UNSPECIFIED &&
      options.kv_cache_dtype != plan_kv_dtype) {
    return absl::UnimplementedError(absl::StrFormat(
        "KV cache dtype %s: the plan's CUDA kernels read a %s cache; compile the plan with "
        "--kv-cache for another dtype, or run it on the cpu backend",
        plan::DType_Name(options.kv_cache_dtype), plan::DType_Name(plan_kv_dtype)));
  }
  absl::StatusOr<int> kv_element_bytes = KvElementBytes(meta.kv_cache().dtype());
  if (!kv_element_bytes.ok()) return kv_element_bytes.status();
  kv_element_bytes_ = *kv_element_bytes;
  kv_scaled_ = meta.kv_cache().dtype() == plan::I8;
  const plan::Program& program = meta.program();
  if (table.op_kernels_size() != program.ops_size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("kernel table %s: %d op bindings for %d program ops", table.target(),
                        table.op_kernels_size(), program.ops_size()));
  }
  kernels_.assign(table.kernels().begin(), table.kernels().end());
  // Scratch: the most any kernel needs at max_tokens (attention partials per token, expert
  // grouping tables per token plus a fixed part).
  uint64_t scratch_floats = 0;
  for (const Kernel& kernel : kernels_) {
    if (kernel.block_x() == 0 || kernel.block_x() > 1024 || kernel.grid_scaled_axis() < -1 ||
        kernel.grid_scaled_axis() > 2 ||
        (kernel.grid_scaled_axis() >= 0 && kernel.grid_rows_per_block() <= 0)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "kernel table %s: kernel %s has block %d, scaled axis %d, rows per block %d",
          table.target(), kernel.name(), kernel.block_x(), kernel.grid_scaled_axis(),
          kernel.grid_rows_per_block()));
    }
    if (kernel.scratch_floats_per_token() < 0 || kernel.scratch_floats_fixed() < 0 ||
        kernel.grid_extra_blocks() < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("kernel table %s: kernel %s has negative scratch_floats_per_token, "
                          "scratch_floats_fixed or grid_extra_blocks",
                          table.target(), kernel.name()));
    }
    scratch_floats = std::max<uint64_t>(
        scratch_floats, static_cast<uint64_t>(kernel.scratch_floats_per_token()) * max_tokens_ +
                            kernel.scratch_floats_fixed());
  }

  arena_bytes_ = program.arena_bytes_per_token() * max_tokens_;
  auto arena = Allocate(arena_bytes_);
  if (!arena.ok()) return arena.status();
  arena_ = *arena;
  auto metadata = Allocate(uint64_t{kMetadataArrays} * max_tokens_ * sizeof(int32_t));
  if (!metadata.ok()) return metadata.status();
  metadata_ = *metadata;
  auto logits = Allocate(static_cast<uint64_t>(max_tokens_) * vocab_size_ * sizeof(float));
  if (!logits.ok()) return logits.status();
  logits_ = *logits;
  auto scratch = Allocate(scratch_floats * 4);
  if (!scratch.ok()) return scratch.status();
  scratch_ = *scratch;

  // Weights: each tensor an op references, uploaded once.
  std::vector<DevicePointer> weights(meta.tensors_size(), 0);
  auto weight = [&](int32_t tensor) -> absl::StatusOr<DevicePointer> {
    if (weights[tensor] != 0) return weights[tensor];
    const uint8_t* bytes = blobs(tensor);
    const uint64_t size = meta.tensors(tensor).size_bytes();
    auto pointer = Allocate(size);
    if (!pointer.ok()) return pointer.status();
    if (absl::Status status = device_->CopyToDevice(*pointer, bytes, size); !status.ok()) {
      return status;
    }
    weights[tensor] = *pointer;
    return *pointer;
  };
  auto activation = [&](int32_t id) -> unsigned long long {
    const plan::Value& value = program.values(id);
    if (value.kind() != plan::Value::ACTIVATION && value.kind() != plan::Value::EXPERT_IDS)
      return 0;
    return arena_ + static_cast<uint64_t>(max_tokens_) * value.arena_offset_per_token();
  };
  // Fused ROPE ops (bound to no kernel): their output is never written, so the attention that
  // reads it as q or k reads the ROPE's input instead; nothing else may read it.
  std::vector<int32_t> rope_source(program.values_size(), -1);
  for (int index = 0; index < program.ops_size(); ++index) {
    const plan::Op& op = program.ops(index);
    if (op.kind() == plan::ROPE && table.op_kernels(index).kernels_size() == 0) {
      rope_source[op.outputs(0)] = op.inputs(0);
    }
  }
  for (int index = 0; index < program.ops_size(); ++index) {
    const plan::Op& op = program.ops(index);
    for (int i = 0; i < op.inputs_size(); ++i) {
      if (rope_source[op.inputs(i)] >= 0 && !(op.kind() == plan::ATTENTION && i < 2)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "kernel table %s: op %d reads value %d of a ROPE op bound to no kernel; only an "
            "ATTENTION op's q and k may (the rope is fused into its kernels)",
            table.target(), index, op.inputs(i)));
      }
    }
  }

  record_expert_load_ = options.record_expert_load;
  num_routers_ = facts->num_routers;
  max_experts_ = facts->max_experts;
  if (record_expert_load_ && num_routers_ > 0) {
    host_expert_counts_.assign(static_cast<size_t>(num_routers_) * max_experts_, 0);
    auto counts = Allocate(host_expert_counts_.size() * sizeof(int32_t));
    if (!counts.ok()) return counts.status();
    expert_counts_ = *counts;
  }
  int32_t router = 0;
  for (int index = 0; index < program.ops_size(); ++index) {
    const plan::Op& op = program.ops(index);
    OpLaunch launch;
    launch.kind = op.kind();
    launch.layer = op.attention().layer();
    for (int32_t kernel : table.op_kernels(index).kernels()) {
      if (kernel < 0 || kernel >= static_cast<int32_t>(kernels_.size())) {
        return absl::InvalidArgumentError(
            absl::StrFormat("kernel table %s: op %d uses kernel %d, outside [0, %d)",
                            table.target(), index, kernel, kernels_.size()));
      }
      launch.kernels.push_back(kernel);
    }
    // Kernels per op (plan.proto KernelTable.OpKernels): the fewest and the most.
    size_t fewest = 1, most = 1;
    if (op.kind() == plan::ATTENTION) fewest = 3, most = 4;
    if (op.kind() == plan::MATMUL || op.kind() == plan::LOGITS) most = 2;
    if (op.kind() == plan::EXPERT_MATMUL) fewest = 2, most = 3;  // group, gemv (, gemm)
    if (op.kind() == plan::ROPE) fewest = 0;
    if (launch.kernels.size() < fewest || launch.kernels.size() > most) {
      return absl::InvalidArgumentError(
          absl::StrFormat("kernel table %s: op %d (kind %d) has %d kernels", table.target(), index,
                          static_cast<int>(op.kind()), launch.kernels.size()));
    }
    LlmcKernelParams& params = launch.params;
    for (int i = 0; i < op.inputs_size() && i < 4; ++i) {
      const int32_t source = rope_source[op.inputs(i)];
      (i < 3 ? params.input[i] : params.input3) = activation(source >= 0 ? source : op.inputs(i));
    }
    if (op.kind() == plan::ROUTER) {
      if (expert_counts_ != 0) {
        params.expert_counts = expert_counts_ + uint64_t{sizeof(int32_t)} * router *
                                                    static_cast<uint64_t>(max_experts_);
      }
      ++router;
    }
    for (int i = 0; i < op.outputs_size() && i < 3; ++i) {
      params.output[i] = activation(op.outputs(i));
    }
    if (op.kind() == plan::LOGITS) {
      params.output[0] = logits_;
      if (launch.kernels.size() == 2) {
        top_k_ = static_cast<int32_t>(std::min<int64_t>(kLogitsTopK, vocab_size_));
        const uint64_t bytes = static_cast<uint64_t>(max_tokens_) * top_k_ * 4;
        auto values = Allocate(bytes);
        if (!values.ok()) return values.status();
        auto ids = Allocate(bytes);
        if (!ids.ok()) return ids.status();
        top_values_ = *values;
        top_ids_ = *ids;
        params.output[1] = top_values_;
        params.output[2] = top_ids_;
      }
    }
    if (op.weights_size() >= 1) {
      auto pointer = weight(op.weights(0));
      if (!pointer.ok()) return pointer.status();
      params.weight = *pointer;
      // A quantized matrix's scales, zero points and permutation (validated by CheckProgram
      // above) go along with its codes.
      const plan::Quantization& quantization = meta.tensors(op.weights(0)).quantization();
      const plan::DType dtype = meta.tensors(op.weights(0)).dtype();
      if (dtype == plan::I8 || dtype == plan::I4 || dtype == plan::FP4_E2M1) {
        const int32_t parts[3] = {
            quantization.has_scales() ? quantization.scales() : -1,
            quantization.has_zero_points() ? quantization.zero_points() : -1,
            quantization.has_input_permutation() ? quantization.input_permutation() : -1};
        unsigned long long* targets[3] = {&params.scales, &params.zero_points,
                                          &params.input_permutation};
        for (int part = 0; part < 3; ++part) {
          if (parts[part] < 0) continue;
          if (parts[part] >= meta.tensors_size()) {
            return absl::InvalidArgumentError(
                absl::StrFormat("tensor %s: quantization tensor %d outside the table",
                                meta.tensors(op.weights(0)).name(), parts[part]));
          }
          auto part_pointer = weight(parts[part]);
          if (!part_pointer.ok()) return part_pointer.status();
          *targets[part] = *part_pointer;
        }
      }
    }
    if (op.weights_size() >= 2) {
      auto pointer = weight(op.weights(1));
      if (!pointer.ok()) return pointer.status();
      params.bias = *pointer;
    }

    params.scratch = scratch_;
    ops_.push_back(std::move(launch));
  }
  max_token_id_ = facts->max_token_id;
  kv_layers_ = facts->kv_layers;
  kv_heads_ = facts->kv_heads;
  kv_width_ = static_cast<int64_t>(facts->kv_heads) * facts->kv_head_dim;
  host_metadata_.resize(kMetadataArrays * static_cast<size_t>(max_tokens_));
  return absl::OkStatus();
}

absl::Status KernelBackend::AllocateKvCache(int32_t num_blocks, int32_t block_size) {
  if (kv_ != 0) device_->Free(kv_);
  kv_ = 0;
  kv_bytes_ = 0;
  if (num_blocks <= 0 || block_size <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "AllocateKvCache: %d blocks of %d tokens, both must be positive", num_blocks, block_size));
  }
  num_blocks_ = num_blocks;
  block_size_ = block_size;
  if (kv_layers_ == 0) return absl::OkStatus();
  const uint64_t bytes =
      KvScalesOffset() + uint64_t{2} * kv_layers_ * num_blocks * block_size * KvScaleBytesPerSlot();
  absl::StatusOr<DevicePointer> kv = device_->Allocate(bytes);
  if (!kv.ok()) return kv.status();
  kv_ = *kv;
  kv_bytes_ = static_cast<int64_t>(bytes);
  return absl::OkStatus();
}

absl::Status KernelBackend::CopyKvBlock(int32_t source, int32_t destination) {
  if (kv_ == 0) return absl::FailedPreconditionError("KV cache not allocated");
  if (source < 0 || source >= num_blocks_ || destination < 0 || destination >= num_blocks_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CopyKvBlock: blocks %d -> %d outside [0, %d)", source, destination, num_blocks_));
  }
  const uint64_t block_bytes = static_cast<uint64_t>(block_size_) * kv_width_ * kv_element_bytes_;
  const uint64_t plane_bytes = block_bytes * num_blocks_;
  for (int plane = 0; plane < 2 * kv_layers_; ++plane) {
    const DevicePointer base = kv_ + plane * plane_bytes;
    if (absl::Status status = device_->CopyOnDevice(base + destination * block_bytes,
                                                    base + source * block_bytes, block_bytes);
        !status.ok()) {
      return status;
    }
  }
  if (!kv_scaled_) return absl::OkStatus();
  const uint64_t scale_block_bytes = static_cast<uint64_t>(block_size_) * KvScaleBytesPerSlot();
  const uint64_t scale_plane_bytes = scale_block_bytes * num_blocks_;
  for (int plane = 0; plane < 2 * kv_layers_; ++plane) {
    const DevicePointer base = kv_ + KvScalesOffset() + plane * scale_plane_bytes;
    if (absl::Status status =
            device_->CopyOnDevice(base + destination * scale_block_bytes,
                                  base + source * scale_block_bytes, scale_block_bytes);
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

absl::Status KernelBackend::CheckBatch(const StepBatch& batch) const {
  StepLimits limits;
  limits.max_tokens = max_tokens_;
  limits.max_token_id = max_token_id_;
  limits.has_kv_layers = kv_layers_ > 0;
  limits.kv_allocated = kv_ != 0;
  limits.num_blocks = num_blocks_;
  limits.block_size = block_size_;
  return CheckStepBatch(batch, limits);
}

absl::Status KernelBackend::Launch(int32_t kernel_index, const LlmcKernelParams& params,
                                   int64_t tokens, int64_t logit_rows) {
  const Kernel& kernel = kernels_[kernel_index];
  LaunchGeometry geometry;
  geometry.grid[0] = std::max<uint32_t>(kernel.grid_x(), 1);
  geometry.grid[1] = std::max<uint32_t>(kernel.grid_y(), 1);
  geometry.grid[2] = std::max<uint32_t>(kernel.grid_z(), 1);
  geometry.block[0] = kernel.block_x();
  if (kernel.grid_scaled_axis() >= 0) {
    const int64_t rows = kernel.grid_rows() == Kernel::GRID_ROWS_LOGITS ? logit_rows : tokens;
    const int64_t units = rows * std::max<int64_t>(kernel.grid_row_multiplier(), 1);
    if (units == 0) return absl::OkStatus();
    const int64_t extent =
        (units + kernel.grid_rows_per_block() - 1) / kernel.grid_rows_per_block() +
        kernel.grid_extra_blocks();
    geometry.grid[kernel.grid_scaled_axis()] = static_cast<uint32_t>(extent);
  }
  return device_->Launch(kernel_index, geometry, params);
}

absl::Status KernelBackend::RunStep(const StepBatch& batch, float* logits) {
  if (absl::Status status = CheckBatch(batch); !status.ok()) return status;
  if (batch.num_tokens() == 0) return absl::OkStatus();
  if (absl::Status status = Execute(batch); !status.ok()) return status;
  if (absl::Status status = ReadExpertLoad(); !status.ok()) return status;
  const uint64_t num_rows = batch.logit_rows.size();
  if (num_rows > 0) {
    if (absl::Status status =
            device_->CopyToHost(logits, logits_, num_rows * vocab_size_ * sizeof(float));
        !status.ok()) {
      return status;
    }
  }
  return device_->Synchronize();
}

absl::Status KernelBackend::RunStepTopK(const StepBatch& batch, float* values, int32_t* ids) {
  if (top_k_ == 0) {
    return absl::FailedPreconditionError(
        "RunStepTopK: the plan's LOGITS op has no top-k prefilter kernel");
  }
  if (absl::Status status = CheckBatch(batch); !status.ok()) return status;
  if (batch.num_tokens() == 0) return absl::OkStatus();
  if (absl::Status status = Execute(batch); !status.ok()) return status;
  if (absl::Status status = ReadExpertLoad(); !status.ok()) return status;
  const uint64_t bytes = batch.logit_rows.size() * top_k_ * sizeof(float);
  if (bytes > 0) {
    if (absl::Status status = device_->CopyToHost(values, top_values_, bytes); !status.ok()) {
      return status;
    }
    if (absl::Status status = device_->CopyToHost(ids, top_ids_, bytes); !status.ok()) {
      return status;
    }
  }
  return device_->Synchronize();
}

absl::Status KernelBackend::ReadExpertLoad() {
  stepped_ = true;
  if (expert_counts_ == 0) return absl::OkStatus();
  return device_->CopyToHost(host_expert_counts_.data(), expert_counts_,
                             host_expert_counts_.size() * sizeof(int32_t));
}

absl::Status KernelBackend::LastStepExpertLoad(ExpertLoad& load) const {
  if (!record_expert_load_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: expert load is recorded only with BackendOptions::record_expert_load", name_));
  }
  if (!stepped_) return absl::FailedPreconditionError(name_ + ": no step has run yet");
  load.num_routers = num_routers_;
  load.num_experts = max_experts_;
  load.counts = host_expert_counts_;
  return absl::OkStatus();
}

absl::Status KernelBackend::Execute(const StepBatch& batch) {
  const int32_t num_tokens = batch.num_tokens();
  const int32_t num_rows = static_cast<int32_t>(batch.logit_rows.size());

  // Metadata, one upload: token ids | positions | slots | query index | block table offset |
  // logit rows | tiles (2 arrays), max_tokens i32 each; the block tables go to their own
  // growable buffer.
  int32_t* token_ids = host_metadata_.data();
  int32_t* positions = token_ids + max_tokens_;
  int32_t* slots = positions + max_tokens_;
  int32_t* query_index = slots + max_tokens_;
  int32_t* table_offset = query_index + max_tokens_;
  int32_t* row_index = table_offset + max_tokens_;
  std::copy(batch.token_ids.begin(), batch.token_ids.end(), token_ids);
  std::copy(batch.positions.begin(), batch.positions.end(), positions);
  std::copy(batch.slot_mapping.begin(), batch.slot_mapping.end(), slots);
  std::copy(batch.logit_rows.begin(), batch.logit_rows.end(), row_index);
  int32_t* tiles = row_index + max_tokens_;
  int32_t num_tiles = 0;
  bool prefill = false;
  host_block_tables_.clear();
  for (const StepSequence& sequence : batch.sequences) {
    prefill = prefill || sequence.num_tokens > kPrefillMinTokens;
    for (int32_t first = 0; first < sequence.num_tokens; first += kPrefillTileTokens) {
      tiles[2 * num_tiles] = sequence.first_token + first;
      tiles[2 * num_tiles + 1] = std::min(kPrefillTileTokens, sequence.num_tokens - first);
      ++num_tiles;
    }
    const int32_t offset = static_cast<int32_t>(host_block_tables_.size());
    if (kv_ != 0) {
      const int64_t needed = (sequence.context_length + block_size_ - 1) / block_size_;
      host_block_tables_.insert(host_block_tables_.end(), sequence.block_table,
                                sequence.block_table + needed);
    }
    for (int32_t i = 0; i < sequence.num_tokens; ++i) {
      query_index[sequence.first_token + i] = sequence.context_length - sequence.num_tokens + i;
      table_offset[sequence.first_token + i] = offset;
    }
  }
  if (absl::Status status = device_->CopyToDevice(metadata_, host_metadata_.data(),
                                                  host_metadata_.size() * sizeof(int32_t));
      !status.ok()) {
    return status;
  }
  if (static_cast<int64_t>(host_block_tables_.size()) > block_tables_capacity_) {
    if (block_tables_ != 0) device_->Free(block_tables_);
    block_tables_ = 0;
    // Doubling: a growing context reallocates O(log n) times, never per step.
    const int64_t capacity =
        std::max<int64_t>(host_block_tables_.size(), 2 * block_tables_capacity_);
    absl::StatusOr<DevicePointer> tables = device_->Allocate(capacity * sizeof(int32_t));
    if (!tables.ok()) return tables.status();
    block_tables_ = *tables;
    block_tables_capacity_ = capacity;
  }
  if (!host_block_tables_.empty()) {
    if (absl::Status status = device_->CopyToDevice(block_tables_, host_block_tables_.data(),
                                                    host_block_tables_.size() * sizeof(int32_t));
        !status.ok()) {
      return status;
    }
  }
  if (expert_counts_ != 0) {
    // The routers add to the counts: this step starts them at zero.
    std::fill(host_expert_counts_.begin(), host_expert_counts_.end(), 0);
    if (absl::Status status = device_->CopyToDevice(expert_counts_, host_expert_counts_.data(),
                                                    host_expert_counts_.size() * sizeof(int32_t));
        !status.ok()) {
      return status;
    }
  }

  const uint64_t stride = static_cast<uint64_t>(max_tokens_) * sizeof(int32_t);
  const uint64_t plane_bytes =
      static_cast<uint64_t>(num_blocks_) * block_size_ * kv_width_ * kv_element_bytes_;
  for (OpLaunch& op : ops_) {
    LlmcKernelParams params = op.params;
    params.token_ids = metadata_;
    params.positions = metadata_ + stride;
    params.slot_mapping = metadata_ + 2 * stride;
    params.query_index = metadata_ + 3 * stride;
    params.block_table = metadata_ + 4 * stride;
    params.row_index = metadata_ + 5 * stride;
    params.tiles = metadata_ + 6 * stride;
    params.block_tables = block_tables_;
    params.num_tokens = num_tokens;
    params.num_rows = num_rows;
    params.block_size = block_size_;
    params.num_tiles = num_tiles;
    if (op.kind == plan::ATTENTION) {
      params.key_cache = kv_ + 2 * op.layer * plane_bytes;
      params.value_cache = params.key_cache + plane_bytes;
      if (kv_scaled_) {
        const uint64_t scale_plane_bytes =
            static_cast<uint64_t>(num_blocks_) * block_size_ * KvScaleBytesPerSlot();
        params.key_scales = kv_ + KvScalesOffset() + 2 * op.layer * scale_plane_bytes;
        params.value_scales = params.key_scales + scale_plane_bytes;
      }
      // [kv write, split, combine, prefill]: the write, then either attention.
      std::vector<int32_t> chosen = {op.kernels[0]};
      if (prefill && op.kernels.size() == 4) {
        chosen.push_back(op.kernels[3]);
      } else {
        chosen.push_back(op.kernels[1]);
        chosen.push_back(op.kernels[2]);
      }
      for (int32_t kernel : chosen) {
        if (absl::Status status = Launch(kernel, params, num_tokens, num_rows); !status.ok()) {
          return status;
        }
      }
      continue;
    }
    if (op.kind == plan::MATMUL) {
      const bool gemm = op.kernels.size() == 2 && num_tokens > kGemvMaxTokens;
      if (absl::Status status = Launch(op.kernels[gemm ? 1 : 0], params, num_tokens, num_rows);
          !status.ok()) {
        return status;
      }
      continue;
    }
    if (op.kind == plan::EXPERT_MATMUL) {
      // [group, gemv, gemm]: the grouping, then the GEMM for steps of more tokens than the
      // GEMV serves (when the op has one).
      const bool gemm = op.kernels.size() == 3 && num_tokens > kGemvMaxTokens;
      for (int32_t kernel : {op.kernels[0], op.kernels[gemm ? 2 : 1]}) {
        if (absl::Status status = Launch(kernel, params, num_tokens, num_rows); !status.ok()) {
          return status;
        }
      }
      continue;
    }
    if (op.kind == plan::LOGITS && num_rows == 0) continue;
    for (int32_t kernel : op.kernels) {
      if (absl::Status status = Launch(kernel, params, num_tokens, num_rows); !status.ok()) {
        return status;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<KernelStepBackend>> CreateKernelBackend(
    const plan::PlanMeta& meta, const plan::KernelTable& table, const BlobLookup& blobs,
    const BackendOptions& options, std::unique_ptr<Device> device) {
  std::string name = device->name();
  auto backend = std::make_unique<KernelBackend>(std::move(device), std::move(name));
  if (absl::Status status = backend->Create(meta, table, blobs, options); !status.ok()) {
    return status;
  }
  return std::unique_ptr<KernelStepBackend>(std::move(backend));
}

}  // namespace llmrt::cuda
