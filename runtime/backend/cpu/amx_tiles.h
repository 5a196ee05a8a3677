// The AMX tile instructions the CPU kernels use (quant_gemm_amx.cc: tdpbssd; matmul_amx.cc:
// tdpbf16ps), twice: on the hardware, and emulated in C++ from Intel's pseudocode so that the
// AMX paths' layouts and arithmetic are tested on machines without AMX.
//
// Tests turn the emulation on around a kernel (SetAmxTileEmulationForTesting);
// LLMRT_AMX_EMULATION=1 in the environment turns it on for a whole process, so that ctest runs
// suites through the AMX paths on a CPU without AMX. With the emulation on, the AMX-INT8 GEMM runs
// on every AVX3 tier with AVX512-VNNI (it reproduces those GEMVs' bits), the AMX-BF16 matmul on
// those without AVX512-BF16 (avx3_zen4 keeps its vdpbf16ps path).
#ifndef LLMRT_BACKEND_CPU_AMX_TILES_H_
#define LLMRT_BACKEND_CPU_AMX_TILES_H_

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace llmrt::cpu {

// Activation rows from which the AMX paths run (QuantizedGemm on AMX-INT8, MatMul of F16 / BF16
// on AMX-BF16) where the tier has them (dispatch.h's avx3_amx): each call lays out every 16-row
// panel for the tiles once, which a few tokens do not repay. For F16 that layout (splitting each
// weight into two bf16 values) alone takes ~1.4x the f32 FMA decode GEMV's time per weight on an
// Emerald Rapids core (matmul_amx.cc), so decode keeps the FMA path. A first choice, not yet
// measured on AMX hardware.
inline constexpr int64_t kAmxMinTokens = 64;

// Whether the AMX paths run on emulated tiles; returns whether they did before.
bool SetAmxTileEmulationForTesting(bool on);
bool AmxTileEmulation();
// Tile products (tdpbssd, tdpbf16ps) the emulation has executed so far.
int64_t EmulatedAmxTileProducts();
void CountEmulatedAmxTileProduct();

#if defined(__x86_64__)

// LDTILECFG's 64 bytes, palette 1: per tile its rows and bytes per row.
struct AmxTileConfig {
  alignas(64) uint8_t bytes[64] = {};
  AmxTileConfig() { bytes[0] = 1; }
  void Set(int tile, int rows, int row_bytes) {
    bytes[16 + 2 * tile] = static_cast<uint8_t>(row_bytes);
    bytes[16 + 2 * tile + 1] = static_cast<uint8_t>(row_bytes >> 8);
    bytes[48 + tile] = static_cast<uint8_t>(rows);
  }
};

// The instructions on the hardware: one each, the tile register an immediate (%c prints it
// bare). Memory clobbers keep stores of C before the loads that read them back, and a layout's
// stores before the tile loads.
struct HardwareTiles {
  static void Configure(const uint8_t* config) {
    asm volatile("ldtilecfg %0" ::"m"(*reinterpret_cast<const uint8_t(*)[64]>(config)));
  }
  static void Release() { asm volatile("tilerelease" ::: "memory"); }
  template <int kTile>
  static void Zero() {
    asm volatile("tilezero %%tmm%c0" ::"i"(kTile));
  }
  template <int kTile>
  static void Load(const void* base, int64_t stride) {
    asm volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(base), "r"(stride), "i"(kTile) : "memory");
  }
  template <int kTile>
  static void Store(void* base, int64_t stride) {
    asm volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(base), "r"(stride), "i"(kTile) : "memory");
  }
  // C += A x B, signed bytes, int32 sums.
  template <int kC, int kA, int kB>
  static void DotSigned() {
    asm volatile("tdpbssd %%tmm%c0, %%tmm%c1, %%tmm%c2" ::"i"(kB), "i"(kA), "i"(kC));
  }
  // C += A x B, bf16 pairs, f32 sums.
  template <int kC, int kA, int kB>
  static void DotBf16() {
    asm volatile("tdpbf16ps %%tmm%c0, %%tmm%c1, %%tmm%c2" ::"i"(kB), "i"(kA), "i"(kC));
  }
};

// The same instructions in C++ (Intel's pseudocode for LDTILECFG, TILELOADD, TILESTORED,
// TILEZERO, TDPBSSD and TDPBF16PS). Per thread, as the hardware's tile state is.
struct EmulatedTiles {
  struct State {
    uint8_t bytes[8][16][64];
    int rows[8];
    int row_bytes[8];
  };
  static State& state() {
    static thread_local State tiles;
    return tiles;
  }
  static void Configure(const uint8_t* config) {
    State& s = state();
    std::memset(s.bytes, 0, sizeof(s.bytes));
    for (int t = 0; t < 8; ++t) {
      uint16_t colsb;
      std::memcpy(&colsb, config + 16 + 2 * t, 2);
      s.row_bytes[t] = colsb;
      s.rows[t] = config[48 + t];
    }
  }
  static void Release() {}
  template <int kTile>
  static void Zero() {
    std::memset(state().bytes[kTile], 0, sizeof(state().bytes[kTile]));
  }
  template <int kTile>
  static void Load(const void* base, int64_t stride) {
    State& s = state();
    std::memset(s.bytes[kTile], 0, sizeof(s.bytes[kTile]));
    for (int r = 0; r < s.rows[kTile]; ++r) {
      std::memcpy(s.bytes[kTile][r], static_cast<const uint8_t*>(base) + r * stride,
                  s.row_bytes[kTile]);
    }
  }
  template <int kTile>
  static void Store(void* base, int64_t stride) {
    const State& s = state();
    for (int r = 0; r < s.rows[kTile]; ++r) {
      std::memcpy(static_cast<uint8_t*>(base) + r * stride, s.bytes[kTile][r], s.row_bytes[kTile]);
    }
  }
  template <int kC, int kA, int kB>
  static void DotSigned() {
    State& s = state();
    for (int m = 0; m < s.rows[kC]; ++m) {
      for (int n = 0; n < s.row_bytes[kC] / 4; ++n) {
        int32_t sum;
        std::memcpy(&sum, s.bytes[kC][m] + 4 * n, 4);
        uint32_t total = static_cast<uint32_t>(sum);  // wraps, as the hardware's int32 adds
        for (int k = 0; k < s.row_bytes[kA] / 4; ++k) {
          for (int i = 0; i < 4; ++i) {
            total += static_cast<uint32_t>(static_cast<int8_t>(s.bytes[kA][m][4 * k + i]) *
                                           static_cast<int8_t>(s.bytes[kB][k][4 * n + i]));
          }
        }
        sum = static_cast<int32_t>(total);
        std::memcpy(s.bytes[kC][m] + 4 * n, &sum, 4);
      }
    }
    CountEmulatedAmxTileProduct();
  }
  // Per (m, n), k in order: the even pair's product, then the odd one's, each added in f32 with
  // round to nearest even; denormal inputs and results flushed to zero. A product of two bf16
  // values is exact in f32, so fused or not makes no difference.
  template <int kC, int kA, int kB>
  static void DotBf16() {
    State& s = state();
    for (int m = 0; m < s.rows[kC]; ++m) {
      for (int n = 0; n < s.row_bytes[kC] / 4; ++n) {
        float sum;
        std::memcpy(&sum, s.bytes[kC][m] + 4 * n, 4);
        for (int k = 0; k < s.row_bytes[kA] / 4; ++k) {
          for (int i = 0; i < 2; ++i) {
            const float a = Bf16ToFloat(s.bytes[kA][m] + 4 * k + 2 * i);
            const float b = Bf16ToFloat(s.bytes[kB][k] + 4 * n + 2 * i);
            sum = FlushDenormal(sum + a * b);
          }
        }
        std::memcpy(s.bytes[kC][m] + 4 * n, &sum, 4);
      }
    }
    CountEmulatedAmxTileProduct();
  }

 private:
  static float FlushDenormal(float value) {
    return std::fpclassify(value) == FP_SUBNORMAL ? std::copysign(0.0f, value) : value;
  }
  static float Bf16ToFloat(const uint8_t* bytes) {
    uint16_t bits;
    std::memcpy(&bits, bytes, 2);
    const uint32_t wide = static_cast<uint32_t>(bits) << 16;
    float value;
    std::memcpy(&value, &wide, 4);
    return FlushDenormal(value);
  }
};

#endif  // __x86_64__

}  // namespace llmrt::cpu

#endif  // LLMRT_BACKEND_CPU_AMX_TILES_H_
