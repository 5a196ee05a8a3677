// KvStorage: the host memory behind a paged KV cache, one K and one V array per layer.
//
// Layout per layer and per K/V: [num_blocks, block_size, num_kv_heads, head_dim] elements of
// the cache dtype, so one token's heads are contiguous (the step writes a whole k/v row at
// once) and a block is one contiguous run of block_size * num_kv_heads * head_dim elements (a
// block copy for copy-on-write prefix sharing is one memcpy per layer and K/V).
//
// Dtypes (plan.proto KvCacheSpec.dtype): F32; F16 and BF16 (rounded to nearest even, half
// the bytes); I8: symmetric int8 codes, one f32 scale per (token, kv head) = max|x| / 127
// over that head's head_dim values, code = round-to-nearest-even(x * 127 / max|x|). A quarter
// of the f32 bytes plus 4 bytes per head: 68 bytes instead of 256 at head_dim 64. The scales
// live in a separate array per layer and K/V, [num_blocks, block_size, num_kv_heads] f32, so
// the codes keep the same layout as every other dtype.
//
// Memory: one anonymous mapping, which the OS hands out zero-filled page by page on first
// touch; Create writes none of it. The cache needs no initial contents because every slot is
// written before it is read: a step writes the k/v rows of its tokens (slot_mapping) before
// its attention reads them, and attention reads only the slots of positions < context_length
// through the sequence's block table, all of which earlier steps (or this one) wrote, or
// which CopyBlock copied from written ones. A block freed by one sequence and handed to
// another is therefore overwritten position by position before the new owner reads it
// (tested: CpuBackendTest.ReusedBlocksNeverLeakStaleData). Zeroing the cache up front (as
// Create once did) cost ~0.1 s per GiB before the first token and faulted in every page.
//
// Ownership: owns its memory. Thread-safety: none; the backend writes and reads it inside a
// step, and different steps never overlap.
#ifndef LLMRT_KV_KV_STORAGE_H_
#define LLMRT_KV_KV_STORAGE_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmrt::kv {

struct KvStorageShape {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t num_blocks = 0;
  int32_t block_size = 0;
  plan::DType dtype = plan::F32;
};

// The cache dtype a model runs with: `requested` (an option) when set, else the plan's
// KvCacheSpec.dtype when set, else F32.
plan::DType ResolveKvDType(plan::DType requested, plan::DType plan_dtype);

// The dtype a --kv-cache flag names: "f32", "f16", "bf16" or "int8"; InvalidArgument naming
// the choices otherwise.
absl::StatusOr<plan::DType> ParseKvDType(absl::string_view name);

// Whether KvStorage keeps a cache of `dtype` (F32, F16, BF16, I8).
bool IsKvDType(plan::DType dtype);

// Bytes one token takes in the cache: K and V of every layer, scales included.
int64_t KvBytesPerToken(int32_t num_layers, int32_t num_kv_heads, int32_t head_dim,
                        plan::DType dtype);

class KvStorage {
 public:
  // InvalidArgument on a non-positive dimension or a dtype IsKvDType refuses,
  // ResourceExhausted when the size overflows or the memory cannot be had.
  static absl::StatusOr<std::unique_ptr<KvStorage>> Create(const KvStorageShape& shape);
  ~KvStorage();
  KvStorage(const KvStorage&) = delete;
  KvStorage& operator=(const KvStorage&) = delete;

  const KvStorageShape& shape() const { return shape_; }
  plan::DType dtype() const { return shape_.dtype; }
  // Elements per token and layer: num_kv_heads * head_dim.
  int64_t token_stride() const { return token_stride_; }
  int64_t num_slots() const { return static_cast<int64_t>(shape_.num_blocks) * shape_.block_size; }
  size_t size_bytes() const { return static_cast<size_t>(total_bytes_); }

  // The k (v) row of flat slot `slot` (block * block_size + offset) in `layer`, as raw
  // elements of dtype().
  uint8_t* key_bytes(int32_t layer, int64_t slot) { return Row(2 * layer, slot); }
  uint8_t* value_bytes(int32_t layer, int64_t slot) { return Row(2 * layer + 1, slot); }
  const uint8_t* key_bytes(int32_t layer, int64_t slot) const { return Row(2 * layer, slot); }
  const uint8_t* value_bytes(int32_t layer, int64_t slot) const { return Row(2 * layer + 1, slot); }
  // I8 only: the num_kv_heads scales of a slot's k (v) row; nullptr for other dtypes.
  float* key_scales(int32_t layer, int64_t slot) { return Scales(2 * layer, slot); }
  float* value_scales(int32_t layer, int64_t slot) { return Scales(2 * layer + 1, slot); }
  const float* key_scales(int32_t layer, int64_t slot) const { return Scales(2 * layer, slot); }
  const float* value_scales(int32_t layer, int64_t slot) const {
    return Scales(2 * layer + 1, slot);
  }

  // F32 only: the rows as floats.
  float* key(int32_t layer, int64_t slot) {
    return reinterpret_cast<float*>(key_bytes(layer, slot));
  }
  float* value(int32_t layer, int64_t slot) {
    return reinterpret_cast<float*>(value_bytes(layer, slot));
  }
  const float* key(int32_t layer, int64_t slot) const {
    return reinterpret_cast<const float*>(key_bytes(layer, slot));
  }
  const float* value(int32_t layer, int64_t slot) const {
    return reinterpret_cast<const float*>(value_bytes(layer, slot));
  }

  // Stores one token's k and v rows (token_stride() floats each) in the cache's dtype.
  void WriteToken(int32_t layer, int64_t slot, const float* k, const float* v);
  // Reads a k (v) row back as floats (token_stride()): what attention sees.
  void ReadKey(int32_t layer, int64_t slot, float* out) const;
  void ReadValue(int32_t layer, int64_t slot, float* out) const;

  // Copies every layer's K and V (and scales) of block `source` onto block `destination`.
  void CopyBlock(int32_t source, int32_t destination);

 private:
  KvStorage() = default;
  // `array` is 2 * layer (K) or 2 * layer + 1 (V).
  uint8_t* Row(int32_t array, int64_t slot) const {
    return data_ + array * array_bytes_ + slot * row_bytes_;
  }
  float* Scales(int32_t array, int64_t slot) const {
    if (shape_.dtype != plan::I8) return nullptr;
    return reinterpret_cast<float*>(data_ + scales_offset_ + array * scale_array_bytes_) +
           slot * shape_.num_kv_heads;
  }
  void EncodeRow(const float* x, uint8_t* row, float* scales) const;
  void DecodeRow(const uint8_t* row, const float* scales, float* out) const;

  KvStorageShape shape_;
  int64_t token_stride_ = 0;
  int64_t element_bytes_ = 0;
  int64_t row_bytes_ = 0;          // token_stride_ * element_bytes_
  int64_t array_bytes_ = 0;        // one layer's K (or V) codes: num_slots * row_bytes_
  int64_t scales_offset_ = 0;      // after every code array; I8 only
  int64_t scale_array_bytes_ = 0;  // one layer's K (or V) scales: num_slots * heads * 4
  int64_t total_bytes_ = 0;
  uint8_t* data_ = nullptr;  // mmap'ed, total_bytes_ long
};

}  // namespace llmrt::kv

#endif  // LLMRT_KV_KV_STORAGE_H_
