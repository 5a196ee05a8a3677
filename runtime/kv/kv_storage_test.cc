#include "runtime/kv/kv_storage.h"

#include "gtest/gtest.h"

namespace llmrt::kv {
namespace {

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
