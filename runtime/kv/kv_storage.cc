#include "runtime/kv/kv_storage.h"

#include <cstring>
#include <limits>
#include <new>

#include "absl/strings/str_format.h"

namespace llmrt::kv {

KvStorage::~KvStorage() = default;

absl::StatusOr<std::unique_ptr<KvStorage>> KvStorage::Create(const KvStorageShape& shape) {
  if (shape.num_layers <= 0 || shape.num_kv_heads <= 0 || shape.head_dim <= 0 ||
      shape.num_blocks <= 0 || shape.block_size <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV cache: every dimension must be positive, got layers %d, kv heads %d, head_dim %d, "
        "blocks %d, block size %d",
        shape.num_layers, shape.num_kv_heads, shape.head_dim, shape.num_blocks, shape.block_size));
  }
  // Each factor is below 2^31, so pairwise products fit in 62 bits; check the running total
  // against the largest byte count an allocation can have.
  const int64_t token_stride = static_cast<int64_t>(shape.num_kv_heads) * shape.head_dim;
  const int64_t slots = static_cast<int64_t>(shape.num_blocks) * shape.block_size;
  const int64_t limit = std::numeric_limits<int64_t>::max() / 8;
  if (token_stride > limit / slots || token_stride * slots > limit / (2 * shape.num_layers)) {
    return absl::ResourceExhaustedError("KV cache: size overflows");
  }
  auto storage = std::unique_ptr<KvStorage>(new KvStorage());
  storage->shape_ = shape;
  storage->token_stride_ = token_stride;
  storage->layer_floats_ = token_stride * slots;
  const int64_t total_floats = 2 * storage->layer_floats_ * shape.num_layers;
  storage->data_.reset(new (std::nothrow) float[total_floats]);
  if (storage->data_ == nullptr) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "KV cache: cannot allocate %d bytes", total_floats * static_cast<int64_t>(sizeof(float))));
  }
  // Zeroed so that a slot read before it was written (a bug) gives zeros, not garbage.
  std::memset(storage->data_.get(), 0, total_floats * sizeof(float));
  return storage;
}

void KvStorage::CopyBlock(int32_t source, int32_t destination) {
  const int64_t block_floats = token_stride_ * shape_.block_size;
  for (int32_t layer = 0; layer < shape_.num_layers; ++layer) {
    std::memcpy(key(layer, static_cast<int64_t>(destination) * shape_.block_size),
                key(layer, static_cast<int64_t>(source) * shape_.block_size),
                block_floats * sizeof(float));
    std::memcpy(value(layer, static_cast<int64_t>(destination) * shape_.block_size),
                value(layer, static_cast<int64_t>(source) * shape_.block_size),
                block_floats * sizeof(float));
  }
}

}  // namespace llmrt::kv
