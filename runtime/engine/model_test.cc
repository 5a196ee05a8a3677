#include "runtime/engine/model.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/backend/testing/tiny_llama.h"
#include "runtime/plan/plan_writer.h"

namespace llmrt::engine {
namespace {

using ::llmrt::testing::BuildTinyLlama;
using ::llmrt::testing::TinyLlama;
using ::llmrt::testing::TinyLlamaOptions;

constexpr int32_t kVocab = 40;  // TinyLlamaOptions' default

std::vector<int32_t> Tokens(int32_t count, int32_t salt) {
  std::vector<int32_t> tokens(count);
  for (int32_t i = 0; i < count; ++i) tokens[i] = (i * 11 + salt * 5 + 1) % kVocab;
  return tokens;
}

void ExpectNear(const std::vector<float>& actual, const std::vector<float>& expected,
                double tolerance) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], tolerance) << "index " << i;
  }
}

std::unique_ptr<Model> MakeModel(const TinyLlama& tiny, int32_t max_tokens_per_step = 8,
                                 int64_t kv_cache_tokens = 0) {
  ModelOptions options;
  options.max_tokens_per_step = max_tokens_per_step;
  options.kv_block_size = 4;
  options.kv_cache_tokens = kv_cache_tokens;
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Create(tiny.meta, tiny.Lookup(), options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

TEST(SessionTest, ChunkedPrefillThenDecodeMatchReference) {
  TinyLlama tiny = BuildTinyLlama({});
  std::unique_ptr<Model> model = MakeModel(tiny);  // 8 tokens per step: a 19-token prompt takes 3
  std::unique_ptr<Session> session = model->NewSession();
  const std::vector<int32_t> tokens = Tokens(23, 1);
  const std::vector<float> reference = tiny.ReferenceLogits(tokens);
  const std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + 19);
  absl::StatusOr<std::vector<float>> prefill = session->Append(prompt, /*all_logits=*/true);
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  ExpectNear(*prefill, std::vector<float>(reference.begin(), reference.begin() + 19 * kVocab),
             2e-4);
  for (int32_t index = 19; index < 23; ++index) {
    absl::StatusOr<std::vector<float>> step = session->Append({tokens[index]}, false);
    ASSERT_TRUE(step.ok()) << step.status();
    ExpectNear(*step,
               std::vector<float>(reference.begin() + index * kVocab,
                                  reference.begin() + (index + 1) * kVocab),
               2e-4);
  }
  EXPECT_EQ(session->num_tokens(), 23);
}

TEST(SessionTest, LastLogitsOnlyOfALongAppend) {
  TinyLlama tiny = BuildTinyLlama({});
  std::unique_ptr<Model> model = MakeModel(tiny);
  std::unique_ptr<Session> session = model->NewSession();
  const std::vector<int32_t> tokens = Tokens(13, 2);
  absl::StatusOr<std::vector<float>> last = session->Append(tokens, false);
  ASSERT_TRUE(last.ok()) << last.status();
  const std::vector<float> reference = tiny.ReferenceLogits(tokens);
  ExpectNear(*last, std::vector<float>(reference.end() - kVocab, reference.end()), 2e-4);
}

TEST(ModelTest, BatchedSessionsGiveTheSameLogitsAsAlone) {
  TinyLlamaOptions options;
  options.sliding_window = 6;
  TinyLlama tiny = BuildTinyLlama(options);
  const std::vector<std::vector<int32_t>> prompts = {Tokens(11, 3), Tokens(3, 4), Tokens(17, 5)};
  // Alone: each session by itself, prompt then 3 decode tokens.
  std::vector<std::vector<float>> alone;
  {
    std::unique_ptr<Model> model = MakeModel(tiny);
    for (const auto& prompt : prompts) {
      std::unique_ptr<Session> session = model->NewSession();
      std::vector<float> logits = *session->Append(prompt, true);
      for (int32_t step = 0; step < 3; ++step) {
        std::vector<float> next = *session->Append({(step * 3 + 7) % kVocab}, false);
        logits.insert(logits.end(), next.begin(), next.end());
      }
      alone.push_back(logits);
    }
  }
  // Together: all prompts in shared steps (8 tokens per step: 31 prompt tokens over 4 steps,
  // mixing sequences), then decode steps of all three at once.
  std::unique_ptr<Model> model = MakeModel(tiny);
  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<AppendRequest> requests(3);
  for (size_t i = 0; i < 3; ++i) {
    sessions.push_back(model->NewSession());
    requests[i].session = sessions[i].get();
    requests[i].tokens = prompts[i];
    requests[i].all_logits = true;
  }
  ASSERT_TRUE(model->AppendBatch(absl::MakeSpan(requests)).ok());
  std::vector<std::vector<float>> together;
  for (const AppendRequest& request : requests) together.push_back(request.logits);
  for (int32_t step = 0; step < 3; ++step) {
    for (size_t i = 0; i < 3; ++i) {
      requests[i].tokens = {(step * 3 + 7) % kVocab};
      requests[i].all_logits = false;
    }
    ASSERT_TRUE(model->AppendBatch(absl::MakeSpan(requests)).ok());
    for (size_t i = 0; i < 3; ++i) {
      together[i].insert(together[i].end(), requests[i].logits.begin(), requests[i].logits.end());
    }
  }
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    // Bit for bit (kernels.h: a token's result never depends on the tokens beside it), at every
    // dispatch target.
    ExpectNear(together[i], alone[i], 0.0);
    // And both agree with the reference on the prompt.
    const std::vector<float> reference = tiny.ReferenceLogits(prompts[i]);
    ExpectNear(std::vector<float>(together[i].begin(), together[i].begin() + reference.size()),
               reference, 2e-4);
  }
}

TEST(ModelTest, ErrorsLeaveSessionsUnchanged) {
  TinyLlama tiny = BuildTinyLlama({});
  // 12 tokens of cache: three blocks of 4.
  std::unique_ptr<Model> model = MakeModel(tiny, 8, 12);
  EXPECT_EQ(model->max_context(), 12);
  std::unique_ptr<Session> first = model->NewSession();
  std::unique_ptr<Session> second = model->NewSession();
  ASSERT_TRUE(first->Append(Tokens(5, 1), false).ok());
  EXPECT_EQ(model->block_pool().num_free_blocks(), 1);

  absl::StatusOr<std::vector<float>> bad_token = first->Append({kVocab}, false);
  EXPECT_EQ(bad_token.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(first->Append({}, false).ok());
  absl::StatusOr<std::vector<float>> too_long = first->Append(Tokens(8, 2), false);
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kOutOfRange);
  absl::StatusOr<std::vector<float>> no_blocks = second->Append(Tokens(5, 3), false);
  EXPECT_EQ(no_blocks.status().code(), absl::StatusCode::kResourceExhausted) << no_blocks.status();
  EXPECT_EQ(first->num_tokens(), 5);
  EXPECT_EQ(second->num_tokens(), 0);
  EXPECT_EQ(model->block_pool().num_free_blocks(), 1);

  std::vector<AppendRequest> twice(2);
  twice[0].session = twice[1].session = first.get();
  twice[0].tokens = twice[1].tokens = {1};
  EXPECT_FALSE(model->AppendBatch(absl::MakeSpan(twice)).ok());

  first.reset();  // its blocks go back to the pool
  EXPECT_EQ(model->block_pool().num_free_blocks(), 3);
  ASSERT_TRUE(second->Append(Tokens(12, 4), false).ok());
  second->Reset();
  EXPECT_EQ(second->num_tokens(), 0);
  EXPECT_EQ(model->block_pool().num_free_blocks(), 3);
}

}  // namespace
}  // namespace llmrt::engine

namespace llmrt::engine {
namespace {

TEST(ModelTest, LoadsAPlanFileAndMatchesReference) {
  TinyLlamaOptions options;
  options.weight_dtype = plan::BF16;
  TinyLlama tiny = BuildTinyLlama(options);
  const std::string path = ::testing::TempDir() + "/tiny_llama_plan.bin";
  {
    absl::StatusOr<std::unique_ptr<plan::PlanWriter>> writer = plan::PlanWriter::Create(path);
    ASSERT_TRUE(writer.ok()) << writer.status();
    plan::PlanMeta meta = tiny.meta;
    for (int index = 0; index < meta.tensors_size(); ++index) {
      absl::StatusOr<plan::BlobRange> range =
          (*writer)->AddBlob(tiny.blobs[index].data(), tiny.blobs[index].size());
      ASSERT_TRUE(range.ok()) << range.status();
      meta.mutable_tensors(index)->set_offset(range->offset);
      meta.mutable_tensors(index)->set_size_bytes(range->size_bytes);
      meta.mutable_tensors(index)->set_checksum(range->checksum);
    }
    ASSERT_TRUE((*writer)->Finish(meta).ok());
  }
  ModelOptions model_options;
  model_options.verify = true;
  model_options.max_tokens_per_step = 4;
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(path, model_options);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_NE((*model)->plan(), nullptr);
  std::unique_ptr<Session> session = (*model)->NewSession();
  const std::vector<int32_t> tokens = Tokens(10, 6);
  absl::StatusOr<std::vector<float>> logits = session->Append(tokens, true);
  ASSERT_TRUE(logits.ok()) << logits.status();
  ExpectNear(*logits, tiny.ReferenceLogits(tokens), 2e-4);

  absl::StatusOr<std::unique_ptr<Model>> missing = Model::Load(path + ".missing", model_options);
  EXPECT_FALSE(missing.ok());
}

}  // namespace
}  // namespace llmrt::engine
