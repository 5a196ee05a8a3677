//===- CudaTarget.cpp - CUDA kernel tables of a plan ----------------------===//

#include "codegen/cuda/CudaTarget.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codegen/cuda/EmitCuda.h"
#include "codegen/cuda/NvrtcCompiler.h"

namespace llmc::cuda {

namespace plan = llmrt::plan;

absl::StatusOr<int> parseSmVersion(const std::string &text) {
  std::string digits = text;
  if (digits.rfind("sm_", 0) == 0)
    digits = digits.substr(3);
  int version = 0;
  if (!absl::SimpleAtoi(digits, &version) || version < 75 || version > 121)
    return absl::InvalidArgumentError(absl::StrFormat(
        "CUDA target \"%s\": expected sm_XY with XY in 75..121 (e.g. sm_80, sm_90)", text));
  return version;
}

absl::Status addCudaKernelTables(plan::PlanMeta &meta, plan::PlanWriter &writer,
                                 const CudaTargetOptions &options) {
  if (options.smVersions.empty())
    return absl::InvalidArgumentError("CUDA target: no SM version requested");
  absl::StatusOr<CudaEmission> emission = emitCuda(meta);
  if (!emission.ok())
    return emission.status();

  std::vector<int> versions = options.smVersions;
  std::sort(versions.begin(), versions.end());
  versions.erase(std::unique(versions.begin(), versions.end()), versions.end());
  std::vector<std::string> architectures;
  for (int version : versions)
    architectures.push_back(absl::StrCat("sm_", version));
  architectures.push_back(absl::StrCat("compute_", versions.back()));

  std::vector<CompileRequest> requests;
  for (const std::string &architecture : architectures)
    for (size_t kernel = 0; kernel < emission->kernels.size(); ++kernel)
      requests.push_back(
          {emission->kernelSource(kernel), emission->kernels[kernel].info.name(), architecture});
  absl::StatusOr<std::vector<CompiledCode>> compiled =
      compileAll(requests, options.cacheDir, options.threads);
  if (!compiled.ok())
    return compiled.status();

  size_t request = 0;
  for (const std::string &architecture : architectures) {
    plan::KernelTable table = emission->kernelTable(absl::StrCat("cuda:", architecture));
    table.set_compiler_version(nvrtcVersion());
    for (int kernel = 0; kernel < table.kernels_size(); ++kernel, ++request) {
      const CompiledCode &code = (*compiled)[request];
      // Zero-padded to whole I32 words: the tensor table has no byte dtype.
      std::string padded = code.code;
      padded.resize((padded.size() + 3) / 4 * 4, '\0');
      absl::StatusOr<plan::BlobRange> range = writer.AddBlob(padded.data(), padded.size());
      if (!range.ok())
        return range.status();
      plan::KernelTable::Kernel *entry = table.mutable_kernels(kernel);
      plan::Tensor *tensor = meta.add_tensors();
      tensor->set_name(absl::StrCat("cuda.", architecture, ".", entry->name()));
      tensor->set_dtype(plan::I32);
      tensor->add_shape(static_cast<int64_t>(padded.size() / 4));
      tensor->set_offset(range->offset);
      tensor->set_size_bytes(range->size_bytes);
      tensor->set_checksum(range->checksum);
      entry->set_code_tensor(meta.tensors_size() - 1);
      entry->set_code_size(code.code.size());
      entry->set_registers(code.registers);
      entry->set_spill_store_bytes(code.spillStoreBytes);
      entry->set_spill_load_bytes(code.spillLoadBytes);
      entry->set_shared_bytes(code.sharedBytes);
    }
    *meta.mutable_program()->add_kernel_tables() = std::move(table);
  }
  return absl::OkStatus();
}

} // namespace llmc::cuda
