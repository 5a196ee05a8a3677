// Test support (gtest): included by a test binary that ctest also runs under LLMRT_AMX_EMULATION=1
// (its *.amx_emulated runs, on CPUs with AVX512-VNNI and no AMX), so that the run fails if no tile
// product ran on the emulated tiles: it would then have checked nothing of the AMX paths.
#ifndef LLMRT_BACKEND_CPU_AMX_EMULATION_TEST_ENV_H_
#define LLMRT_BACKEND_CPU_AMX_EMULATION_TEST_ENV_H_

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "runtime/backend/cpu/amx_tiles.h"

namespace llmrt::cpu::testing {

class AmxEmulationRan : public ::testing::Environment {
 public:
  void TearDown() override {
    const char* emulation = std::getenv("LLMRT_AMX_EMULATION");
    if (emulation == nullptr || std::string(emulation) != "1") return;
    EXPECT_GT(EmulatedAmxTileProducts(), 0)
        << "LLMRT_AMX_EMULATION=1, yet nothing ran on the emulated AMX tiles";
  }
};

inline ::testing::Environment* const kAmxEmulationRan =
    ::testing::AddGlobalTestEnvironment(new AmxEmulationRan);

}  // namespace llmrt::cpu::testing

#endif  // LLMRT_BACKEND_CPU_AMX_EMULATION_TEST_ENV_H_
