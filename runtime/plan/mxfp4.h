// MXFP4 (OCP Microscaling v1.0): FP4_E2M1 codes with one E8M0 scale per block of 32 columns
// (plan.proto's Quantization comment). Everyone who decodes MXFP4 — kernels, references, the
// compiler's quantizer and importer — goes through these definitions.
//
// Header-only, no dependencies.
#ifndef LLMRT_PLAN_MXFP4_H_
#define LLMRT_PLAN_MXFP4_H_

#include <cstdint>

namespace llmrt::plan {

// Columns per E8M0 scale: an MXFP4 block, also one I4 run of int4_layout.h.
inline constexpr int64_t kMxfp4Block = 32;

// E2M1 code -> value: bit 3 sign, bits 2-1 exponent (bias 1), bit 0 mantissa; exponent 0 is
// subnormal (0, 0.5).
inline constexpr float kE2M1Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// Twice the value of an E2M1 code: an integer in {0, ±1, ±2, ±3, ±4, ±6, ±8, ±12}, what the
// integer dot-product kernels multiply (the halving moves into the block scale).
inline constexpr int8_t E2M1Doubled(int code) {
  constexpr int8_t kDoubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  return kDoubled[code & 15];
}

namespace mxfp4_internal {

// 2^(b - 127) for every byte, by exact doublings and halvings of 1 at compile time (powers of
// two down to 2^-127, an f32 denormal, are exact), so no code path builds a float from bits.
// 255 (the format's NaN) is refused by program_check; its entry is NaN.
struct E8M0Table {
  float values[256];
  constexpr E8M0Table() : values() {
    float up = 1.0f, down = 1.0f;
    values[127] = 1.0f;
    for (int b = 128; b < 255; ++b) values[b] = up *= 2.0f;
    for (int b = 126; b >= 0; --b) values[b] = down /= 2.0f;
    values[255] = __builtin_nanf("");
  }
};
inline constexpr E8M0Table kE8M0Table{};

}  // namespace mxfp4_internal

// The scale 2^(b - 127) of E8M0 byte b, exact for every b in 0..254 (b = 0 is the f32 denormal
// 2^-127; 2^-126 is the smallest normal).
inline float E8M0ToF32(uint8_t b) { return mxfp4_internal::kE8M0Table.values[b]; }

}  // namespace llmrt::plan

#endif  // LLMRT_PLAN_MXFP4_H_
