// libFuzzer target: any bytes as config.json and as generation_config.json.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "compiler/importer/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)llmc::ParseModelConfig(text, "config.json");
  (void)llmc::ParseGenerationDefaults(text, "generation_config.json", text, "config.json");
  return 0;
}
