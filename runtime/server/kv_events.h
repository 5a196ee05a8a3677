// KV-cache events over ZeroMQ, in vLLM's wire format, for prefix-aware routers (llm-d's KV-cache
// indexer, NVIDIA Dynamo) that send a prompt to the replica that already holds its blocks.
//
// Wire format (vLLM's vllm/distributed/kv_events.py, msgspec structs):
//   every message is a ZMQ multipart of three frames on a PUB socket:
//     [topic bytes (--kv-events-topic, default empty)]
//     [sequence number: 8 bytes, big-endian, 0 for the first batch, +1 per batch]
//   [payload: one msgpack-encoded batch]
//   The batch is an array; its events come in one of two encodings (--kv-events-encoding):
//   map (default; vLLM's since it gave its events named fields, vllm-project/vllm#42892):
//     batch  = [ts: float64 unix seconds, events, data_parallel_rank: 0]
//     events = {"type": "BlockStored", "block_hashes": [uint64...],
//               "parent_block_hash": uint64 | nil, "token_ids": [int...], "block_size": int,
//               "lora_id": nil, "medium": nil, "lora_name": nil}
//            | {"type": "BlockRemoved", "block_hashes": [uint64...], "medium": nil}
//            | {"type": "AllBlocksCleared"}
//   array (vLLM's earlier positional format, for subscribers that decode only that):
//     batch  = [ts, events]
//     events = ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id,
//               medium, lora_name] | ["BlockRemoved", block_hashes, medium] | ["AllBlocksCleared"]
//   msgspec ignores trailing array items and map keys a subscriber does not declare, so decoders
//   of the five-field BlockStored read both. A BlockStored's token_ids are block_size tokens per
//   hash, in order; the first hash's parent is parent_block_hash, each next hash's parent is the
//   hash before it. lora_id, lora_name and medium are nil: llmrt has no LoRA adapters and one KV
//   pool (CPU or GPU memory, whichever backend runs).
//
// Block hashes are the engine's prefix-cache hashes (runtime/kv/block_pool.h): SipHash-2-4 of
// the parent's hash and the block's token ids, keyed with 128 random bits drawn when the process
// starts. They identify a block within one replica's lifetime (a restart forgets the cache and
// changes every hash), which is what a subscriber needs to mirror that replica: stored, removed,
// parents. They are not comparable across replicas, and a router cannot compute them from a
// prompt; routers that match prompts to replicas (llm-d) hash the token_ids themselves.
//
// Ordering and loss: the engine hands over each step's events in the order the pool made them
// (kv::KvCacheEvent), one batch per step; the publisher queues batches without a bound and one
// thread sends them in order. The first batch (sequence 0) is AllBlocksCleared: the replica
// starts with an empty cache, so a subscriber still holding state from a previous process at
// this address drops it. ZMQ PUB drops messages for a subscriber that falls more than the
// high-water mark (100000 messages) behind, and a subscriber that connects late misses what was
// sent before; both show as a gap in the sequence numbers. After a gap a subscriber asks the
// replay socket (--kv-events-replay-endpoint, vLLM's protocol: a ROUTER that takes
// [empty frame, first sequence as 8 bytes big-endian] and answers [empty, sequence, payload] for
// each of the last replay_batches batches from there, then [empty, -1 as 8 bytes, empty]), or,
// when the gap is older than that, starts over from GET /kv_cache/blocks (server.h), the
// replica's whole cache.
//
// Thread-safety: Publish() from any thread; the socket belongs to the publisher's thread.
#ifndef LLMRT_SERVER_KV_EVENTS_H_
#define LLMRT_SERVER_KV_EVENTS_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/kv/block_pool.h"

namespace llmrt::server {

enum class KvEventEncoding { kMap, kArray };
// "map" or "array"; anything else is an InvalidArgument naming the flag.
absl::StatusOr<KvEventEncoding> ParseKvEventEncoding(const std::string& name);

struct KvEventOptions {
  // Where the PUB socket binds: "tcp://*:5557", "tcp://127.0.0.1:*" (any free port),
  // "ipc:///tmp/kv.sock". Subscribers connect to it.
  std::string endpoint;
  std::string topic;
  int32_t block_size = 16;  // written into every BlockStored
  KvEventEncoding encoding = KvEventEncoding::kMap;
  // Where a ROUTER socket for replay requests binds; empty: none. It keeps the payloads of the
  // last replay_batches batches (vLLM's 10000: minutes of a busy replica, a few MB).
  std::string replay_endpoint;
  int32_t replay_batches = 10000;
};

// One batch's msgpack payload (the format above). `ts` is unix time in seconds.
std::string EncodeKvEventBatch(double ts, const std::vector<kv::KvCacheEvent>& events,
                               int32_t block_size, KvEventEncoding encoding);

class KvEventPublisher {
 public:
  // Binds the socket and queues the AllBlocksCleared batch. Fails naming the endpoint when ZMQ
  // cannot bind it.
  static absl::StatusOr<std::unique_ptr<KvEventPublisher>> Create(const KvEventOptions& options);
  // Sends what is queued (the socket lingers up to 2 s for slow subscribers), then closes.
  ~KvEventPublisher();
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // Queues one batch, stamped now. Returns at once; an empty `events` is not sent.
  void Publish(std::vector<kv::KvCacheEvent> events);
  // The endpoint as bound, with a wildcard port resolved ("tcp://127.0.0.1:43125").
  const std::string& bound_endpoint() const { return bound_endpoint_; }
  const std::string& bound_replay_endpoint() const { return bound_replay_endpoint_; }
  // Batches sent so far (the next sequence number).
  uint64_t batches_sent() const;

 private:
  struct Batch {
    double ts;
    std::vector<kv::KvCacheEvent> events;
  };
  explicit KvEventPublisher(const KvEventOptions& options);
  void Run();
  void ServeReplays();  // publisher thread: answers every replay request waiting

  KvEventOptions options_;
  void* context_ = nullptr;  // zmq context and PUB socket (zmq.h stays out of this header)
  void* socket_ = nullptr;
  void* replay_socket_ = nullptr;  // ROUTER; null without a replay endpoint
  std::string bound_endpoint_, bound_replay_endpoint_;
  // (sequence, payload) of the last replay_batches batches; the publisher thread's own.
  std::deque<std::pair<uint64_t, std::string>> replay_buffer_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Batch> queue_;  // under mutex_
  bool stop_ = false;        // under mutex_
  uint64_t sent_ = 0;        // under mutex_
  std::thread thread_;
};

}  // namespace llmrt::server

#endif  // LLMRT_SERVER_KV_EVENTS_H_
