// Fuzzers whose target reads a file (the plan reader and the safetensors reader mmap a path):
// the input is written to a per-process temporary file first.
#ifndef LLMC_TESTS_FUZZ_FUZZ_FILE_H_
#define LLMC_TESTS_FUZZ_FUZZ_FILE_H_

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace llmc::fuzz {

// Overwrites the same file on every call; returns its path.
inline const std::string& WriteInputFile(const uint8_t* data, size_t size, const char* suffix) {
  static const std::string path =
      "/tmp/llmc-fuzz-" + std::to_string(getpid()) + std::string(suffix);
  FILE* file = std::fopen(path.c_str(), "wb");
  if (file != nullptr) {
    if (size > 0) std::fwrite(data, 1, size, file);
    std::fclose(file);
  }
  return path;
}

}  // namespace llmc::fuzz

#endif  // LLMC_TESTS_FUZZ_FUZZ_FILE_H_
