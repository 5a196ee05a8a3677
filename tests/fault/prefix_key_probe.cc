// Prints the prefix-cache hash of one fixed block under a fresh BlockPool's key, as the engine
// creates it (model.cc: a BlockPool with the default key). security_test.cc runs this twice:
// equal output from two processes would mean the key is predictable.
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "runtime/kv/block_pool.h"

int main() {
  const llmrt::kv::BlockPool pool(/*num_blocks=*/4, /*block_size=*/16);
  const std::vector<int32_t> tokens(16, 7);
  std::printf("%016" PRIx64 "\n", llmrt::kv::HashBlock(pool.key(), /*parent_hash=*/0, tokens));
  return 0;
}
