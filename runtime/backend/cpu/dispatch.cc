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

constexpr CpuExtensions kVnni = {/*avx512_vnni=*/true, /*avx512_bf16=*/false, /*avx_vnni=*/false};
constexpr CpuExtensions kVnniBf16 = {/*avx512_vnni=*/true, /*avx512_bf16=*/true,
                                     /*avx_vnni=*/false};
constexpr CpuExtensions kAvxVnni = {/*avx512_vnni=*/false, /*avx512_bf16=*/false,
                                    /*avx_vnni=*/true};

constexpr NamedTarget kTargets[] = {
#if HWY_ARCH_X86
    {"sse4", HWY_SSE4, {}},
    {"avx2", HWY_AVX2, {}},
    {"avx2_vnni", HWY_AVX2, kAvxVnni},
    {"avx3", HWY_AVX3, {}},
    {"avx3_vnni", HWY_AVX3, kVnni},
    {"avx3_zen4", HWY_AVX3, kVnniBf16},
#elif HWY_ARCH_ARM
    {"neon", HWY_NEON, {}},
    {"sve", HWY_SVE, {}},
#endif
    {"scalar", HWY_SCALAR | HWY_EMU128, {}},
};

bool Includes(const CpuExtensions& have, const CpuExtensions& need) {
  return (have.avx512_vnni || !need.avx512_vnni) && (have.avx512_bf16 || !need.avx512_bf16) &&
         (have.avx_vnni || !need.avx_vnni);
}

// The extensions kernels may use, as bits (avx512_vnni 1, avx512_bf16 2, avx_vnni 4), or kUnset
// before the first selection: then every extension the CPU has (MachineExtensions). Atomic because
// kernels read it on pool threads; it changes only between steps (SelectCpuTarget).
constexpr uint32_t kUnset = ~uint32_t{0};
std::atomic<uint32_t> active_extension_bits{kUnset};

uint32_t ToBits(const CpuExtensions& extensions) {
  return (extensions.avx512_vnni ? 1u : 0u) | (extensions.avx512_bf16 ? 2u : 0u) |
         (extensions.avx_vnni ? 4u : 0u);
}

CpuExtensions MachineExtensions() {
  const int64_t supported = hwy::SupportedTargets() & HWY_TARGETS;
  CpuExtensions found = DetectCpuExtensions();
  if ((supported & HWY_AVX3) == 0) found.avx512_vnni = found.avx512_bf16 = false;
  if ((supported & HWY_AVX2) == 0) found.avx_vnni = false;
  return found;
}

}  // namespace

CpuExtensions ActiveCpuExtensions() {
  uint32_t bits = active_extension_bits.load(std::memory_order_relaxed);
  if (bits == kUnset) {
    bits = ToBits(MachineExtensions());
    active_extension_bits.store(bits, std::memory_order_relaxed);
  }
  return {(bits & 1u) != 0, (bits & 2u) != 0, (bits & 4u) != 0};
}

absl::Status SelectCpuTarget(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  // Back to what the CPU really supports before checking a new restriction (and so after a
  // refused one).
  hwy::SetSupportedTargetsForTest(0);
  active_extension_bits.store(ToBits(MachineExtensions()), std::memory_order_relaxed);
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
    const CpuExtensions machine = MachineExtensions();
    if (!Includes(machine, target.extensions)) {
      return absl::FailedPreconditionError(
          absl::StrFormat("LLMRT_CPU_TARGET=%s: this CPU lacks %s", name,
                          target.extensions.avx512_bf16 && !machine.avx512_bf16 ? "AVX512-BF16"
                          : target.extensions.avx_vnni                          ? "AVX-VNNI"
                                                                                : "AVX512-VNNI"));
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
  if (name != "AVX3") return name;
  if (extensions.avx512_bf16) return "AVX3_ZEN4";
  if (extensions.avx512_vnni) return "AVX3_VNNI";
  return name;
}

}  // namespace llmrt::cpu
#endif  // HWY_ONCE
