#include "runtime/server/kv_events.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace llmrt::server {
namespace {

// Bytes written out by hand from the msgpack spec (fixarray 0x9N, fixstr 0xaN, float64 0xcb,
// uint64 0xcf, nil 0xc0, negative fixint 0xe0..0xff); the Python subscriber test
// (tests/gateway/kv_events_test.py) decodes real batches with msgspec, vLLM's own decoder.
TEST(EncodeKvEventBatch, ArrayAllBlocksClearedBatch) {
  kv::KvCacheEvent cleared;
  cleared.kind = kv::KvCacheEvent::Kind::kAllCleared;
  const std::string bytes = EncodeKvEventBatch(1.5, {cleared}, 16, KvEventEncoding::kArray);
  const std::string expected =
      std::string("\x92\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00\x91\x91\xb0", 13) + "AllBlocksCleared";
  EXPECT_EQ(bytes, expected);
}

TEST(EncodeKvEventBatch, ArrayStoredAndRemovedUseShortestForms) {
  kv::KvCacheEvent stored;
  stored.kind = kv::KvCacheEvent::Kind::kStored;
  stored.block_hashes = {0xfedcba9876543210ull};
  stored.token_ids = {5, -1};
  kv::KvCacheEvent removed;
  removed.kind = kv::KvCacheEvent::Kind::kRemoved;
  removed.block_hashes = {200};
  const std::string bytes = EncodeKvEventBatch(0.0, {stored, removed}, 2, KvEventEncoding::kArray);
  const std::string expected =
      std::string("\x92\xcb\x00\x00\x00\x00\x00\x00\x00\x00\x92", 11) +
      // ["BlockStored", [hash], nil, [5, -1], 2, nil, nil, nil]
      std::string("\x98\xab", 2) + "BlockStored" +
      std::string("\x91\xcf\xfe\xdc\xba\x98\x76\x54\x32\x10\xc0\x92\x05\xff\x02\xc0\xc0\xc0", 18) +
      // ["BlockRemoved", [200], nil]
      std::string("\x93\xac", 2) + "BlockRemoved" + std::string("\x91\xcc\xc8\xc0", 4);
  EXPECT_EQ(bytes, expected);
}

// The map encoding: fixmap 0x8N, each value after its name, the tag under "type", and the
// batch's third item data_parallel_rank = 0.
TEST(EncodeKvEventBatch, MapRemovedAndClearedBatch) {
  kv::KvCacheEvent removed;
  removed.kind = kv::KvCacheEvent::Kind::kRemoved;
  removed.block_hashes = {7};
  kv::KvCacheEvent cleared;
  cleared.kind = kv::KvCacheEvent::Kind::kAllCleared;
  const std::string bytes = EncodeKvEventBatch(0.0, {removed, cleared}, 16, KvEventEncoding::kMap);
  const std::string expected = std::string("\x93\xcb\x00\x00\x00\x00\x00\x00\x00\x00\x92", 11) +
                               // {"type": "BlockRemoved", "block_hashes": [7], "medium": nil}
                               "\x83\xa4type\xac"
                               "BlockRemoved\xac"
                               "block_hashes\x91\x07\xa6medium\xc0" +
                               // {"type": "AllBlocksCleared"}, then data_parallel_rank 0
                               "\x81\xa4type\xb0"
                               "AllBlocksCleared" +
                               std::string("\x00", 1);
  EXPECT_EQ(bytes, expected);
}

TEST(ParseKvEventEncoding, NamesTheFlagOnAnUnknownName) {
  EXPECT_EQ(*ParseKvEventEncoding("map"), KvEventEncoding::kMap);
  EXPECT_EQ(*ParseKvEventEncoding("array"), KvEventEncoding::kArray);
  absl::StatusOr<KvEventEncoding> bad = ParseKvEventEncoding("json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--kv-events-encoding"), std::string::npos);
  EXPECT_NE(bad.status().message().find("'json'"), std::string::npos);
}

}  // namespace
}  // namespace llmrt::server
