// libFuzzer target: any bytes as a plan file. Open (with blob checksums) must return a status,
// never crash or read outside the file; when it succeeds, every blob must be readable.
#include <cstddef>
#include <cstdint>

#include "runtime/plan/plan_reader.h"
#include "tests/fuzz/fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = llmc::fuzz::WriteInputFile(data, size, ".plan");
  llmrt::plan::PlanOpenOptions options;
  options.verify_blob_checksums = true;
  auto plan = llmrt::plan::Plan::Open(path, options);
  if (!plan.ok()) return 0;
  uint64_t sum = 0;
  for (int i = 0; i < (*plan)->meta().tensors_size(); ++i) {
    const uint8_t* blob = (*plan)->blob(i);
    const uint64_t bytes = (*plan)->meta().tensors(i).size_bytes();
    if (bytes > 0) sum += blob[0] + blob[bytes - 1];
  }
  return sum == 0xFFFFFFFFFFFFFFFF;  // keeps the reads from being optimized away
}
