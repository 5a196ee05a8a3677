// libFuzzer target: any bytes as model.safetensors.index.json (and, after a NUL byte, as the
// shard it names), opened through Checkpoint::Open the way `llmc compile` opens a sharded
// checkpoint. Open must return a status, never crash, read outside a shard or open a file
// outside the checkpoint directory; when it succeeds, every tensor's bytes must be readable.
//
// Input: index JSON, then optionally NUL and the bytes of the shard "a.safetensors" (which may
// hold NULs: the split is at the first NUL only). An index naming other shards reaches the
// missing-shard and bad-name paths.
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "compiler/importer/checkpoint.h"
#include "compiler/importer/hf_config.h"

namespace {

// A fixed, valid config.json: the fuzzer spends its time on the index and the shards.
constexpr char kConfig[] =
    R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8,)"
    R"( "intermediate_size": 16, "num_attention_heads": 2, "num_key_value_heads": 1,)"
    R"( "num_hidden_layers": 1, "vocab_size": 32, "max_position_embeddings": 64,)"
    R"( "rms_norm_eps": 1e-5, "torch_dtype": "float32"})";

void WriteFile(const std::string& path, std::string_view bytes) {
  FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return;
  if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), file);
  std::fclose(file);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    const std::string path = "/tmp/llmc-fuzz-index-" + std::to_string(getpid());
    mkdir(path.c_str(), 0700);
    WriteFile(path + "/config.json", kConfig);
    // A config the importer refuses would stop every input before the index: fail loudly.
    if (!llmc::ParseModelConfig(kConfig, "config.json").ok()) std::abort();
    return path;
  }();
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  WriteFile(dir + "/model.safetensors.index.json", input.substr(0, nul));
  WriteFile(dir + "/a.safetensors",
            nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1));
  auto checkpoint = llmc::Checkpoint::Open(dir);
  if (!checkpoint.ok()) return 0;
  uint64_t sum = 0;
  for (const auto& [name, tensor] : (*checkpoint)->tensors()) {
    if (tensor.size_bytes > 0) sum += tensor.data[0] + tensor.data[tensor.size_bytes - 1];
  }
  return sum == 0xFFFFFFFFFFFFFFFF;  // keeps the reads from being optimized away
}
