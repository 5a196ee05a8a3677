// The decode schedule of the weight-streaming kernels: the f16 / bf16 / f32 panel matmul at a few
// token rows (matmul.cc, ForEachRegionCall) and the quantized GEMVs (quant_matmul.cc,
// GemvOverRegions). A decode step reads each weight byte once, straight from memory, so the
// schedule is about streams, not reuse.
//
// The matrix's `num_units` units (panels of 16 rows, or quantized rows) are split into `group`
// regions of Q = num_units / group units; a kernel call takes unit i of every region (units i,
// i + Q, i + 2Q, ...), so a thread reads `group` long sequential streams, as the bandwidth probe
// does, rather than `group` adjacent units (short streams the hardware prefetcher learns again
// at every call) or one unit after another (one stream: too few misses in flight for one core to
// use its bandwidth). Measured numbers are with the callers (matmul.cc, quant_matmul.cc) and in
// docs/performance.md.
//
// Work items are runs of consecutive i, claimed dynamically (ParallelForDynamic), not fixed
// halves: nothing of a decode step's weights survives in cache until the next step, so fixed
// halves buy no locality, and a thread whose memory traffic runs slower then takes fewer items
// instead of holding the other at each join. The units past the regions (fewer than `group`)
// are the last item.
//
// Thread-safety: ForEachRegionItem calls its callbacks concurrently from the pool's threads, each
// item once.
#ifndef LLMRT_BACKEND_CPU_REGION_SCHEDULE_H_
#define LLMRT_BACKEND_CPU_REGION_SCHEDULE_H_

#include <algorithm>
#include <cstdint>

#include "runtime/threading/thread_pool.h"

namespace llmrt::cpu {

// Bytes of each stream per work item: items of `group` x 128 KiB (~20 us at 25 GB/s, ~4 f16
// panels at K = 2048), so the threads meet at the join within about one item (64 KiB - 512 KiB:
// the same decode speed within the noise on Zen 3).
inline constexpr int64_t kRegionStreamBytesPerItem = int64_t{128} << 10;

// Runs the region schedule over `num_units` units of `unit_bytes` weight bytes each:
// regions(begin, end, spacing) for each work item, meaning the calls for i in [begin, end) over
// units i + k * spacing, k < group (spacing = Q); rest(begin, end) once for the units [begin,
// end) past the regions, when there are any. Items run on the pool's threads, one callback per
// item, so per-item state (output cursors) lives in the callbacks.
template <typename Regions, typename Rest>
void ForEachRegionItem(threading::ThreadPool& pool, int64_t num_units, int group,
                       int64_t unit_bytes, const Regions& regions, const Rest& rest) {
  const int64_t region = num_units / group;
  const int64_t per_item = std::max<int64_t>(1, kRegionStreamBytesPerItem / unit_bytes);
  const int64_t region_items = (region + per_item - 1) / per_item;
  const bool has_rest = region * group < num_units;
  pool.ParallelForDynamic(
      region_items + (has_rest ? 1 : 0),
      [&](int64_t item, int64_t, int32_t) {
        if (item == region_items) {
          rest(region * group, num_units);
          return;
        }
        regions(item * per_item, std::min(region, (item + 1) * per_item), region);
      },
      1);
}

}  // namespace llmrt::cpu

#endif  // LLMRT_BACKEND_CPU_REGION_SCHEDULE_H_
