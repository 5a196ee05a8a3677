// Scalar conversions between f32 and the 16-bit float formats (IEEE binary16 "f16" and bfloat16).
//
// f32 -> 16-bit rounds to nearest, ties to even, like hardware conversions; values beyond the
// f16 range become infinity (|x| >= 65520, the midpoint between 65504 and 2^16), values below
// half the smallest f16 subnormal (2^-25) become signed zero. NaNs stay NaN and keep the top
// bits of their payload, so every 16-bit pattern, NaNs included, survives a round trip through
// f32 unchanged (hardware would quieten signalling NaNs; weights never hold NaNs, but a
// bit-exact round trip keeps conversions testable exhaustively).
//
// Header-only and branch-light so the compiler inlines them into conversion loops over GBs of
// weights. They assume the default floating-point environment (round-to-nearest, no
// flush-to-zero), which is what every target we build runs with.
#ifndef LLMRT_PLAN_DTYPE_H_
#define LLMRT_PLAN_DTYPE_H_

#include <cstdint>
#include <cstring>

namespace llmrt::plan {

namespace dtype_internal {

inline uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

inline float BitsFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

}  // namespace dtype_internal

inline float F16ToF32(uint16_t half) {
  using dtype_internal::BitsFloat;
  using dtype_internal::FloatBits;
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  // Exponent and mantissa moved into f32 position; the exponent still has f16's bias of 15.
  uint32_t magnitude = static_cast<uint32_t>(half & 0x7fffu) << 13;
  const uint32_t exponent = magnitude & 0x0f800000u;
  magnitude += (127u - 15u) << 23;  // rebias 15 -> 127
  if (exponent == 0x0f800000u) {
    // Inf/NaN: the exponent must become 255, not 31 + 112.
    magnitude += (128u - 16u) << 23;
  } else if (exponent == 0) {
    // Subnormal (or zero): mantissa * 2^-24. Give it the implicit one of 2^-14 and subtract
    // 2^-14 again; the subtraction is exact, and avoids multiplying an f32 subnormal, which
    // costs ~100 cycles of microcode on some x86 parts.
    magnitude += 1u << 23;
    const float value = BitsFloat(magnitude) - BitsFloat(113u << 23);
    return BitsFloat(FloatBits(value) | sign);
  }
  return BitsFloat(magnitude | sign);
}

inline uint16_t F32ToF16(float value) {
  using dtype_internal::BitsFloat;
  using dtype_internal::FloatBits;
  uint32_t bits = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  bits &= 0x7fffffffu;
  if (bits >= 0x7f800000u) {
    if (bits == 0x7f800000u) return sign | 0x7c00u;
    // NaN: keep the top 10 payload bits; if they are all zero the result would read as
    // infinity, so set the quiet bit instead.
    uint16_t payload = static_cast<uint16_t>((bits >> 13) & 0x3ffu);
    if (payload == 0) payload = 0x200u;
    return sign | 0x7c00u | payload;
  }
  // 0x477ff000 is 65520: halfway between 65504 (largest f16) and 65536; the tie goes to the
  // even neighbour, which is 65536, i.e. infinity.
  if (bits >= 0x477ff000u) return sign | 0x7c00u;
  if (bits < 0x38800000u) {
    // Below 2^-14 the result is subnormal: adding 0.5 (whose ulp is 2^-24, the f16 subnormal
    // step) makes the FPU round to a multiple of 2^-24 with ties to even; the low mantissa
    // bits of the sum are then the f16 bits (0x400 when it rounds up to the smallest normal).
    const float shifted = BitsFloat(bits) + 0.5f;
    return sign | static_cast<uint16_t>(FloatBits(shifted) - 0x3f000000u);
  }
  // Normal: rebias the exponent and drop 13 mantissa bits, rounding to nearest even by adding
  // just under half (0xfff) plus the lowest kept bit. A carry into the exponent is correct.
  const uint32_t lowest_kept_bit = (bits >> 13) & 1u;
  bits += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + lowest_kept_bit;
  return sign | static_cast<uint16_t>(bits >> 13);
}

inline float Bf16ToF32(uint16_t bf16) {
  return dtype_internal::BitsFloat(static_cast<uint32_t>(bf16) << 16);
}

inline uint16_t F32ToBf16(float value) {
  const uint32_t bits = dtype_internal::FloatBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    // NaN: truncate, and set the quiet bit if truncation would leave infinity.
    uint16_t truncated = static_cast<uint16_t>(bits >> 16);
    if ((truncated & 0x7fu) == 0) truncated |= 0x40u;
    return truncated;
  }
  // Round to nearest even; overflow into the exponent (up to infinity) is the correct result.
  const uint32_t lowest_kept_bit = (bits >> 16) & 1u;
  return static_cast<uint16_t>((bits + 0x7fffu + lowest_kept_bit) >> 16);
}

}  // namespace llmrt::plan

#endif  // LLMRT_PLAN_DTYPE_H_
