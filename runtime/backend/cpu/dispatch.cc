#include "runtime/backend/cpu/dispatch.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/backend/cpu/dispatch.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace llmrt::cpu {
namespace HWY_NAMESPACE {

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace llmrt::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <atomic>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/backend/cpu/cpu_features.h"

namespace llmrt::cpu {

HWY_EXPORT(TargetName);

namespace {

struct NamedTarget {
  const char* name;
  int64_t mask;
  CpuExtensions extensions;  // required on top of `mask`, and the only ones kernels then use
};

// In CpuExtensions' order: avx512_vnni, avx512_bf16, avx_vnni, neon_dotprod, neon_i8mm, amx.
constexpr CpuExtensions kVnni = {true, false, false, false, false};
constexpr CpuExtensions kVnniAmx = {true, false, false, false, false, true};
constexpr CpuExtensions kVnniBf16 = {true, true, false, false, false};
constexpr CpuExtensions kAvxVnni = {false, false, true, false, false};
constexpr CpuExtensions kDotProd = {false, false, false, true, false};
constexpr CpuExtensions kI8mm = {false, false, false, true, true};

constexpr NamedTarget kTargets[] = {
#if HWY_ARCH_X86
    {"sse4", HWY_SSE4, {}},
    {"avx2", HWY_AVX2, {}},
    {"avx2_vnni", HWY_AVX2, kAvxVnni},
    {"avx3", HWY_AVX3, {}},
    {"avx3_vnni", HWY_AVX3, kVnni},
    {"avx3_zen4", HWY_AVX3, kVnniBf16},
    {"avx3_amx", HWY_AVX3, kVnniAmx},
#elif HWY_ARCH_ARM
    {"neon", HWY_NEON, {}},
    {"neon_dotprod", HWY_NEON, kDotProd},
    {"neon_i8mm", HWY_NEON, kI8mm},
    {"sve", HWY_SVE, {}},
#endif
    {"scalar", HWY_SCALAR | HWY_EMU128, {}},
};

// The extensions kernels may use, as bits (avx512_vnni 1, avx512_bf16 2, avx_vnni 4,
// neon_dotprod 8, neon_i8mm 16, amx 32), or kUnset before the first selection: then every
// extension the CPU has (MachineExtensions). Atomic because kernels read it on pool threads; it
// changes only between steps (SelectCpuTarget).
constexpr uint32_t kUnset = ~uint32_t{0};
std::atomic<uint32_t> active_extension_bits{kUnset};

uint32_t ToBits(const CpuExtensions& extensions) {
  return (extensions.avx512_vnni ? 1u : 0u) | (extensions.avx512_bf16 ? 2u : 0u) |
         (extensions.avx_vnni ? 4u : 0u) | (extensions.neon_dotprod ? 8u : 0u) |
         (extensions.neon_i8mm ? 16u : 0u) | (extensions.amx ? 32u : 0u);
}

CpuExtensions FromBits(uint32_t bits) {
  return {(bits & 1u) != 0, (bits & 2u) != 0,  (bits & 4u) != 0,
          (bits & 8u) != 0, (bits & 16u) != 0, (bits & 32u) != 0};
}

// The first extension `need` has and `have` lacks, as the error names it; nullptr if none.
const char* MissingExtension(const CpuExtensions& have, const CpuExtensions& need) {
  if (need.avx512_vnni && !have.avx512_vnni) return "AVX512-VNNI";
  if (need.avx512_bf16 && !have.avx512_bf16) return "AVX512-BF16";
  if (need.avx_vnni && !have.avx_vnni) return "AVX-VNNI";
  if (need.neon_dotprod && !have.neon_dotprod) return "the dot product instructions (asimddp)";
  if (need.neon_i8mm && !have.neon_i8mm) return "the int8 matrix multiply instructions (i8mm)";
  if (need.amx && !have.amx) {
    return "AMX-TILE / AMX-INT8 / AMX-BF16 (or the kernel's permission for the AMX tile state)";
  }
  return nullptr;
}

CpuExtensions MachineExtensions() {
  const int64_t supported = hwy::SupportedTargets() & HWY_TARGETS;
  CpuExtensions found = DetectCpuExtensions();
  if ((supported & HWY_AVX3) == 0) found.avx512_vnni = found.avx512_bf16 = false;
  // The AMX GEMM reproduces the AVX512-VNNI GEMVs' bits (quant_gemm_amx.cc).
  if (!found.avx512_vnni) found.amx = false;
  if ((supported & HWY_AVX2) == 0) found.avx_vnni = false;
  // The arm64 kernels that use them live in the NEON target's body; i8mm's also use sdot
  // (every core with FEAT_I8MM has FEAT_DotProd; Armv8.6 makes both mandatory).
  if ((supported & HWY_NEON) == 0) found.neon_dotprod = false;
  if (!found.neon_dotprod) found.neon_i8mm = false;
  return found;
}

// What the default ("best") selection uses: the machine's extensions, without AVX512-BF16 where
// its matmul is slower than the f32 FMA path (cpu_features.h, Bf16DotOutrunsFma).
CpuExtensions PreferredExtensions() {
  CpuExtensions preferred = MachineExtensions();
  if (!Bf16DotOutrunsFma()) preferred.avx512_bf16 = false;
  return preferred;
}

}  // namespace

CpuExtensions ActiveCpuExtensions() {
  uint32_t bits = active_extension_bits.load(std::memory_order_relaxed);
  if (bits == kUnset) {
    bits = ToBits(PreferredExtensions());
    active_extension_bits.store(bits, std::memory_order_relaxed);
  }
  return FromBits(bits);
}

absl::Status SelectCpuTarget(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  // Back to what the CPU really supports before checking a new restriction (and so after a
  // refused one).
  hwy::SetSupportedTargetsForTest(0);
  active_extension_bits.store(ToBits(PreferredExtensions()), std::memory_order_relaxed);
  if (lower.empty() || lower == "best") return absl::OkStatus();
  for (const NamedTarget& target : kTargets) {
    if (lower != target.name) continue;
    const int64_t runnable = target.mask & HWY_TARGETS & hwy::SupportedTargets();
    if (runnable == 0) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "LLMRT_CPU_TARGET=%s: this CPU or this build cannot run that target (compiled targets "
          "mask %#x, CPU supports %#x)",
          name, static_cast<uint64_t>(HWY_TARGETS),
          static_cast<uint64_t>(hwy::SupportedTargets())));
    }
    if (const char* missing = MissingExtension(MachineExtensions(), target.extensions)) {
      return absl::FailedPreconditionError(
          absl::StrFormat("LLMRT_CPU_TARGET=%s: this CPU lacks %s", name, missing));
    }
    hwy::SetSupportedTargetsForTest(runnable);
    active_extension_bits.store(ToBits(target.extensions), std::memory_order_relaxed);
    return absl::OkStatus();
  }
  std::string known;
  for (const NamedTarget& target : kTargets) absl::StrAppend(&known, " ", target.name);
  return absl::InvalidArgumentError(absl::StrFormat(
      "LLMRT_CPU_TARGET=%s: unknown target; expected one of:%s, best", name, known));
}

absl::Status SelectCpuTargetFromEnvironment() {
  const char* value = std::getenv("LLMRT_CPU_TARGET");
  if (value == nullptr) return absl::OkStatus();
  return SelectCpuTarget(value);
}

std::string ActiveCpuTarget() {
  std::string name = HWY_DYNAMIC_DISPATCH(TargetName)();
  const CpuExtensions extensions = ActiveCpuExtensions();
  if (name == "AVX2" && extensions.avx_vnni) return "AVX2_VNNI";
  if (name == "NEON" && extensions.neon_i8mm) return "NEON_I8MM";
  if (name == "NEON" && extensions.neon_dotprod) return "NEON_DOTPROD";
  if (name != "AVX3") return name;
  if (extensions.amx) return "AVX3_AMX";
  if (extensions.avx512_bf16) return "AVX3_ZEN4";
  if (extensions.avx512_vnni) return "AVX3_VNNI";
  return name;
}

}  // namespace llmrt::cpu
#endif  // HWY_ONCE
