// The x86 instruction-set extensions our kernels use beyond Highway 1.0.3's AVX3 target
// (AVX-512 F/VL/DQ/BW), read from CPUID (the OS support for the AVX-512 state is what Highway
// checks for AVX3 itself).
//
// Why not Highway's AVX3_DL target: in Highway 1.0.3 it also enables the VEX-encoded AVX-VNNI,
// and GCC 12 then encodes every 256-bit vpdpbusd as {vex}, which raises SIGILL on AVX-512 VNNI
// processors without AVX-VNNI (Ice Lake, Zen 4); it also requires VBMI2, VAES, BITALG, ...,
// which no kernel here needs. So the kernels that use these instructions live inside the AVX3
// target's bodies and run when ActiveCpuExtensions() (dispatch.h) says so: vpdpbusd and
// vdpbf16ps through inline assembly (quant_vnni-inl.h and matmul.cc say why), the bf16
// conversion in a function compiled with LLMRT_TARGET_BF16.
//
// Header-only: the configure-time probe (cpu_targets_probe.cc) includes it too.
#ifndef LLMRT_BACKEND_CPU_CPU_FEATURES_H_
#define LLMRT_BACKEND_CPU_CPU_FEATURES_H_

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace llmrt::cpu {

// Extensions on top of AVX3 (the AVX-512 ones) or AVX2 (AVX-VNNI). All false on other
// architectures.
struct CpuExtensions {
  bool avx512_vnni = false;  // vpdpbusd (EVEX): u8 x s8 dot products of 4 into int32 lanes
  bool avx512_bf16 = false;  // vdpbf16ps: bf16 pairs into f32 lanes
  bool avx_vnni = false;     // vpdpbusd (VEX, 256-bit): AVX2 machines such as Sierra Forest
};

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
#endif
  return found;
}

}  // namespace llmrt::cpu

// The function attribute for code that uses AVX512-BF16 intrinsics, added to the AVX3 target's
// own (HWY_BEFORE_NAMESPACE); only meaningful inside HWY_TARGET == HWY_AVX3 code, and such a
// function runs only when ActiveCpuExtensions().avx512_bf16.
#define LLMRT_TARGET_BF16 __attribute__((target("avx512bf16")))

#endif  // LLMRT_BACKEND_CPU_CPU_FEATURES_H_
