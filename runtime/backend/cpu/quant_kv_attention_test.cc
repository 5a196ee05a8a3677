// Attention over F16 / BF16 / I8 KV caches: exact (to f32 rounding) against a double reference
// over the values the cache holds, and within the format's rounding of the f32 cache's result;
// then a whole TinyLlama with each cache dtype against its f32-cache logits.
#include "runtime/backend/cpu/quant_kv_attention.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/testing/tiny_llama.h"
#include "runtime/kv/kv_storage.h"

namespace llmrt::cpu {
namespace {

constexpr int32_t kHeads = 16, kKvHeads = 2, kHeadDim = 64, kBlock = 16, kBlocks = 24;

struct Result {
  std::vector<float> out;
  std::vector<double> reference;  // double over the cache's decoded values
  std::vector<double> bound;      // the format's error bound vs the f32 cache, per output
};

// Keys and values of every slot; some heads 100x larger than others, so per-head I8 scales
// matter.
std::vector<float> CacheRow(int64_t slot, bool is_value) {
  std::vector<float> row(kKvHeads * kHeadDim);
  for (int64_t i = 0; i < static_cast<int64_t>(row.size()); ++i) {
    const float magnitude = (i / kHeadDim) == 0 ? 1.5f : 0.015f;
    row[i] = (is_value ? std::cos(0.07f * (slot * 128 + i) + 0.3f)
                       : std::sin(0.11f * (slot * 128 + i))) *
             magnitude;
  }
  return row;
}

// Half the format's step, relative: of each value (f16, bf16), of the head's largest (i8).
double RelativeStep(plan::DType dtype) {
  switch (dtype) {
    case plan::F16:
      return 1.0 / 2048;
    case plan::BF16:
      return 1.0 / 256;
    case plan::I8:
      return 1.0 / 254;
    default:
      return 0;
  }
}

// Query tokens of one sequence at indices 5, 200 and 380 (each attention item one token).
const std::vector<int64_t> kSpreadTokens = {5, 200, 380};

// Attention of the query tokens at `index` (query row r is row first_query + r of one fixed
// sequence of rows, so that a token computed alone can be compared with itself in a batch).
Result RunAttention(plan::DType dtype, int64_t window, int32_t threads,
                    const std::vector<int64_t>& index = kSpreadTokens, int64_t first_query = 0) {
  auto storage = kv::KvStorage::Create({1, kKvHeads, kHeadDim, kBlocks, kBlock, dtype});
  EXPECT_TRUE(storage.ok()) << storage.status();
  kv::KvStorage& kv = **storage;
  for (int64_t slot = 0; slot < kv.num_slots(); ++slot) {
    kv.WriteToken(0, slot, CacheRow(slot, false).data(), CacheRow(slot, true).data());
  }
  std::vector<int32_t> block_table(kBlocks);
  for (int32_t i = 0; i < kBlocks; ++i) block_table[i] = (i * 5 + 3) % kBlocks;
  const int64_t tokens = static_cast<int64_t>(index.size());
  std::vector<float> q(tokens * kHeads * kHeadDim);
  for (size_t i = 0; i < q.size(); ++i) {
    q[i] = std::sin(0.05f * static_cast<float>(i + first_query * kHeads * kHeadDim) + 1.0f);
  }
  Result result;
  result.out.resize(q.size());
  std::vector<const int32_t*> tables(tokens, block_table.data());
  const int64_t scratch_stride = KvCacheAttentionScratchFloats(kHeads, kKvHeads, kHeadDim, kBlock);
  std::vector<float> scratch(scratch_stride * threads);
  ThreadPool pool(threads);
  AttentionArgs args;
  args.q = q.data();
  args.out = result.out.data();
  args.token_stride = kv.token_stride();
  args.num_heads = kHeads;
  args.num_kv_heads = kKvHeads;
  args.head_dim = kHeadDim;
  args.block_size = kBlock;
  args.sliding_window = window;
  args.scale = 0.125f;
  args.num_tokens = tokens;
  args.token_block_table = tables.data();
  args.token_index = index.data();
  args.scratch = scratch.data();
  args.scratch_stride = scratch_stride;
  args.kv_dtype = dtype;
  if (dtype == plan::F32) {
    args.key_cache = kv.key(0, 0);
    args.value_cache = kv.value(0, 0);
    Attention(pool, args);
  } else {
    args.key_bytes = kv.key_bytes(0, 0);
    args.value_bytes = kv.value_bytes(0, 0);
    args.key_scales = kv.key_scales(0, 0);
    args.value_scales = kv.value_scales(0, 0);
    KvCacheAttention(pool, args);
  }
  const double step = RelativeStep(dtype);
  std::vector<float> key(kv.token_stride()), value(kv.token_stride());
  for (int64_t t = 0; t < tokens; ++t) {
    for (int32_t head = 0; head < kHeads; ++head) {
      const int32_t kv_head = head / (kHeads / kKvHeads);
      const float* query = q.data() + (t * kHeads + head) * kHeadDim;
      const int64_t first = window > 0 ? std::max<int64_t>(0, index[t] - window + 1) : 0;
      std::vector<double> scores;
      double max_score = -1e300, score_error = 0, value_error = 0, value_max = 0;
      for (int64_t position = first; position <= index[t]; ++position) {
        const int64_t slot = block_table[position / kBlock] * kBlock + position % kBlock;
        kv.ReadKey(0, slot, key.data());
        const std::vector<float> exact_key = CacheRow(slot, false);
        const std::vector<float> exact_value = CacheRow(slot, true);
        double dot = 0, query_norm = 0, key_max = 0;
        for (int i = 0; i < kHeadDim; ++i) {
          dot += double{query[i]} * key[kv_head * kHeadDim + i];
          query_norm += std::fabs(query[i]);
          key_max = std::max(key_max, std::fabs(double{exact_key[kv_head * kHeadDim + i]}));
        }
        for (int i = 0; i < kHeadDim; ++i) {
          value_max = std::max(value_max, std::fabs(double{exact_value[kv_head * kHeadDim + i]}));
        }
        // |score error| <= scale * sum |q| * (largest key error); likewise for values.
        score_error = std::max(score_error, 0.125 * query_norm * step * key_max);
        value_error = std::max(value_error, step * value_max);
        scores.push_back(dot * 0.125);
        max_score = std::max(max_score, scores.back());
      }
      double total = 0;
      for (double& score : scores) total += (score = std::exp(score - max_score));
      // Each value row decoded once (not once per output element: 64x fewer ReadValue calls,
      // which made this test 37 s under ASan); the same sums in the same order.
      std::vector<double> expected(kHeadDim, 0.0);
      for (int64_t position = first; position <= index[t]; ++position) {
        const int64_t slot = block_table[position / kBlock] * kBlock + position % kBlock;
        kv.ReadValue(0, slot, value.data());
        for (int i = 0; i < kHeadDim; ++i) {
          expected[i] += scores[position - first] * value[kv_head * kHeadDim + i];
        }
      }
      for (int i = 0; i < kHeadDim; ++i) {
        result.reference.push_back(expected[i] / total);
        // Softmax weights move by a factor within exp(+-2 * score error); the output, a convex
        // combination of values, by that much of the largest value plus the value error.
        result.bound.push_back(value_error + value_max * (std::exp(2 * score_error) - 1));
      }
    }
  }
  return result;
}

TEST(KvCacheAttentionTest, EveryDtypeMatchesItsCacheAndTheF32Cache) {
  for (int64_t window : {int64_t{0}, int64_t{37}}) {
    const Result f32 = RunAttention(plan::F32, window, 1);
    for (plan::DType dtype : {plan::F16, plan::BF16, plan::I8}) {
      for (int32_t threads : {1, 2}) {
        const Result result = RunAttention(dtype, window, threads);
        for (size_t i = 0; i < result.out.size(); ++i) {
          // f32 accumulation against double, as the f32 attention test allows.
          ASSERT_NEAR(result.out[i], result.reference[i], 2e-5)
              << plan::DType_Name(dtype) << " window " << window << " output " << i;
          ASSERT_NEAR(result.out[i], f32.out[i], result.bound[i] + 2e-5)
              << plan::DType_Name(dtype) << " window " << window << " output " << i;
        }
      }
    }
  }
}

// A prefill's consecutive tokens go through Attention in tiles (kAttentionTile tokens sharing
// each widened block and broadcast): every dtype still matches its reference, and each token's
// output is bit-identical to the token attending alone. The tokens: the first 11 of the sequence
// (tiles whose earlier tokens see only part of a block), then 14 from 150 on (crossing blocks);
// the tile straddling the two runs is not one sequence of indices, so it goes token by token.
TEST(KvCacheAttentionTest, ConsecutiveTokensMatchEachTokenAlone) {
  std::vector<int64_t> index;
  for (int64_t i = 0; i < 11; ++i) index.push_back(i);
  for (int64_t i = 150; i < 164; ++i) index.push_back(i);
  for (plan::DType dtype : {plan::F32, plan::F16, plan::BF16, plan::I8}) {
    for (int32_t threads : {1, 2}) {
      const Result result = RunAttention(dtype, 0, threads, index);
      for (size_t i = 0; i < result.out.size(); ++i) {
        ASSERT_NEAR(result.out[i], result.reference[i], 2e-5)
            << plan::DType_Name(dtype) << " threads " << threads << " output " << i;
      }
      if (threads == 2) continue;
      const int64_t row = kHeads * kHeadDim;
      for (size_t t = 0; t < index.size(); ++t) {
        const Result alone = RunAttention(dtype, 0, 1, {index[t]}, static_cast<int64_t>(t));
        for (int64_t i = 0; i < row; ++i) {
          ASSERT_EQ(result.out[t * row + i], alone.out[i])
              << plan::DType_Name(dtype) << " token " << index[t] << " output " << i;
        }
      }
    }
  }
}

// A whole model with each cache dtype: logits close to the f32 cache's, KV bytes as the
// dtype says, and copy-on-write block copies carry the dtype's rows (and scales).
TEST(KvCacheAttentionTest, ModelLogitsFollowTheCacheDtype) {
  llmrt::testing::TinyLlamaOptions options;
  options.hidden_size = 64;
  options.num_heads = 4;
  options.num_kv_heads = 2;
  options.head_dim = 16;
  const llmrt::testing::TinyLlama model = llmrt::testing::BuildTinyLlama(options);
  std::vector<int32_t> tokens;
  for (int32_t i = 0; i < 20; ++i) tokens.push_back((i * 7 + 3) % options.vocab_size);
  // Runs the tokens as one prefill in blocks 0..4, copies block 0 to block 5, then decodes the
  // last token again over the table with block 0 replaced by its copy.
  auto run = [&](plan::DType dtype, int64_t* kv_bytes) {
    BackendOptions backend_options{32, 1};
    backend_options.kv_cache_dtype = dtype;
    auto backend = CreateCpuBackend(model.meta, model.Lookup(), backend_options);
    EXPECT_TRUE(backend.ok()) << backend.status();
    EXPECT_TRUE((*backend)->AllocateKvCache(6, 4).ok());
    *kv_bytes = (*backend)->kv_cache_bytes();
    std::vector<int32_t> table = {0, 1, 2, 3, 4};
    StepBatch batch;
    batch.sequences.push_back({0, 20, 20, table.data(), 5});
    for (int32_t i = 0; i < 20; ++i) {
      batch.token_ids.push_back(tokens[i]);
      batch.positions.push_back(i);
      batch.slot_mapping.push_back(i);
      batch.logit_rows.push_back(i);
    }
    std::vector<float> logits(20 * (*backend)->vocab_size());
    EXPECT_TRUE((*backend)->RunStep(batch, logits.data()).ok());
    EXPECT_TRUE((*backend)->CopyKvBlock(0, 5).ok());
    std::vector<int32_t> copied = {5, 1, 2, 3, 4};
    StepBatch again;
    again.sequences.push_back({0, 1, 20, copied.data(), 5});
    again.token_ids.push_back(tokens[19]);
    again.positions.push_back(19);
    again.slot_mapping.push_back(19);
    again.logit_rows.push_back(0);
    std::vector<float> last((*backend)->vocab_size());
    EXPECT_TRUE((*backend)->RunStep(again, last.data()).ok());
    // Rewriting slot 19 with the same k/v and reading block 5 for block 0 changes nothing.
    for (int64_t v = 0; v < (*backend)->vocab_size(); ++v) {
      EXPECT_EQ(last[v], logits[19 * (*backend)->vocab_size() + v]) << plan::DType_Name(dtype);
    }
    return logits;
  };
  int64_t f32_bytes = 0;
  const std::vector<float> f32 = run(plan::F32, &f32_bytes);
  double largest = 0;
  for (float value : f32) largest = std::max(largest, std::fabs(double{value}));
  // Measured worst |logit - f32-cache logit| / max |logit| (every target): f16 2.9e-4, bf16
  // 2.3e-3, i8 8.2e-3, i.e. ~0.6x, 0.6x and 2x the format's half step (2^-11, 2^-8, 1/254)
  // carried through two layers; the bounds are ~1.7x the measurement, while reading a wrong
  // row, scale or block moves logits by whole units.
  struct Case {
    plan::DType dtype;
    double tolerance;
    int64_t bytes_per_head;  // head_dim 16: 64 f32 bytes
  };
  for (const Case& c :
       {Case{plan::F16, 5e-4, 32}, Case{plan::BF16, 4e-3, 32}, Case{plan::I8, 1.5e-2, 16 + 4}}) {
    int64_t bytes = 0;
    const std::vector<float> logits = run(c.dtype, &bytes);
    EXPECT_EQ(bytes * 64, f32_bytes * c.bytes_per_head) << plan::DType_Name(c.dtype);
    double worst = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      worst = std::max(worst, std::fabs(double{logits[i]} - f32[i]));
    }
    std::printf("kv %s: worst |logit - f32 cache| = %.2e of max |logit| %.2f\n",
                plan::DType_Name(c.dtype).c_str(), worst / largest, largest);
    EXPECT_LE(worst, c.tolerance * largest) << plan::DType_Name(c.dtype);
  }
  BackendOptions bad{32, 1};
  bad.kv_cache_dtype = plan::I4;
  auto backend = CreateCpuBackend(model.meta, model.Lookup(), bad);
  ASSERT_FALSE(backend.ok());
  EXPECT_NE(backend.status().message().find("KV cache dtype I4"), std::string::npos)
      << backend.status();
}

}  // namespace
}  // namespace llmrt::cpu
