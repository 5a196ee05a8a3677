#include "runtime/kv/kv_storage.h"

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "gtest/gtest.h"

namespace llmrt::kv {
namespace {

// Resident memory of this process in bytes (/proc/self/statm), 0 when it cannot be read.
int64_t ResidentBytes() {
  FILE* statm = std::fopen("/proc/self/statm", "r");
  if (statm == nullptr) return 0;
  long total_pages = 0, resident_pages = 0;
  const int fields = std::fscanf(statm, "%ld %ld", &total_pages, &resident_pages);
  std::fclose(statm);
  return fields == 2 ? static_cast<int64_t>(resident_pages) * sysconf(_SC_PAGESIZE) : 0;
}

// Create must not write the cache (kv_storage.h: every slot is written before it is read):
// a 1 GiB cache costs no resident memory until steps use it, so a server sized for many long
// sequences starts at once and a plan's first token does not wait for the cache to be zeroed.
TEST(KvStorageTest, CreateLeavesTheCacheUntouched) {
  KvStorageShape shape{
      .num_layers = 16, .num_kv_heads = 8, .head_dim = 128, .num_blocks = 512, .block_size = 16};
  const int64_t before = ResidentBytes();
  absl::StatusOr<std::unique_ptr<KvStorage>> storage = KvStorage::Create(shape);
  ASSERT_TRUE(storage.ok()) << storage.status();
  ASSERT_EQ((*storage)->size_bytes(), size_t{1} << 30);
  ASSERT_GT(before, 0) << "cannot read /proc/self/statm";
  EXPECT_LT(ResidentBytes() - before, int64_t{16} << 20);
  // Writing one token touches only its own rows.
  std::vector<float> k(1024, 1.5f), v(1024, -2.0f), out(1024);
  (*storage)->WriteToken(15, 8191, k.data(), v.data());
  (*storage)->ReadValue(15, 8191, out.data());
  EXPECT_EQ(out[1023], -2.0f);
  EXPECT_LT(ResidentBytes() - before, int64_t{16} << 20);
}

TEST(KvStorageTest, RowsOfLayersSlotsAndKvDoNotOverlap) {
  KvStorageShape shape{
      .num_layers = 2, .num_kv_heads = 3, .head_dim = 4, .num_blocks = 5, .block_size = 2};
  absl::StatusOr<std::unique_ptr<KvStorage>> storage = KvStorage::Create(shape);
  ASSERT_TRUE(storage.ok()) << storage.status();
  KvStorage& kv = **storage;
  EXPECT_EQ(kv.token_stride(), 12);
  EXPECT_EQ(kv.num_slots(), 10);
  EXPECT_EQ(kv.size_bytes(), 2u * 2 * 10 * 12 * sizeof(float));
  // Tag every float with a distinct value through the accessors, then read all tags back: an
  // overlap between two rows would overwrite a tag.
  auto tag = [](int layer, int slot, int is_value, int element) {
    return static_cast<float>(((layer * 10 + slot) * 2 + is_value) * 12 + element);
  };
  for (int layer = 0; layer < 2; ++layer) {
    for (int slot = 0; slot < 10; ++slot) {
      for (int element = 0; element < 12; ++element) {
        kv.key(layer, slot)[element] = tag(layer, slot, 0, element);
        kv.value(layer, slot)[element] = tag(layer, slot, 1, element);
      }
    }
  }
  for (int layer = 0; layer < 2; ++layer) {
    for (int slot = 0; slot < 10; ++slot) {
      for (int element = 0; element < 12; ++element) {
        ASSERT_EQ(kv.key(layer, slot)[element], tag(layer, slot, 0, element));
        ASSERT_EQ(kv.value(layer, slot)[element], tag(layer, slot, 1, element));
      }
    }
  }
  kv.CopyBlock(/*source=*/1, /*destination=*/4);
  for (int layer = 0; layer < 2; ++layer) {
    for (int offset = 0; offset < 2; ++offset) {
      EXPECT_EQ(kv.key(layer, 8 + offset)[5], tag(layer, 2 + offset, 0, 5));
      EXPECT_EQ(kv.value(layer, 8 + offset)[5], tag(layer, 2 + offset, 1, 5));
    }
  }
}

// Every dtype stores a token's rows within its format's rounding, keeps its bytes where
// KvBytesPerToken says, and copies blocks (scales included).
TEST(KvStorageTest, DtypesRoundTripWithinTheirFormat) {
  struct Case {
    plan::DType dtype;
    int64_t element_bytes;
    double relative;  // of the head's largest magnitude
  };
  // f16: 11-bit significand, half an ulp = 2^-11 of the value; bf16: 8 bits, 2^-8; i8: half a
  // step of max / 127 = 1 / 254 of the head's largest magnitude.
  for (const Case& c : {Case{plan::F32, 4, 0.0}, Case{plan::F16, 2, 1.0 / 2048},
                        Case{plan::BF16, 2, 1.0 / 256}, Case{plan::I8, 1, 1.0 / 254}}) {
    KvStorageShape shape{.num_layers = 2,
                         .num_kv_heads = 3,
                         .head_dim = 8,
                         .num_blocks = 4,
                         .block_size = 2,
                         .dtype = c.dtype};
    auto storage = KvStorage::Create(shape);
    ASSERT_TRUE(storage.ok()) << storage.status();
    KvStorage& kv = **storage;
    const int64_t scale_bytes = c.dtype == plan::I8 ? 4 : 0;
    EXPECT_EQ(KvBytesPerToken(2, 3, 8, c.dtype), 2 * 2 * 3 * (8 * c.element_bytes + scale_bytes));
    EXPECT_EQ(static_cast<int64_t>(kv.size_bytes()),
              KvBytesPerToken(2, 3, 8, c.dtype) * kv.num_slots());
    auto row = [](int layer, int slot, int is_value) {
      std::vector<float> values(24);
      for (int i = 0; i < 24; ++i) {
        // Heads of very different magnitudes: per-head scales must keep small heads exact.
        values[i] = std::sin(1.3f * (i + 24 * (slot + 8 * (layer + 2 * is_value)))) *
                    std::pow(10.0f, static_cast<float>(i / 8 - 1));
      }
      return values;
    };
    for (int layer = 0; layer < 2; ++layer) {
      for (int slot = 0; slot < 8; ++slot) {
        kv.WriteToken(layer, slot, row(layer, slot, 0).data(), row(layer, slot, 1).data());
      }
    }
    auto check = [&](int layer, int slot, int source_slot) {
      std::vector<float> key(24), value(24);
      kv.ReadKey(layer, slot, key.data());
      kv.ReadValue(layer, slot, value.data());
      for (int is_value = 0; is_value < 2; ++is_value) {
        const std::vector<float> expected = row(layer, source_slot, is_value);
        const std::vector<float>& actual = is_value ? value : key;
        for (int head = 0; head < 3; ++head) {
          float largest = 0;
          for (int i = 0; i < 8; ++i)
            largest = std::max(largest, std::fabs(expected[head * 8 + i]));
          for (int i = 0; i < 8; ++i) {
            const float wanted = expected[head * 8 + i];
            const double bound = c.dtype == plan::I8 ? c.relative * largest * 1.0001
                                                     : c.relative * std::fabs(wanted);
            ASSERT_LE(std::fabs(actual[head * 8 + i] - wanted), bound)
                << plan::DType_Name(c.dtype) << " layer " << layer << " slot " << slot;
          }
        }
      }
    };
    for (int layer = 0; layer < 2; ++layer) {
      for (int slot = 0; slot < 8; ++slot) check(layer, slot, slot);
    }
    kv.CopyBlock(/*source=*/1, /*destination=*/3);
    for (int layer = 0; layer < 2; ++layer) {
      check(layer, 6, 2);
      check(layer, 7, 3);
      check(layer, 2, 2);  // the source is unchanged
    }
  }
}

TEST(KvStorageTest, ResolvesDtypeAndRejectsOthers) {
  EXPECT_EQ(ResolveKvDType(plan::DTYPE_UNSPECIFIED, plan::DTYPE_UNSPECIFIED), plan::F32);
  EXPECT_EQ(ResolveKvDType(plan::DTYPE_UNSPECIFIED, plan::BF16), plan::BF16);
  EXPECT_EQ(ResolveKvDType(plan::I8, plan::BF16), plan::I8);
  EXPECT_EQ(*ParseKvDType("int8"), plan::I8);
  EXPECT_EQ(*ParseKvDType("bf16"), plan::BF16);
  EXPECT_FALSE(ParseKvDType("i4").ok());
  for (plan::DType dtype : {plan::I4, plan::U8, plan::I32}) {
    auto storage = KvStorage::Create({.num_layers = 1,
                                      .num_kv_heads = 1,
                                      .head_dim = 4,
                                      .num_blocks = 1,
                                      .block_size = 1,
                                      .dtype = dtype});
    ASSERT_FALSE(storage.ok());
    EXPECT_NE(storage.status().message().find(plan::DType_Name(dtype)), std::string::npos)
        << storage.status();
  }
}

TEST(KvStorageTest, RejectsBadShapes) {
  EXPECT_FALSE(
      KvStorage::Create(
          {.num_layers = 0, .num_kv_heads = 1, .head_dim = 1, .num_blocks = 1, .block_size = 1})
          .ok());
  EXPECT_FALSE(KvStorage::Create({.num_layers = 1 << 30,
                                  .num_kv_heads = 1 << 30,
                                  .head_dim = 1 << 30,
                                  .num_blocks = 1 << 30,
                                  .block_size = 16})
                   .ok());
}

}  // namespace
}  // namespace llmrt::kv
