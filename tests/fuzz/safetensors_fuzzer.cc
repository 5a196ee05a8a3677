// libFuzzer target: any bytes as a .safetensors file. Open must validate everything it hands
// out: when it succeeds, every tensor's bytes must lie inside the mapping.
#include <cstddef>
#include <cstdint>

#include "compiler/importer/safetensors.h"
#include "tests/fuzz/fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = llmc::fuzz::WriteInputFile(data, size, ".safetensors");
  auto file = llmc::SafetensorsFile::Open(path);
  if (!file.ok()) return 0;
  uint64_t sum = 0;
  for (const llmc::SafetensorsTensor& tensor : (*file)->tensors()) {
    if (tensor.size_bytes > 0) sum += tensor.data[0] + tensor.data[tensor.size_bytes - 1];
  }
  return sum == 0xFFFFFFFFFFFFFFFF;
}
