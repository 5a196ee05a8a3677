#include "compiler/importer/checkpoint.h"

#include <sys/stat.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "compiler/importer/hf_config.h"
#include "compiler/importer/json_util.h"
#include "compiler/importer/safetensors.h"
#include "nlohmann/json.hpp"

namespace llmc {
namespace {

using ::llmc::importer_internal::DescribeJson;
using ::llmc::importer_internal::ParseJson;
using ::llmc::importer_internal::ReadSmallFile;
using Json = nlohmann::json;

constexpr char kSingleFile[] = "model.safetensors";
constexpr char kIndexFile[] = "model.safetensors.index.json";

bool IsRegularFile(const std::string& path) {
  struct stat file_stat;
  return stat(path.c_str(), &file_stat) == 0 && S_ISREG(file_stat.st_mode);
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

// The dtype most of the matmul weights (rank-2 tensors, by bytes) are stored in: norms and
// biases are often kept in f32 next to bf16 matrices, and must not decide.
llmrt::plan::DType MajorityMatrixDType(const std::map<std::string, TensorInfo>& tensors) {
  std::map<llmrt::plan::DType, uint64_t> bytes_by_dtype;
  for (const auto& [name, tensor] : tensors) {
    // Float matrices only: the I32 qweight of a GPTQ/AWQ checkpoint is not its weight dtype.
    if (tensor.shape.size() == 2 && tensor.dtype != llmrt::plan::I32) {
      bytes_by_dtype[tensor.dtype] += tensor.size_bytes;
    }
  }
  llmrt::plan::DType best = llmrt::plan::DTYPE_UNSPECIFIED;
  uint64_t best_bytes = 0;
  for (const auto& [dtype, bytes] : bytes_by_dtype) {
    if (bytes > best_bytes) {
      best = dtype;
      best_bytes = bytes;
    }
  }
  return best;
}

}  // namespace

struct Checkpoint::Mapping {
  std::unique_ptr<SafetensorsFile> file;
};

Checkpoint::~Checkpoint() = default;

const TensorInfo* Checkpoint::Find(const std::string& name) const {
  const auto found = tensors_.find(name);
  return found == tensors_.end() ? nullptr : &found->second;
}

absl::Status Checkpoint::AddFile(std::unique_ptr<SafetensorsFile> file,
                                 const std::string& file_name) {
  for (const SafetensorsTensor& tensor : file->tensors()) {
    TensorInfo info;
    info.name = tensor.name;
    info.file = file_name;
    info.dtype = tensor.dtype;
    info.shape = tensor.shape;
    info.data = tensor.data;
    info.size_bytes = tensor.size_bytes;
    tensors_.emplace(tensor.name, std::move(info));
  }
  auto mapping = std::make_unique<Mapping>();
  mapping->file = std::move(file);
  mappings_.push_back(std::move(mapping));
  return absl::OkStatus();
}

absl::Status Checkpoint::LoadShards(const std::string& index_path) {
  absl::StatusOr<std::string> text = ReadSmallFile(index_path);
  if (!text.ok()) return text.status();
  absl::StatusOr<Json> index = ParseJson(*text, index_path);
  if (!index.ok()) return index.status();
  if (!index->is_object() || !index->contains("weight_map") ||
      !(*index)["weight_map"].is_object()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: field \"weight_map\": expected an object {tensor: shard file}, found %s", index_path,
        index->is_object() && index->contains("weight_map") ? DescribeJson((*index)["weight_map"])
                                                            : std::string("nothing")));
  }
  // Shard -> the tensors the index places in it; std::map keeps the open order stable.
  std::map<std::string, std::set<std::string>> tensors_by_shard;
  for (const auto& [tensor, shard] : (*index)["weight_map"].items()) {
    if (!shard.is_string() || shard.get<std::string>().empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: weight_map[\"%s\"]: expected a shard file name, found %s",
                          index_path, tensor, DescribeJson(shard)));
    }
    const std::string shard_name = shard.get<std::string>();
    // Shards live beside the index; a path leaving the directory is a corrupt or hostile index.
    if (shard_name.front() == '/' || shard_name.find("..") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: weight_map[\"%s\"]: shard \"%s\" is not a file name inside %s",
                          index_path, tensor, shard_name, dir_));
    }
    tensors_by_shard[shard_name].insert(tensor);
  }
  if (tensors_by_shard.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: field \"weight_map\" lists no tensors", index_path));
  }
  for (const auto& [shard_name, listed] : tensors_by_shard) {
    const std::string shard_path = JoinPath(dir_, shard_name);
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(shard_path);
    if (!file.ok()) {
      if (absl::IsNotFound(file.status())) {
        return absl::NotFoundError(
            absl::StrFormat("%s: shard %s (holding %d tensors, e.g. %s) is missing: %s", index_path,
                            shard_name, listed.size(), *listed.begin(), file.status().message()));
      }
      return file.status();
    }
    for (const SafetensorsTensor& tensor : (*file)->tensors()) {
      if (listed.count(tensor.name) != 0) continue;
      const auto found = (*index)["weight_map"].find(tensor.name);
      if (found == (*index)["weight_map"].end()) {
        return absl::InvalidArgumentError(absl::StrFormat("%s: tensor %s is not listed in %s",
                                                          shard_path, tensor.name, index_path));
      }
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: tensor %s is stored here, but %s assigns it to %s", shard_path,
                          tensor.name, index_path, found->get<std::string>()));
    }
    for (const std::string& tensor : listed) {
      if ((*file)->Find(tensor) == nullptr) {
        return absl::NotFoundError(
            absl::StrFormat("%s: lists tensor %s in %s, but %s has no such tensor", index_path,
                            tensor, shard_name, shard_path));
      }
    }
    if (absl::Status status = AddFile(*std::move(file), shard_name); !status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir) {
  auto checkpoint = std::unique_ptr<Checkpoint>(new Checkpoint());
  checkpoint->dir_ = dir;
  struct stat dir_stat;
  if (stat(dir.c_str(), &dir_stat) != 0 || !S_ISDIR(dir_stat.st_mode)) {
    return absl::NotFoundError(absl::StrFormat("%s: not a directory", dir));
  }

  const std::string config_path = JoinPath(dir, "config.json");
  absl::StatusOr<std::string> config_text = ReadSmallFile(config_path);
  if (!config_text.ok()) return config_text.status();
  absl::StatusOr<llmrt::plan::ModelConfig> config = ParseModelConfig(*config_text, config_path);
  if (!config.ok()) return config.status();
  checkpoint->config_ = *std::move(config);

  const std::string generation_path = JoinPath(dir, "generation_config.json");
  std::optional<std::string> generation_text;
  if (IsRegularFile(generation_path)) {
    absl::StatusOr<std::string> text = ReadSmallFile(generation_path);
    if (!text.ok()) return text.status();
    generation_text = *std::move(text);
  }
  absl::StatusOr<llmrt::plan::GenerationDefaults> generation = ParseGenerationDefaults(
      generation_text.has_value() ? std::optional<std::string_view>(*generation_text)
                                  : std::nullopt,
      generation_path, *config_text, config_path);
  if (!generation.ok()) return generation.status();
  checkpoint->generation_ = *std::move(generation);

  // transformers looks for the single file first, then the index.
  const std::string single_path = JoinPath(dir, kSingleFile);
  const std::string index_path = JoinPath(dir, kIndexFile);
  if (IsRegularFile(single_path)) {
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(single_path);
    if (!file.ok()) return file.status();
    if (absl::Status status = checkpoint->AddFile(*std::move(file), kSingleFile); !status.ok()) {
      return status;
    }
  } else if (IsRegularFile(index_path)) {
    if (absl::Status status = checkpoint->LoadShards(index_path); !status.ok()) return status;
  } else {
    return absl::NotFoundError(absl::StrFormat(
        "%s: no weights found: looked for %s and %s (only safetensors checkpoints are "
        "supported)",
        dir, kSingleFile, kIndexFile));
  }

  const llmrt::plan::DType stored = MajorityMatrixDType(checkpoint->tensors_);
  if (stored != llmrt::plan::DTYPE_UNSPECIFIED) checkpoint->config_.set_checkpoint_dtype(stored);
  return checkpoint;
}

}  // namespace llmc
