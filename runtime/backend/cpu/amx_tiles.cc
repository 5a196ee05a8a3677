#include "runtime/backend/cpu/amx_tiles.h"

#include <cstdlib>
#include <string_view>

namespace llmrt::cpu {
namespace {

bool AmxEmulationRequested() {
  const char* value = std::getenv("LLMRT_AMX_EMULATION");
  return value != nullptr && std::string_view(value) == "1";
}

std::atomic<bool> amx_emulation{AmxEmulationRequested()};
std::atomic<int64_t> emulated_tile_products{0};

}  // namespace

bool SetAmxTileEmulationForTesting(bool on) {
  return amx_emulation.exchange(on, std::memory_order_relaxed);
}

bool AmxTileEmulation() { return amx_emulation.load(std::memory_order_relaxed); }

int64_t EmulatedAmxTileProducts() { return emulated_tile_products.load(std::memory_order_relaxed); }

void CountEmulatedAmxTileProduct() {
  emulated_tile_products.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace llmrt::cpu
