#include "runtime/kv/kv_storage.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_format.h"
#include "runtime/plan/dtype.h"

namespace llmrt::kv {

namespace {

int64_t ElementBytes(plan::DType dtype) {
  switch (dtype) {
    case plan::F32:
      return 4;
    case plan::F16:
    case plan::BF16:
      return 2;
    case plan::I8:
      return 1;
    default:
      return 0;
  }
}

}  // namespace

plan::DType ResolveKvDType(plan::DType requested, plan::DType plan_dtype) {
  if (requested != plan::DTYPE_UNSPECIFIED) return requested;
  if (plan_dtype != plan::DTYPE_UNSPECIFIED) return plan_dtype;
  return plan::F32;
}

absl::StatusOr<plan::DType> ParseKvDType(absl::string_view name) {
  if (name == "f32") return plan::F32;
  if (name == "f16") return plan::F16;
  if (name == "bf16") return plan::BF16;
  if (name == "int8") return plan::I8;
  return absl::InvalidArgumentError(
      absl::StrFormat("--kv-cache: expected f32, f16, bf16 or int8, found \"%s\"", name));
}

bool IsKvDType(plan::DType dtype) { return ElementBytes(dtype) > 0; }

int64_t KvBytesPerToken(int32_t num_layers, int32_t num_kv_heads, int32_t head_dim,
                        plan::DType dtype) {
  const int64_t per_head =
      static_cast<int64_t>(head_dim) * ElementBytes(dtype) + (dtype == plan::I8 ? 4 : 0);
  return int64_t{2} * num_layers * num_kv_heads * per_head;
}

KvStorage::~KvStorage() {
  if (data_ != nullptr) munmap(data_, static_cast<size_t>(total_bytes_));
}

absl::StatusOr<std::unique_ptr<KvStorage>> KvStorage::Create(const KvStorageShape& shape) {
  if (shape.num_layers <= 0 || shape.num_kv_heads <= 0 || shape.head_dim <= 0 ||
      shape.num_blocks <= 0 || shape.block_size <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV cache: every dimension must be positive, got layers %d, kv heads %d, head_dim %d, "
        "blocks %d, block size %d",
        shape.num_layers, shape.num_kv_heads, shape.head_dim, shape.num_blocks, shape.block_size));
  }
  if (!IsKvDType(shape.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV cache: dtype %s is not one the cache keeps (F32, F16, BF16, I8)",
                        plan::DType_Name(shape.dtype)));
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
  storage->element_bytes_ = ElementBytes(shape.dtype);
  storage->row_bytes_ = token_stride * storage->element_bytes_;
  storage->array_bytes_ = storage->row_bytes_ * slots;
  storage->scales_offset_ = 2 * storage->array_bytes_ * shape.num_layers;
  storage->scale_array_bytes_ =
      shape.dtype == plan::I8 ? slots * shape.num_kv_heads * static_cast<int64_t>(sizeof(float))
                              : 0;
  storage->total_bytes_ =
      storage->scales_offset_ + 2 * storage->scale_array_bytes_ * shape.num_layers;
  // Not written here (see the header: every slot is written before it is read). The pages
  // a step never touches are never faulted in, so a cache sized for many long sequences
  // costs nothing until they arrive; a page is zero the first time it is touched.
  void* data = mmap(nullptr, static_cast<size_t>(storage->total_bytes_), PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) {
    const int error = errno;
    const int64_t bytes = storage->total_bytes_;
    storage->total_bytes_ = 0;  // nothing for the destructor to unmap
    return absl::ResourceExhaustedError(
        absl::StrFormat("KV cache: cannot map %d bytes: %s", bytes, std::strerror(error)));
  }
  storage->data_ = static_cast<uint8_t*>(data);
  return storage;
}

void KvStorage::EncodeRow(const float* x, uint8_t* row, float* scales) const {
  switch (shape_.dtype) {
    case plan::F32:
      std::memcpy(row, x, row_bytes_);
      break;
    case plan::F16:
    case plan::BF16: {
      const bool f16 = shape_.dtype == plan::F16;
      for (int64_t i = 0; i < token_stride_; ++i) {
        const uint16_t bits = f16 ? plan::F32ToF16(x[i]) : plan::F32ToBf16(x[i]);
        std::memcpy(row + 2 * i, &bits, 2);
      }
      break;
    }
    case plan::I8: {
      int8_t* codes = reinterpret_cast<int8_t*>(row);
      for (int32_t head = 0; head < shape_.num_kv_heads; ++head) {
        const float* values = x + static_cast<int64_t>(head) * shape_.head_dim;
        float max_magnitude = 0.0f;
        for (int32_t i = 0; i < shape_.head_dim; ++i) {
          max_magnitude = std::max(max_magnitude, std::fabs(values[i]));
        }
        const float inverse = max_magnitude > 0.0f ? 127.0f / max_magnitude : 0.0f;
        for (int32_t i = 0; i < shape_.head_dim; ++i) {
          codes[static_cast<int64_t>(head) * shape_.head_dim + i] =
              static_cast<int8_t>(std::nearbyint(values[i] * inverse));
        }
        scales[head] = max_magnitude / 127.0f;
      }
      break;
    }
    default:
      break;  // Create() admits no other dtype
  }
}

void KvStorage::DecodeRow(const uint8_t* row, const float* scales, float* out) const {
  for (int64_t i = 0; i < token_stride_; ++i) {
    uint16_t bits = 0;
    switch (shape_.dtype) {
      case plan::F32:
        std::memcpy(&out[i], row + 4 * i, 4);
        break;
      case plan::F16:
        std::memcpy(&bits, row + 2 * i, 2);
        out[i] = plan::F16ToF32(bits);
        break;
      case plan::BF16:
        std::memcpy(&bits, row + 2 * i, 2);
        out[i] = plan::Bf16ToF32(bits);
        break;
      case plan::I8:
        out[i] = static_cast<float>(reinterpret_cast<const int8_t*>(row)[i]) *
                 scales[i / shape_.head_dim];
        break;
      default:
        break;
    }
  }
}

void KvStorage::WriteToken(int32_t layer, int64_t slot, const float* k, const float* v) {
  EncodeRow(k, key_bytes(layer, slot), key_scales(layer, slot));
  EncodeRow(v, value_bytes(layer, slot), value_scales(layer, slot));
}

void KvStorage::ReadKey(int32_t layer, int64_t slot, float* out) const {
  DecodeRow(key_bytes(layer, slot), key_scales(layer, slot), out);
}

void KvStorage::ReadValue(int32_t layer, int64_t slot, float* out) const {
  DecodeRow(value_bytes(layer, slot), value_scales(layer, slot), out);
}

void KvStorage::CopyBlock(int32_t source, int32_t destination) {
  const int64_t from = static_cast<int64_t>(source) * shape_.block_size;
  const int64_t to = static_cast<int64_t>(destination) * shape_.block_size;
  for (int32_t array = 0; array < 2 * shape_.num_layers; ++array) {
    std::memcpy(Row(array, to), Row(array, from), row_bytes_ * shape_.block_size);
    if (shape_.dtype == plan::I8) {
      std::memcpy(Scales(array, to), Scales(array, from),
                  shape_.num_kv_heads * shape_.block_size * sizeof(float));
    }
  }
}

}  // namespace llmrt::kv
