// KvStorage: the host memory behind a paged KV cache, one K and one V array per layer.
//
// Layout per layer and per K/V: [num_blocks, block_size, num_kv_heads, head_dim] f32, so one
// token's heads are contiguous (the step writes a whole k/v row at once) and a block is one
// contiguous run of block_size * num_kv_heads * head_dim floats (a later block copy for
// copy-on-write prefix sharing is one memcpy per layer).
//
// Ownership: owns its memory. Thread-safety: none; the backend writes and reads it inside a
// step, and different steps never overlap.
#ifndef LLMRT_KV_KV_STORAGE_H_
#define LLMRT_KV_KV_STORAGE_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace llmrt::kv {

struct KvStorageShape {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t num_blocks = 0;
  int32_t block_size = 0;
};

class KvStorage {
 public:
  // InvalidArgument on a non-positive dimension, ResourceExhausted when the size overflows
  // or the memory cannot be had.
  static absl::StatusOr<std::unique_ptr<KvStorage>> Create(const KvStorageShape& shape);
  ~KvStorage();
  KvStorage(const KvStorage&) = delete;
  KvStorage& operator=(const KvStorage&) = delete;

  const KvStorageShape& shape() const { return shape_; }
  // Floats per token and layer: num_kv_heads * head_dim.
  int64_t token_stride() const { return token_stride_; }
  int64_t num_slots() const { return static_cast<int64_t>(shape_.num_blocks) * shape_.block_size; }
  size_t size_bytes() const { return 2 * layer_floats_ * shape_.num_layers * sizeof(float); }

  // The k (v) row of flat slot `slot` (block * block_size + offset) in `layer`.
  float* key(int32_t layer, int64_t slot) {
    return data_.get() + (2 * layer) * layer_floats_ + slot * token_stride_;
  }
  float* value(int32_t layer, int64_t slot) {
    return data_.get() + (2 * layer + 1) * layer_floats_ + slot * token_stride_;
  }
  const float* key(int32_t layer, int64_t slot) const {
    return data_.get() + (2 * layer) * layer_floats_ + slot * token_stride_;
  }
  const float* value(int32_t layer, int64_t slot) const {
    return data_.get() + (2 * layer + 1) * layer_floats_ + slot * token_stride_;
  }

  // Copies every layer's K and V of block `source` onto block `destination`.
  void CopyBlock(int32_t source, int32_t destination);

 private:
  KvStorage() = default;
  KvStorageShape shape_;
  int64_t token_stride_ = 0;
  int64_t layer_floats_ = 0;
  std::unique_ptr<float[]> data_;
};

}  // namespace llmrt::kv

#endif  // LLMRT_KV_KV_STORAGE_H_
