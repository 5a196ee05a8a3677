//===- PlanMemory.cpp - activation arena offsets by liveness ---------------===//

#include "passes/Passes.h"

#include <map>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/Support/MathExtras.h"

namespace llmc {
#define GEN_PASS_DEF_PLANMEMORYPASS
#include "passes/Passes.h.inc"
} // namespace llmc

using namespace mlir;

namespace llmc {
namespace {

// Slots start at multiples of 64 bytes per token: a buffer starts at max_tokens * offset, so
// every buffer is then 64-byte aligned (one cache line, one AVX-512 register) for any
// max_tokens.
constexpr int64_t kSlotAlignment = 64;

// Live slots, offset -> size, in bytes per token.
class Arena {
public:
  // The lowest offset with a gap of `size` bytes between live slots (or after the last one).
  int64_t allocate(int64_t size) {
    int64_t candidate = 0;
    for (auto [offset, slotSize] : liveSlots) {
      if (offset - candidate >= size)
        break;
      candidate = std::max(candidate, offset + slotSize);
    }
    liveSlots.emplace(candidate, size);
    bytesPerToken = std::max(bytesPerToken, candidate + size);
    return candidate;
  }
  void release(int64_t offset) { liveSlots.erase(offset); }
  int64_t getBytesPerToken() const { return bytesPerToken; }

private:
  std::map<int64_t, int64_t> liveSlots;
  int64_t bytesPerToken = 0;
};

LogicalResult planFunction(func::FuncOp function) {
  if (function.isExternal())
    return success();
  if (!function.getBody().hasOneBlock())
    return function.emitOpError() << "llm-plan-memory expects a single-block function body";
  Block &block = function.getBody().front();

  DenseMap<Operation *, int64_t> position;
  for (auto [index, op] : llvm::enumerate(block))
    position[&op] = index;
  // Values returned from the function live in the caller's buffers (the logits), not the arena.
  DenseSet<Value> returned(block.getTerminator()->operand_begin(),
                           block.getTerminator()->operand_end());
  auto lastUse = [&](Value value) {
    int64_t last = -1;
    for (Operation *user : value.getUsers())
      if (Operation *ancestor = block.findAncestorOpInBlock(*user))
        last = std::max(last, position[ancestor]);
    return last;
  };

  Arena arena;
  DenseMap<Value, int64_t> allocated;
  Builder builder(function.getContext());
  for (Operation &op : block.without_terminator()) {
    SmallVector<int64_t> offsets;
    // Outputs are placed while the inputs are still live, so they never overlap them: kernels
    // may then read inputs and write outputs in any order.
    for (Value result : op.getResults()) {
      if (returned.contains(result)) {
        offsets.push_back(-1);
        continue;
      }
      int64_t width = llm::getActivationWidth(result.getType());
      if (ShapedType::isDynamic(width) || width <= 0)
        return op.emitOpError() << "result type " << result.getType()
                                << " is not an activation tensor<?xWxf32> with static W";
      int64_t offset = arena.allocate(llvm::alignTo(width * 4, kSlotAlignment));
      allocated[result] = offset;
      offsets.push_back(offset);
    }
    if (op.getNumResults() > 0)
      op.setAttr(llm::kArenaOffsetsAttr, builder.getDenseI64ArrayAttr(offsets));
    int64_t here = position[&op];
    for (Value operand : op.getOperands()) {
      auto it = allocated.find(operand);
      if (it != allocated.end() && lastUse(operand) <= here) {
        arena.release(it->second);
        allocated.erase(it);
      }
    }
    for (Value result : op.getResults()) {
      auto it = allocated.find(result);
      if (it != allocated.end() && result.use_empty()) {
        arena.release(it->second);
        allocated.erase(it);
      }
    }
  }
  function->setAttr(llm::kArenaBytesPerTokenAttr,
                    builder.getI64IntegerAttr(arena.getBytesPerToken()));
  return success();
}

struct PlanMemoryPass : impl::PlanMemoryPassBase<PlanMemoryPass> {
  void runOnOperation() override {
    for (auto function : getOperation().getOps<func::FuncOp>())
      if (failed(planFunction(function)))
        return signalPassFailure();
  }
};

} // namespace
} // namespace llmc
