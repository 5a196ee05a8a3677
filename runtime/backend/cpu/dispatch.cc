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
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace llmrt::cpu {

HWY_EXPORT(TargetName);

namespace {

struct NamedTarget {
  const char* name;
  int64_t mask;
};

constexpr NamedTarget kTargets[] = {
#if HWY_ARCH_X86
    {"sse4", HWY_SSE4},
    {"avx2", HWY_AVX2},
    {"avx3", HWY_AVX3},
#elif HWY_ARCH_ARM
    {"neon", HWY_NEON},
    {"sve", HWY_SVE},
#endif
    {"scalar", HWY_SCALAR | HWY_EMU128},
};

}  // namespace

absl::Status SelectCpuTarget(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  // Back to what the CPU really supports before checking a new restriction.
  hwy::SetSupportedTargetsForTest(0);
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
    hwy::SetSupportedTargetsForTest(runnable);
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

std::string ActiveCpuTarget() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

}  // namespace llmrt::cpu
#endif  // HWY_ONCE
