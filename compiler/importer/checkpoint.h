// Checkpoint: a HuggingFace model directory opened for compilation.
//
// Reads config.json (-> plan::ModelConfig), generation_config.json (optional, ->
// plan::GenerationDefaults), and the weights: model.safetensors, or the shards named by
// model.safetensors.index.json. Safetensors files are mmapped; TensorInfo::data points into
// the mapping (no copy). The tokenizer is imported separately (compiler/tokenizer).
//
// Weights: model.safetensors if present (transformers' order), else the index's shards, each
// opened once; a tensor the index and the shards disagree on is an error naming both files.
// config().checkpoint_dtype is the dtype holding most bytes of rank-2 tensors (the matmul
// weights), falling back to config.json's torch_dtype when there are none. Config semantics
// and defaults: compiler/importer/hf_config.h.
//
// Every error names the file, the tensor or field, what was expected and what was found.
//
// Ownership: the Checkpoint owns the mappings; TensorInfo pointers live as long as it.
// Thread-safety: immutable after Open(); safe to read from any thread.
#ifndef LLMC_COMPILER_IMPORTER_CHECKPOINT_H_
#define LLMC_COMPILER_IMPORTER_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmc {

struct TensorInfo {
  std::string name;
  std::string file;  // the safetensors file it came from (name inside dir()), for messages
  // F32, F16 or BF16; I32 for the packed codes and g_idx of GPTQ/AWQ checkpoints.
  llmrt::plan::DType dtype = llmrt::plan::DTYPE_UNSPECIFIED;
  std::vector<int64_t> shape;
  // Into the mapping; little-endian elements, NOT aligned (safetensors packs tensors after a
  // header of any length): read with memcpy or unaligned loads.
  const uint8_t* data = nullptr;
  uint64_t size_bytes = 0;
};

class SafetensorsFile;

class Checkpoint {
 public:
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir);
  ~Checkpoint();
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  const std::string& dir() const { return dir_; }
  const llmrt::plan::ModelConfig& config() const { return config_; }
  const llmrt::plan::GenerationDefaults& generation() const { return generation_; }
  // All tensors, by name.
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  // nullptr when absent.
  const TensorInfo* Find(const std::string& name) const;

 private:
  struct Mapping;
  Checkpoint() = default;
  absl::Status AddFile(std::unique_ptr<SafetensorsFile> file, const std::string& file_name);
  absl::Status LoadShards(const std::string& index_path);
  std::string dir_;
  llmrt::plan::ModelConfig config_;
  llmrt::plan::GenerationDefaults generation_;
  std::map<std::string, TensorInfo> tensors_;
  std::vector<std::unique_ptr<Mapping>> mappings_;
};

}  // namespace llmc

#endif  // LLMC_COMPILER_IMPORTER_CHECKPOINT_H_
