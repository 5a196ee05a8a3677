// llmrt-kit plan: plans too large for the GPU kit travel as skeletons and are filled in on the
// device.
//
//   llmrt-kit plan strip PLAN SKELETON [--min-bytes N]   (here, by scripts/gpu-kit.sh)
//   llmrt-kit plan fill SKELETON PLAN [--seed S]          (on the GPU machine, by run.sh)
//
// The kit is limited to ~48 MiB, a llama-110m-shaped f16 plan alone is ~270 MB, a TinyLlama-shaped
// one 2.2 GB and a Qwen3-MoE-shaped one 3.3 GB; their weights are random (llmc synth) anyway, so a
// skeleton keeps everything but the bulk of the weights: the PlanMeta (program, kernel tables,
// tokenizer, shapes, quantization) and every blob smaller than --min-bytes (64 KiB: norms,
// biases, rope tables, permutations, the CUDA kernels' code) or of a kind that must not be random
// (I32, a 1-D float vector). `fill` writes a valid plan from it (PlanWriter: checksums
// recomputed, temporary file renamed) whose stripped blobs are drawn afresh, deterministically
// from --seed:
//   F32 / F16 / BF16 matrices   uniform in [-0.0346, 0.0346] (standard deviation 0.02, the
//   and expert stacks           usual initializer range, so activations stay finite): 2-D
//                               matrices, 3-D expert stacks [experts, rows, cols] and the
//                               routers, whose random logits spread tokens over the experts
//                               as a speed test wants;
//   I8 codes                    uniform in [-127, 127] (what a symmetric quantizer writes);
//   I4 / FP4_E2M1 codes         uniform bytes (every nibble is a valid code);
//   U8 zero points              uniform in [0, 15];
//   F16 quantization scales     0.02 / (standard deviation of a code) x uniform [0.5, 1.5);
//   E8M0 MXFP4 scales           bytes 119 or 120 (2^-8, 2^-7): uniform E2M1 codes have an RMS
//                               of 2.93, so weights get a standard deviation of 0.011-0.023.
// Logits therefore differ from the original plan's; the kit uses these plans for speed and for
// CPU-against-GPU checks on the same filled plan, never against recorded outputs.
//
// Skeleton layout (little-endian): "LLMKITS1", u64 meta size, the PlanMeta bytes as in the
// original plan, u32 kept-blob count, then per kept blob u32 tensor index, u64 size, the bytes.
//
// Exit status: 0 success, 1 an error (message on stderr), 2 a usage error.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/plan/dtype.h"
#include "runtime/plan/plan_reader.h"
#include "runtime/plan/plan_writer.h"
#include "tests/kit/kit_main.h"

namespace llmrt::kit {
namespace {

constexpr char kMagic[8] = {'L', 'L', 'M', 'K', 'I', 'T', 'S', '1'};
constexpr uint64_t kDefaultMinBytes = 64 << 10;
constexpr float kWeightRange = 0.0346f;  // uniform [-a, a] has standard deviation a / sqrt(3)
constexpr size_t kChunkBytes = 1 << 20;

constexpr char kUsage[] =
    "usage: llmrt-kit plan strip PLAN SKELETON [--min-bytes N]\n"
    "       llmrt-kit plan fill SKELETON PLAN [--seed S]\n";

uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

enum class Fill { kKeep, kFloat, kCodes8, kBytes, kZeroPoints, kScales8, kScales4, kE8M0Scales };

// E8M0 bytes of the MXFP4 scales `fill` draws (header): 127 + log2 of the scale.
constexpr uint8_t kE8M0Low = 119;  // 2^-8; the other is 2^-7

// The quantization companions of a plan: tensor index -> how it is filled and the dtype that
// fill needs (a companion of another dtype is kept as it is).
struct Companion {
  Fill fill;
  plan::DType dtype;
};
using Companions = std::map<int, Companion>;

Companions Classify(const plan::PlanMeta& meta) {
  Companions companions;
  for (const plan::Tensor& tensor : meta.tensors()) {
    if (!tensor.has_quantization()) continue;
    const plan::Quantization& q = tensor.quantization();
    if (q.has_scales()) {
      companions[q.scales()] =
          tensor.dtype() == plan::FP4_E2M1
              ? Companion{Fill::kE8M0Scales, plan::E8M0}
              : Companion{q.bits() == 8 ? Fill::kScales8 : Fill::kScales4, plan::F16};
    }
    if (q.has_zero_points()) companions[q.zero_points()] = {Fill::kZeroPoints, plan::U8};
  }
  return companions;
}

// How tensor `index` is filled.
Fill FillOf(const plan::PlanMeta& meta, int index, const Companions& companions,
            uint64_t min_bytes) {
  const plan::Tensor& tensor = meta.tensors(index);
  if (tensor.size_bytes() < min_bytes || tensor.name().rfind("cuda.", 0) == 0) return Fill::kKeep;
  if (auto found = companions.find(index); found != companions.end()) {
    return tensor.dtype() == found->second.dtype ? found->second.fill : Fill::kKeep;
  }
  switch (tensor.dtype()) {
    case plan::F32:
    case plan::F16:
    case plan::BF16:
      return tensor.shape_size() >= 2 ? Fill::kFloat : Fill::kKeep;
    case plan::I8:
      return Fill::kCodes8;
    case plan::I4:
    case plan::FP4_E2M1:
      return Fill::kBytes;
    default:
      return Fill::kKeep;
  }
}

absl::Status WriteFile(const std::string& path, const std::string& bytes) {
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::remove(temp.c_str());
      return absl::InternalError(absl::StrCat(temp, ": cannot write"));
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    std::remove(temp.c_str());
    return absl::InternalError(absl::StrCat(path, ": cannot rename ", temp, " onto it"));
  }
  return absl::OkStatus();
}

template <typename T>
void Put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

absl::Status StripPlan(const std::string& input, const std::string& output, uint64_t min_bytes) {
  absl::StatusOr<std::unique_ptr<plan::Plan>> opened = plan::Plan::Open(input);
  if (!opened.ok()) return opened.status();
  const plan::PlanMeta& meta = (*opened)->meta();
  const Companions companions = Classify(meta);
  std::string out(kMagic, sizeof(kMagic));
  const std::string meta_bytes = meta.SerializeAsString();
  Put<uint64_t>(out, meta_bytes.size());
  out += meta_bytes;
  std::string kept;
  uint32_t count = 0;
  std::set<uint64_t> offsets;  // a blob shared by tensors (tied weights) is kept once
  for (int index = 0; index < meta.tensors_size(); ++index) {
    const plan::Tensor& tensor = meta.tensors(index);
    if (FillOf(meta, index, companions, min_bytes) != Fill::kKeep) continue;
    if (!offsets.insert(tensor.offset()).second) continue;
    Put<uint32_t>(kept, static_cast<uint32_t>(index));
    Put<uint64_t>(kept, tensor.size_bytes());
    const uint8_t* blob = (*opened)->blob(index);
    if (tensor.size_bytes() > 0)
      kept.append(reinterpret_cast<const char*>(blob), tensor.size_bytes());
    ++count;
  }
  Put<uint32_t>(out, count);
  out += kept;
  return WriteFile(output, out);
}

// Streams `bytes` of fill `kind` into the writer's current blob.
absl::Status Generate(plan::PlanWriter& writer, Fill kind, plan::DType dtype, uint64_t bytes,
                      uint64_t seed) {
  // 16 random bits index a table of the dtype's values: one generator call yields four
  // 2-byte values, so a 2.2 GB matrix fills in seconds.
  std::vector<uint16_t> half_table;
  if (dtype == plan::F16 || dtype == plan::BF16) {
    half_table.resize(65536);
    for (uint32_t r = 0; r < 65536; ++r) {
      float value;
      if (kind == Fill::kScales8 || kind == Fill::kScales4) {
        // Standard deviation of a uniform code: 255 / sqrt(12) (I8), 16 / sqrt(12) (I4).
        const float code_deviation = kind == Fill::kScales8 ? 73.6f : 4.62f;
        value = 0.02f / code_deviation * (0.5f + r / 65536.0f);
      } else {
        value = kWeightRange * (2.0f * r / 65535.0f - 1.0f);
      }
      half_table[r] = dtype == plan::F16 ? plan::F32ToF16(value) : plan::F32ToBf16(value);
    }
  }
  uint64_t state = seed;
  std::vector<uint8_t> chunk(kChunkBytes);
  for (uint64_t done = 0; done < bytes;) {
    const size_t size = static_cast<size_t>(std::min<uint64_t>(kChunkBytes, bytes - done));
    for (size_t i = 0; i < size; i += 8) {
      uint64_t random = SplitMix(state);
      uint8_t word[8];
      if (!half_table.empty()) {
        for (int j = 0; j < 4; ++j) {
          const uint16_t value = half_table[(random >> (16 * j)) & 0xffff];
          std::memcpy(word + 2 * j, &value, 2);
        }
      } else if (kind == Fill::kFloat) {  // F32
        for (int j = 0; j < 2; ++j) {
          const float value =
              kWeightRange * (2.0f * static_cast<uint32_t>(random >> (32 * j)) / 4294967295.0f - 1);
          std::memcpy(word + 4 * j, &value, 4);
        }
      } else {
        std::memcpy(word, &random, 8);
        for (uint8_t& byte : word) {
          if (kind == Fill::kZeroPoints) {
            byte &= 15;
          } else if (kind == Fill::kCodes8 && byte == 0x80) {
            byte = 0x81;  // -128 -> -127
          } else if (kind == Fill::kE8M0Scales) {
            byte = kE8M0Low + (byte & 1);
          }
        }
      }
      std::memcpy(chunk.data() + i, word, std::min<size_t>(8, size - i));
    }
    if (absl::Status status = writer.Append(chunk.data(), size); !status.ok()) return status;
    done += size;
  }
  return absl::OkStatus();
}

template <typename T>
bool Get(std::ifstream& in, T& value) {
  return static_cast<bool>(in.read(reinterpret_cast<char*>(&value), sizeof(value)));
}

absl::Status FillPlan(const std::string& input, const std::string& output, uint64_t seed) {
  std::ifstream in(input, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(input, ": cannot open"));
  auto corrupt = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat(input, ": not a GPU kit plan skeleton (", what, ")"));
  };
  char magic[sizeof(kMagic)];
  if (!in.read(magic, sizeof(magic)) || std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
    return corrupt("bad magic");
  }
  uint64_t meta_size = 0;
  if (!Get(in, meta_size) || meta_size > (uint64_t{1} << 31)) return corrupt("meta size");
  std::string meta_bytes(meta_size, '\0');
  plan::PlanMeta meta;
  if (!in.read(meta_bytes.data(), static_cast<std::streamsize>(meta_size)) ||
      !meta.ParseFromString(meta_bytes)) {
    return corrupt("meta does not parse");
  }
  uint32_t count = 0;
  if (!Get(in, count)) return corrupt("kept-blob count");
  std::map<int, std::string> kept;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t index = 0;
    uint64_t size = 0;
    if (!Get(in, index) || !Get(in, size) || index >= static_cast<uint32_t>(meta.tensors_size()) ||
        size != meta.tensors(index).size_bytes()) {
      return corrupt(absl::StrCat("kept blob ", i));
    }
    std::string bytes(size, '\0');
    if (!in.read(bytes.data(), static_cast<std::streamsize>(size))) {
      return corrupt(absl::StrCat("kept blob ", i, " is truncated"));
    }
    kept[index] = std::move(bytes);
  }
  const Companions companions = Classify(meta);
  // Kept blobs are recognized by the original offsets, shared blobs written once.
  std::map<uint64_t, int> kept_by_offset;
  for (const auto& [index, bytes] : kept) kept_by_offset[meta.tensors(index).offset()] = index;
  std::map<uint64_t, plan::BlobRange> written;  // original offset -> new range

  absl::StatusOr<std::unique_ptr<plan::PlanWriter>> writer = plan::PlanWriter::Create(output);
  if (!writer.ok()) return writer.status();
  for (int index = 0; index < meta.tensors_size(); ++index) {
    plan::Tensor* tensor = meta.mutable_tensors(index);
    const uint64_t original = tensor->offset();
    auto done = written.find(original);
    if (done == written.end()) {
      absl::StatusOr<plan::BlobRange> range;
      if (auto found = kept_by_offset.find(original); found != kept_by_offset.end()) {
        const std::string& bytes = kept[found->second];
        range = (*writer)->AddBlob(bytes.data(), bytes.size());
      } else {
        const Fill kind = FillOf(meta, index, companions, 0);
        if (kind == Fill::kKeep) {
          return corrupt(absl::StrCat("tensor ", tensor->name(), " is neither kept nor fillable"));
        }
        if (absl::Status status = (*writer)->BeginBlob(); !status.ok()) return status;
        if (absl::Status status = Generate(**writer, kind, tensor->dtype(), tensor->size_bytes(),
                                           seed * 1000003 + static_cast<uint64_t>(index));
            !status.ok()) {
          return status;
        }
        range = (*writer)->EndBlob();
      }
      if (!range.ok()) return range.status();
      done = written.emplace(original, *range).first;
    }
    tensor->set_offset(done->second.offset);
    tensor->set_checksum(done->second.checksum);
  }
  return (*writer)->Finish(meta);
}

}  // namespace

// argv[0] is "plan".
int PlanMain(int argc, char** argv) {
  if (argc < 4) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string command = argv[1];
  uint64_t min_bytes = kDefaultMinBytes;
  uint64_t seed = 1;
  for (int i = 4; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "llmrt-kit plan: %s needs a value\n%s", flag.c_str(), kUsage);
      return 2;
    }
    uint64_t* target = flag == "--min-bytes" ? &min_bytes : flag == "--seed" ? &seed : nullptr;
    if (target == nullptr || !absl::SimpleAtoi(argv[++i], target)) {
      std::fprintf(stderr, "llmrt-kit plan: bad flag %s\n%s", flag.c_str(), kUsage);
      return 2;
    }
  }
  absl::Status status;
  if (command == "strip") {
    status = StripPlan(argv[2], argv[3], min_bytes);
  } else if (command == "fill") {
    status = FillPlan(argv[2], argv[3], seed);
  } else {
    std::fprintf(stderr, "llmrt-kit plan: unknown command %s\n%s", command.c_str(), kUsage);
    return 2;
  }
  if (!status.ok()) {
    std::fprintf(stderr, "llmrt-kit plan: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace llmrt::kit
