// AWQ lowers the error it optimises, and the gain carries over to text it was not fitted on:
// on stories260K, the per-linear output error ||X W^T - X~ Q(W~)^T||^2 of the scales searched
// on the built-in calibration text is lower than round-to-nearest's on the activations of the
// held-out story (tests/quant/data), summed over every matmul the scales can be folded for.
#include "compiler/quant/awq.h"

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "compiler/importer/checkpoint.h"
#include "compiler/quant/calibration.h"
#include "compiler/quant/gptq.h"
#include "gtest/gtest.h"
#include "tests/e2e/test_util.h"
#include "tests/quant/accuracy.h"

namespace llmc::quant_testing {
namespace {

using ::llmc::testing::MakeScratchDir;
using ::llmc::testing::ReadFile;
using ::llmc::testing::SourcePath;

TEST(AwqTest, LowersHeldOutLinearOutputError) {
  const std::string dir = SourcePath("tests/data/stories260K");
  const std::string plan = MakeScratchDir("awq") + "/f32.plan";
  ASSERT_TRUE(CompilePlan(dir, plan, std::nullopt).ok());
  absl::StatusOr<std::map<std::string, quant::Activations>> calibration =
      quant::CollectActivations(plan, quant::DefaultCalibrationText());
  ASSERT_TRUE(calibration.ok()) << calibration.status();
  absl::StatusOr<std::map<std::string, quant::Activations>> heldout =
      quant::CollectActivations(plan, ReadFile(SourcePath("tests/quant/data/heldout_story.txt")));
  ASSERT_TRUE(heldout.ok()) << heldout.status();
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok());

  const quant::QuantFormat format{4, 32, false};
  double rtn_total = 0, awq_total = 0;
  int searched = 0;
  for (int layer = 0; layer < 5; ++layer) {
    const std::string prefix = "model.layers." + std::to_string(layer) + ".";
    // The fused matmuls whose input is a norm output (the folds with no tie constraint).
    for (const auto& [fused, parts] : std::vector<std::pair<std::string, std::vector<std::string>>>{
             {"self_attn.qkv_proj.weight",
              {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"}},
             {"mlp.gate_up_proj.weight", {"mlp.gate_proj.weight", "mlp.up_proj.weight"}}}) {
      std::vector<float> w;
      int64_t cols = 0;
      for (const std::string& part : parts) {
        const TensorInfo* info = (*checkpoint)->Find(prefix + part);
        ASSERT_NE(info, nullptr);
        cols = info->shape[1];
        const size_t first = w.size();
        w.resize(first + info->size_bytes / 4);
        std::memcpy(w.data() + first, info->data, info->size_bytes);
      }
      const int64_t rows = static_cast<int64_t>(w.size()) / cols;
      ASSERT_TRUE(calibration->count(prefix + fused)) << fused;
      absl::StatusOr<quant::AwqScales> scales =
          quant::SearchScales(w, rows, cols, calibration->at(prefix + fused), format, {});
      ASSERT_TRUE(scales.ok()) << scales.status();
      EXPECT_LE(scales->loss, scales->rtn_loss) << prefix + fused;  // s = 1 is a candidate
      // Held out: RTN vs AWQ (W diag(s) quantized, divided back by s).
      absl::StatusOr<quant::QuantizedMatrix> rtn = quant::QuantizeMatrix(w, rows, cols, format);
      std::vector<float> scaled(w.size());
      for (int64_t i = 0; i < rows * cols; ++i) scaled[i] = w[i] * scales->scales[i % cols];
      absl::StatusOr<quant::QuantizedMatrix> awq =
          quant::QuantizeMatrix(scaled, rows, cols, format);
      ASSERT_TRUE(rtn.ok() && awq.ok());
      std::vector<float> awq_restored = quant::DequantizeMatrix(*awq);
      for (int64_t i = 0; i < rows * cols; ++i) awq_restored[i] /= scales->scales[i % cols];
      const quant::Activations& x = heldout->at(prefix + fused);
      rtn_total += quant::LinearOutputError(w, quant::DequantizeMatrix(*rtn), rows, cols, x);
      awq_total += quant::LinearOutputError(w, awq_restored, rows, cols, x);
      ++searched;
    }
  }
  std::printf("held-out linear output error over %d matmuls: RTN %.2f, AWQ %.2f (%.1f%% lower)\n",
              searched, rtn_total, awq_total, 100 * (1 - awq_total / rtn_total));
  EXPECT_LT(awq_total, rtn_total * 0.97);  // measured 11.3% lower
}

}  // namespace
}  // namespace llmc::quant_testing
