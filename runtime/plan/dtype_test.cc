// Exhaustive and reference checks of the f16/bf16 conversions. References: GCC's _Float16
// (libgcc's soft-float conversion on x86-64 without AVX512-FP16) and a nearest-value search in
// double written here, independent of the bit tricks in dtype.h.
#include "runtime/plan/dtype.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "gtest/gtest.h"

namespace llmrt::plan {
namespace {

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float FromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

uint16_t ReferenceF32ToF16(float value) {
  const _Float16 half = static_cast<_Float16>(value);
  uint16_t bits;
  std::memcpy(&bits, &half, sizeof(bits));
  return bits;
}

float ReferenceF16ToF32(uint16_t bits) {
  _Float16 half;
  std::memcpy(&half, &bits, sizeof(bits));
  return static_cast<float>(half);
}

// Value of a finite 16-bit pattern computed from the format's definition in double.
double DecodeF16(uint16_t bits) {
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

// Round-to-nearest-even by search: the finite bf16 neighbours of `value` and the tie rule.
uint16_t ReferenceF32ToBf16(float value) {
  const uint32_t bits = Bits(value);
  const uint16_t below = static_cast<uint16_t>(bits >> 16);  // truncation toward zero
  if ((bits & 0xffff) == 0) return below;
  const uint16_t above = below + 1;  // next magnitude away from zero (may be infinity)
  const double low = std::fabs(static_cast<double>(FromBits(static_cast<uint32_t>(below) << 16)));
  const double high = std::fabs(static_cast<double>(FromBits(static_cast<uint32_t>(above) << 16)));
  const double magnitude = std::fabs(static_cast<double>(value));
  // Infinity as "above": IEEE treats it as 2^128 for rounding purposes.
  const double high_for_rounding = std::isinf(high) ? std::ldexp(1.0, 128) : high;
  const double distance_low = magnitude - low;
  const double distance_high = high_for_rounding - magnitude;
  if (distance_low < distance_high) return below;
  if (distance_high < distance_low) return above;
  return (below & 1) ? above : below;
}

TEST(F16Test, EveryPatternRoundTripsBitExactly) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const uint16_t half = static_cast<uint16_t>(bits);
    ASSERT_EQ(F32ToF16(F16ToF32(half)), half) << std::hex << bits;
  }
}

TEST(F16Test, ToF32MatchesDefinitionAndCompiler) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const uint16_t half = static_cast<uint16_t>(bits);
    const float converted = F16ToF32(half);
    const bool is_nan = (half & 0x7c00) == 0x7c00 && (half & 0x3ff) != 0;
    const bool is_inf = (half & 0x7fff) == 0x7c00;
    if (is_nan) {
      ASSERT_TRUE(std::isnan(converted)) << std::hex << bits;
      ASSERT_EQ(std::signbit(converted), (half & 0x8000) != 0);
      ASSERT_TRUE(std::isnan(ReferenceF16ToF32(half)));
    } else if (is_inf) {
      ASSERT_TRUE(std::isinf(converted));
      ASSERT_EQ(std::signbit(converted), (half & 0x8000) != 0);
    } else {
      ASSERT_EQ(static_cast<double>(converted), DecodeF16(half)) << std::hex << bits;
      ASSERT_EQ(Bits(converted), Bits(ReferenceF16ToF32(half))) << std::hex << bits;
    }
  }
}

TEST(F16Test, ExactValuesNeighboursAndMidpointsMatchCompiler) {
  // For each pair of adjacent finite f16 magnitudes: both ends, the exact midpoint (a tie;
  // representable in f32 since f16 carries 11 significant bits) and the f32 values one ulp
  // either side of it.
  for (uint32_t bits = 0; bits < 0x7c00; ++bits) {
    const float low = F16ToF32(static_cast<uint16_t>(bits));
    const double next = bits + 1 == 0x7c00 ? 65536.0 : DecodeF16(static_cast<uint16_t>(bits + 1));
    const float midpoint = static_cast<float>((static_cast<double>(low) + next) / 2);
    ASSERT_EQ(static_cast<double>(midpoint), (static_cast<double>(low) + next) / 2);
    for (const float sign : {1.0f, -1.0f}) {
      for (const float value :
           {low, midpoint, std::nextafter(midpoint, 0.0f), std::nextafter(midpoint, 1e9f)}) {
        ASSERT_EQ(F32ToF16(sign * value), ReferenceF32ToF16(sign * value))
            << std::hexfloat << sign * value;
      }
    }
    // The tie itself goes to the even neighbour.
    const uint16_t expected_tie =
        (bits & 1) ? static_cast<uint16_t>(bits + 1) : static_cast<uint16_t>(bits);
    ASSERT_EQ(F32ToF16(midpoint), expected_tie) << std::hexfloat << midpoint;
  }
}

TEST(F16Test, StridedSweepOfAllF32MatchesCompiler) {
  // Every 1021st f32 pattern (4.2 M values, ~0.5 s with libgcc's soft-float reference): every
  // exponent, many mantissas; the ties are covered exhaustively by the midpoint test above.
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 1021) {
    const float value = FromBits(static_cast<uint32_t>(bits));
    const uint16_t converted = F32ToF16(value);
    if (std::isnan(value)) {
      ASSERT_TRUE((converted & 0x7c00) == 0x7c00 && (converted & 0x3ff) != 0) << std::hex << bits;
      continue;
    }
    ASSERT_EQ(converted, ReferenceF32ToF16(value)) << std::hex << bits;
  }
}

TEST(F16Test, KnownValues) {
  EXPECT_EQ(F32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(F32ToF16(-2.0f), 0xc000);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(65519.99f), 0x7bff);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);  // tie rounds to even: infinity
  EXPECT_EQ(F32ToF16(1e10f), 0x7c00);
  EXPECT_EQ(F32ToF16(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -24)), 0x0001);         // smallest subnormal
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);         // tie to even: zero
  EXPECT_EQ(F32ToF16(std::ldexp(3.0f, -25)), 0x0002);         // tie to even: 2 * 2^-24
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -14)), 0x0400);         // smallest normal
  EXPECT_EQ(F32ToF16(std::ldexp(1023.5f, -24)), 0x0400);      // rounds up into the normals
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie between 1 and 1+2^-10
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(3.0f, -11)), 0x3c02);
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::denorm_min()), 0x0000);
  const uint16_t nan = F32ToF16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x3ff, 0);
  // A NaN whose payload lives only in the low 13 bits must not become infinity.
  EXPECT_NE(F32ToF16(FromBits(0x7f800001u)) & 0x3ff, 0);
  EXPECT_EQ(F16ToF32(0x3555), 0.333251953125f);
}

TEST(Bf16Test, EveryPatternRoundTripsBitExactly) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const uint16_t bf16 = static_cast<uint16_t>(bits);
    ASSERT_EQ(Bits(Bf16ToF32(bf16)), bits << 16);
    ASSERT_EQ(F32ToBf16(Bf16ToF32(bf16)), bf16) << std::hex << bits;
  }
}

TEST(Bf16Test, StridedSweepMatchesNearestEvenSearch) {
  // Every 251st pattern (17 M values, ~0.2 s) plus every tie (low half exactly 0x8000).
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 251) {
    const float value = FromBits(static_cast<uint32_t>(bits));
    if (std::isnan(value)) {
      const uint16_t converted = F32ToBf16(value);
      ASSERT_TRUE((converted & 0x7f80) == 0x7f80 && (converted & 0x7f) != 0) << std::hex << bits;
      continue;
    }
    ASSERT_EQ(F32ToBf16(value), ReferenceF32ToBf16(value)) << std::hex << bits;
  }
  for (uint32_t high = 0; high <= 0xffff; ++high) {
    const float tie = FromBits((high << 16) | 0x8000u);
    if (std::isnan(tie)) continue;
    ASSERT_EQ(F32ToBf16(tie), ReferenceF32ToBf16(tie)) << std::hex << high;
  }
}

TEST(Bf16Test, KnownValues) {
  EXPECT_EQ(F32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(F32ToBf16(FromBits(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(F32ToBf16(FromBits(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(F32ToBf16(FromBits(0x7f7fffffu)), 0x7f80);  // FLT_MAX rounds to infinity
  EXPECT_EQ(F32ToBf16(FromBits(0x7f800001u)) & 0x7f, 0x40);
  EXPECT_EQ(Bf16ToF32(0xc000), -2.0f);
}

}  // namespace
}  // namespace llmrt::plan
