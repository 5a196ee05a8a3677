#include "compiler/pipeline/compile.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/EmitProgram.h"
#include "codegen/cuda/CudaTarget.h"
#include "codegen/cuda/NvrtcCompiler.h"
#include "compiler/arch/arch.h"
#include "compiler/arch/weight_source.h"
#include "compiler/importer/checkpoint.h"
#include "compiler/pipeline/chat_template_check.h"
#include "compiler/tokenizer/import_tokenizer.h"
#include "compiler/tokenizer/self_check.h"
#include "mlir/IR/MLIRContext.h"
#include "passes/Passes.h"
#include "runtime/plan/plan_writer.h"

namespace llmc {
namespace {

namespace plan = llmrt::plan;

constexpr char kProducer[] = "llmc 0.1";
// Blocks of 16 tokens: vLLM's default, small enough that a short sequence wastes little and
// large enough that block-table lookups stay off the attention hot path.
constexpr int kDefaultKvBlockSize = 16;

// Runs `stage` between BeginStage/EndStage so every stage reports, whether it succeeds or not.
template <typename Fn>
auto RunStage(ProgressSink* progress, const std::string& name, Fn&& stage) {
  if (progress) progress->BeginStage(name);
  auto result = stage();
  if (progress && result.ok()) progress->EndStage();
  return result;
}

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat(path, ": cannot open the file"));
  std::stringstream contents;
  contents << file.rdbuf();
  if (file.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return contents.str();
}

}  // namespace

absl::Status Compile(const CompileOptions& options, ProgressSink* progress) {
  std::unique_ptr<Checkpoint> checkpoint;
  plan::TokenizerSpec tokenizer;
  absl::Status imported = RunStage(progress, "import", [&]() -> absl::Status {
    absl::StatusOr<std::unique_ptr<Checkpoint>> opened = Checkpoint::Open(options.model_dir);
    if (!opened.ok()) return opened.status();
    checkpoint = *std::move(opened);
    absl::StatusOr<plan::TokenizerSpec> spec = ImportTokenizer(options.model_dir);
    if (!spec.ok()) return spec.status();
    tokenizer = *std::move(spec);
    // Round-trips sample strings through the runtime tokenizer built from this spec, so a
    // tokenizer that would fail or garble text at run time stops the compile here.
    if (absl::Status checked = SelfCheckTokenizer(tokenizer); !checked.ok()) return checked;
    std::string template_source = "tokenizer_config.json";
    if (!options.chat_template_path.empty()) {
      absl::StatusOr<std::string> text = ReadTextFile(options.chat_template_path);
      if (!text.ok()) return text.status();
      tokenizer.set_chat_template(*std::move(text));
      template_source = options.chat_template_path;
    }
    if (absl::Status checked = CheckChatTemplate(tokenizer, template_source); !checked.ok()) {
      return checked;
    }
    return ValidateTensors(checkpoint->config(), *checkpoint);
  });
  if (!imported.ok()) return imported;

  const plan::ModelConfig& config = checkpoint->config();
  plan::DType weight_dtype = options.weight_dtype.value_or(config.checkpoint_dtype());
  if (weight_dtype != plan::F32 && weight_dtype != plan::F16 && weight_dtype != plan::BF16) {
    weight_dtype = plan::F32;
  }

  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  absl::Status built = RunStage(progress, "build-ir", [&]() -> absl::Status {
    absl::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> result =
        BuildModule(context, config, *checkpoint);
    if (!result.ok()) return result.status();
    module = *std::move(result);
    return absl::OkStatus();
  });
  if (!built.ok()) return built;

  absl::Status optimized = RunStage(progress, "passes", [&]() -> absl::Status {
    PipelineOptions pipeline;
    pipeline.dumpDir = options.dump_ir_dir;
    return runPipeline(*module, pipeline);
  });
  if (!optimized.ok()) return optimized;

  return RunStage(progress, "codegen", [&]() -> absl::Status {
    absl::StatusOr<std::unique_ptr<plan::PlanWriter>> writer =
        plan::PlanWriter::Create(options.output_path);
    if (!writer.ok()) return writer.status();
    TensorMapWeightSource weights(checkpoint->tensors());
    EmitProgress report;
    if (progress) {
      report = [progress](int64_t done, int64_t total, uint64_t bytes) {
        progress->TensorProgress(done, total, bytes);
      };
    }
    plan::PlanMeta meta;
    std::vector<plan::Tensor> tensors;
    absl::StatusOr<plan::Program> program =
        emitProgram(*module, weights, weight_dtype, **writer, &tensors, report);
    if (!program.ok()) return program.status();

    meta.set_producer(kProducer);
    *meta.mutable_config() = config;
    *meta.mutable_generation() = checkpoint->generation();
    *meta.mutable_tokenizer() = std::move(tokenizer);
    for (plan::Tensor& tensor : tensors) *meta.add_tensors() = std::move(tensor);
    *meta.mutable_program() = *std::move(program);
    meta.set_weight_dtype(weight_dtype);
    plan::KvCacheSpec* kv = meta.mutable_kv_cache();
    kv->set_num_layers(static_cast<int32_t>(config.num_layers()));
    kv->set_num_kv_heads(static_cast<int32_t>(config.num_kv_heads()));
    kv->set_head_dim(static_cast<int32_t>(config.head_dim()));
    kv->set_dtype(plan::F32);
    kv->set_default_block_size(kDefaultKvBlockSize);
    if (!options.target_cpu) {
      // emitProgram always records the CPU kernel names; a CUDA-only plan drops them, which is
      // what tells the runtime not to fall back to the CPU.
      auto* tables = meta.mutable_program()->mutable_kernel_tables();
      for (int i = tables->size() - 1; i >= 0; --i) {
        if (tables->Get(i).target() == "cpu") tables->DeleteSubrange(i, 1);
      }
    }
    if (!options.cuda_sm_versions.empty()) {
      cuda::CudaTargetOptions cuda_options;
      cuda_options.smVersions = options.cuda_sm_versions;
      cuda_options.cacheDir =
          options.cuda_cache_dir.empty() ? cuda::defaultCacheDir() : options.cuda_cache_dir;
      if (absl::Status status = cuda::addCudaKernelTables(meta, **writer, cuda_options);
          !status.ok()) {
        return status;
      }
    }
    // On any failure above, the writer's destructor removes the temporary file.
    return (*writer)->Finish(meta);
  });
}

}  // namespace llmc
