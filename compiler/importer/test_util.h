// Test helpers for the importer tests: temp directories and hand-built safetensors files.
// Test-only: not part of llmc_importer.
#ifndef LLMC_COMPILER_IMPORTER_TEST_UTIL_H_
#define LLMC_COMPILER_IMPORTER_TEST_UTIL_H_

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace llmc::testing_util {

// A temporary directory removed (with its files, one level deep) at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "/importer_test.XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    const char* created = mkdtemp(buffer.data());
    EXPECT_NE(created, nullptr);
    if (created != nullptr) path_ = created;
  }
  ~TempDir() {
    if (DIR* handle = opendir(path_.c_str())) {
      while (const dirent* entry = readdir(handle)) {
        const std::string name = entry->d_name;
        if (name != "." && name != "..") unlink((path_ + "/" + name).c_str());
      }
      closedir(handle);
    }
    rmdir(path_.c_str());
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The 8-byte length, `header_json` verbatim, then `data`: for headers that lie.
inline std::string RawSafetensors(const std::string& header_json, const std::string& data) {
  std::string bytes(8, '\0');
  uint64_t length = header_json.size();
  for (int byte = 0; byte < 8; ++byte)
    bytes[byte] = static_cast<char>((length >> (8 * byte)) & 0xff);
  return bytes + header_json + data;
}

struct TensorSpec {
  std::string name;
  std::string dtype;  // safetensors name: "F32", "BF16", ...
  std::vector<int64_t> shape;
  std::string bytes;  // raw little-endian data
};

// A well-formed safetensors file holding `tensors` back to back, in order.
inline std::string BuildSafetensors(const std::vector<TensorSpec>& tensors,
                                    const nlohmann::json& metadata = nullptr) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const TensorSpec& tensor : tensors) {
    header[tensor.name] = {{"dtype", tensor.dtype},
                           {"shape", tensor.shape},
                           {"data_offsets", {data.size(), data.size() + tensor.bytes.size()}}};
    data += tensor.bytes;
  }
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  return RawSafetensors(header.dump(), data);
}

template <typename T>
std::string BytesOf(const std::vector<T>& values) {
  std::string bytes(values.size() * sizeof(T), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// A small valid Llama config.json; tests edit fields of the returned object.
inline nlohmann::json LlamaConfigJson() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"vocab_size", 32},
          {"hidden_size", 16},
          {"intermediate_size", 24},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"hidden_act", "silu"},
          {"max_position_embeddings", 128},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 500000.0},
          {"tie_word_embeddings", false},
          {"bos_token_id", 1},
          {"eos_token_id", 2},
          {"torch_dtype", "bfloat16"}};
}

}  // namespace llmc::testing_util

#endif  // LLMC_COMPILER_IMPORTER_TEST_UTIL_H_
