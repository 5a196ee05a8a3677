#include "compiler/tokenizer/import_tokenizer.h"

#include "gtest/gtest.h"

namespace llmc {
namespace {

TEST(ImportTokenizerTest, Stories260K) {
  auto spec = ImportTokenizer(LLMC_SOURCE_DIR "/tests/data/stories260K");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->pieces_size(), 512);
}

}  // namespace
}  // namespace llmc
