// The instruction-set extensions our kernels use beyond Highway 1.0.3's targets: on x86 above
// AVX3 (AVX-512 F/VL/DQ/BW) and AVX2, read from CPUID (the OS support for the AVX-512 state is
// what Highway checks for AVX3 itself); on arm64 above NEON (Armv8.0 Advanced SIMD), read from
// the kernel's hardware capabilities (getauxval), since user space cannot read the ID registers
// portably.
//
// Why not Highway's AVX3_DL target: in Highway 1.0.3 it also enables the VEX-encoded AVX-VNNI,
// and GCC 12 then encodes every 256-bit vpdpbusd as {vex}, which raises SIGILL on AVX-512 VNNI
// processors without AVX-VNNI (Ice Lake, Zen 4); it also requires VBMI2, VAES, BITALG, ...,
// which no kernel here needs. So the kernels that use these instructions live inside the AVX3
// target's bodies and run when ActiveCpuExtensions() (dispatch.h) says so: vpdpbusd and
// vdpbf16ps through inline assembly (quant_vnni-inl.h and matmul.cc say why), the bf16
// conversion in a function compiled with LLMRT_TARGET_BF16.
//
// On arm64 the int8 kernels for them (quant_neon-inl.h) are functions compiled with
// LLMRT_TARGET_DOTPROD / LLMRT_TARGET_I8MM inside the NEON target's body, so a plain Armv8.0
// build still runs on a CPU without them and calls those functions only when
// ActiveCpuExtensions() says so.
//
// Header-only: the configure-time probe (cpu_targets_probe.cc) includes it too.
#ifndef LLMRT_BACKEND_CPU_CPU_FEATURES_H_
#define LLMRT_BACKEND_CPU_CPU_FEATURES_H_

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace llmrt::cpu {

// Extensions on top of AVX3 (the AVX-512 ones) or AVX2 (AVX-VNNI) on x86, on top of NEON on
// arm64. Those of the other architecture are always false.
struct CpuExtensions {
  bool avx512_vnni = false;   // vpdpbusd (EVEX): u8 x s8 dot products of 4 into int32 lanes
  bool avx512_bf16 = false;   // vdpbf16ps: bf16 pairs into f32 lanes
  bool avx_vnni = false;      // vpdpbusd (VEX, 256-bit): AVX2 machines such as Sierra Forest
  bool neon_dotprod = false;  // sdot/udot (FEAT_DotProd): s8 dot products of 4 into int32 lanes
  bool neon_i8mm = false;     // smmla (FEAT_I8MM): a 2x8 by 8x2 s8 product into 2x2 int32
  // AMX-TILE, AMX-INT8 (tdpbssd: 16x64 by 64x16 s8 into int32) and AMX-BF16 (tdpbf16ps: 16x32
  // by 32x16 bf16 into f32), and the OS's permission for the tile state (every AMX CPU so far
  // has both kinds: Sapphire Rapids on).
  bool amx = false;
};

#if defined(__aarch64__) && defined(__linux__)
// Linux's arm64 hwcap bits (arch/arm64/include/uapi/asm/hwcap.h), spelled out so the build does
// not depend on how recent the C library's or the NDK's headers are (HWCAP2_I8MM came with
// Linux 5.10).
inline constexpr unsigned long kHwcapAsimdDp = 1ul << 20;  // AT_HWCAP: HWCAP_ASIMDDP
inline constexpr unsigned long kHwcap2I8mm = 1ul << 13;    // AT_HWCAP2: HWCAP2_I8MM
#endif

#if defined(__x86_64__) || defined(__i386__)
// Whether this process may use the AMX tile registers: the OS enables their state in XCR0 (bits
// 17 XTILECFG and 18 XTILEDATA), and Linux (5.16 on) hands the 8 KiB tile data state to a process
// only once it asks: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), which holds for all its
// threads. A refusal (an older kernel, a hypervisor or seccomp policy) leaves AMX unused; a tile
// instruction without it would raise SIGILL. Asking is idempotent, so detecting twice is harmless.
inline bool AmxTileStateUsable() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  __cpuid(1, eax, ebx, ecx, edx);
  if (((ecx >> 27) & 1) == 0) return false;  // OSXSAVE: xgetbv available
  unsigned xcr0_low = 0, xcr0_high = 0;
  asm volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  if (((xcr0_low >> 17) & 3) != 3) return false;
#if defined(__linux__) && defined(__x86_64__)
  constexpr int kArchReqXcompPerm = 0x1023;
  constexpr int kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}
#endif

// What this processor supports (the OS must save the AVX / AVX-512 state; the extensions are used
// only from AVX2 / AVX3 code, which Highway enables only when it does).
inline CpuExtensions DetectCpuExtensions() {
  CpuExtensions found;
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return found;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  const bool avx512f = (ebx >> 16) & 1;
  found.avx512_vnni = avx512f && ((ecx >> 11) & 1);
  // Leaf 7 subleaf 1, EAX bit 5 (valid when subleaf 0 reports at least 1 subleaf in EAX).
  if (eax >= 1) {
    unsigned eax1 = 0, ebx1 = 0, ecx1 = 0, edx1 = 0;
    __cpuid_count(7, 1, eax1, ebx1, ecx1, edx1);
    found.avx512_bf16 = avx512f && ((eax1 >> 5) & 1);
    found.avx_vnni = (eax1 >> 4) & 1;
  }
  // Leaf 7 EDX: bit 22 AMX-BF16, 24 AMX-TILE, 25 AMX-INT8.
  found.amx = avx512f && ((edx >> 22) & 1) && ((edx >> 24) & 1) && ((edx >> 25) & 1) &&
              AmxTileStateUsable();
#elif defined(__aarch64__) && defined(__linux__)
  found.neon_dotprod = (getauxval(AT_HWCAP) & kHwcapAsimdDp) != 0;
  found.neon_i8mm = (getauxval(AT_HWCAP2) & kHwcap2I8mm) != 0;
#endif
  return found;
}

// Whether the default dispatch should take the AVX512-BF16 matmul (avx3_zen4) on this CPU:
// vdpbf16ps does 32 multiply-adds against an f32 FMA's 16, but only AMD's cores (Zen 4, Zen 5)
// issue it as fast as an FMA. Intel's issue it at a quarter of the FMA rate: measured on an Intel
// Xeon with AVX512-FP16 (12 independent chains, 1 thread) vfmadd231ps zmm 5.2 per ns, vdpbf16ps
// zmm 1.25 per ns, so its bf16 matmul ran at 57-64 GFLOPS against the f32 FMA path's 80-100
// (llmrt_kernels_bench BM_MatMul<BF16>, M = 16 and 512) while rounding the activations too.
// There the default is avx3_vnni; LLMRT_CPU_TARGET=avx3_zen4 still selects the BF16 path.
inline bool Bf16DotOutrunsFma() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  __cpuid(0, eax, ebx, ecx, edx);
  // "AuthenticAMD" in EBX, EDX, ECX.
  return ebx == 0x68747541u && edx == 0x69746e65u && ecx == 0x444d4163u;
#else
  return false;
#endif
}

}  // namespace llmrt::cpu

// The function attribute for code that uses AVX512-BF16 intrinsics, added to the AVX3 target's
// own (HWY_BEFORE_NAMESPACE); only meaningful inside HWY_TARGET == HWY_AVX3 code, and such a
// function runs only when ActiveCpuExtensions().avx512_bf16.
#define LLMRT_TARGET_BF16 __attribute__((target("avx512bf16")))

// The function attributes for arm64 code that uses sdot (LLMRT_TARGET_DOTPROD) or smmla and sdot
// (LLMRT_TARGET_I8MM); such a function runs only when ActiveCpuExtensions() has neon_dotprod /
// neon_i8mm, and only from Highway's NEON target body. The architecture is Armv8.2-A because
// GCC 12 declares those intrinsics for "armv8.2-a+dotprod" / "armv8.2-a+i8mm" and refuses to
// inline them into an armv8-a+dotprod function; the extensions exist only on Armv8.2 and later
// cores, so this asks for nothing the CPU lacks. "+crypto" is what Highway 1.0.3 compiles its
// NEON target with (HWY_TARGET_STR): without it the NEON body's inline helpers could not be
// inlined into these functions. The functions hold integer and float vector arithmetic alone.
#define LLMRT_TARGET_DOTPROD __attribute__((target("arch=armv8.2-a+crypto+dotprod")))
#define LLMRT_TARGET_I8MM __attribute__((target("arch=armv8.2-a+crypto+dotprod+i8mm")))

#endif  // LLMRT_BACKEND_CPU_CPU_FEATURES_H_
