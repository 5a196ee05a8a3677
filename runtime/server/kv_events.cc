#include "runtime/server/kv_events.h"

#include <zmq.h>

#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"

namespace llmrt::server {
namespace {

// The few msgpack forms a batch needs (https://github.com/msgpack/msgpack/blob/master/spec.md),
// each in its shortest encoding as msgpack requires of an encoder that wants byte-equal output.
class MsgpackWriter {
 public:
  void Nil() { out_ += '\xc0'; }
  void Float64(double value) {
    uint64_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    out_ += '\xcb';
    BigEndian(bits, 8);
  }
  void Unsigned(uint64_t value) {
    if (value < 128) {
      out_ += static_cast<char>(value);
    } else if (value <= 0xff) {
      out_ += '\xcc';
      BigEndian(value, 1);
    } else if (value <= 0xffff) {
      out_ += '\xcd';
      BigEndian(value, 2);
    } else if (value <= 0xffffffffull) {
      out_ += '\xce';
      BigEndian(value, 4);
    } else {
      out_ += '\xcf';
      BigEndian(value, 8);
    }
  }
  void Signed(int64_t value) {
    if (value >= 0) return Unsigned(static_cast<uint64_t>(value));
    if (value >= -32) {
      out_ += static_cast<char>(value);
    } else if (value >= INT8_MIN) {
      out_ += '\xd0';
      BigEndian(static_cast<uint64_t>(value), 1);
    } else if (value >= INT16_MIN) {
      out_ += '\xd1';
      BigEndian(static_cast<uint64_t>(value), 2);
    } else if (value >= INT32_MIN) {
      out_ += '\xd2';
      BigEndian(static_cast<uint64_t>(value), 4);
    } else {
      out_ += '\xd3';
      BigEndian(static_cast<uint64_t>(value), 8);
    }
  }
  void String(const char* text) {
    const size_t size = std::strlen(text);  // tags only: always < 32 bytes (fixstr)
    out_ += static_cast<char>(0xa0 | size);
    out_ += text;
  }
  void Array(size_t size) {
    if (size < 16) {
      out_ += static_cast<char>(0x90 | size);
    } else if (size <= 0xffff) {
      out_ += '\xdc';
      BigEndian(size, 2);
    } else {
      out_ += '\xdd';
      BigEndian(size, 4);
    }
  }
  std::string Take() { return std::move(out_); }

 private:
  void BigEndian(uint64_t value, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) out_ += static_cast<char>((value >> (8 * i)) & 0xff);
  }
  std::string out_;
};

double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string EncodeKvEventBatch(double ts, const std::vector<kv::KvCacheEvent>& events,
                               int32_t block_size) {
  MsgpackWriter writer;
  writer.Array(2);
  writer.Float64(ts);
  writer.Array(events.size());
  for (const kv::KvCacheEvent& event : events) {
    switch (event.kind) {
      case kv::KvCacheEvent::Kind::kStored:
        writer.Array(8);
        writer.String("BlockStored");
        writer.Array(event.block_hashes.size());
        for (uint64_t hash : event.block_hashes) writer.Unsigned(hash);
        if (event.has_parent) {
          writer.Unsigned(event.parent_hash);
        } else {
          writer.Nil();
        }
        writer.Array(event.token_ids.size());
        for (int32_t token : event.token_ids) writer.Signed(token);
        writer.Signed(block_size);
        writer.Nil();  // lora_id
        writer.Nil();  // medium
        writer.Nil();  // lora_name
        break;
      case kv::KvCacheEvent::Kind::kRemoved:
        writer.Array(3);
        writer.String("BlockRemoved");
        writer.Array(event.block_hashes.size());
        for (uint64_t hash : event.block_hashes) writer.Unsigned(hash);
        writer.Nil();  // medium
        break;
      case kv::KvCacheEvent::Kind::kAllCleared:
        writer.Array(1);
        writer.String("AllBlocksCleared");
        break;
    }
  }
  return writer.Take();
}

KvEventPublisher::KvEventPublisher(const KvEventOptions& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Create(
    const KvEventOptions& options) {
  std::unique_ptr<KvEventPublisher> publisher(new KvEventPublisher(options));
  publisher->context_ = zmq_ctx_new();
  if (publisher->context_ == nullptr) {
    return absl::InternalError(
        absl::StrFormat("KV events: zmq_ctx_new failed: %s", zmq_strerror(zmq_errno())));
  }
  publisher->socket_ = zmq_socket(publisher->context_, ZMQ_PUB);
  // vLLM's figure: a subscriber may fall 100000 batches behind before the socket drops for it.
  const int high_water_mark = 100000;
  zmq_setsockopt(publisher->socket_, ZMQ_SNDHWM, &high_water_mark, sizeof(high_water_mark));
  // Unsent batches get 2 s at shutdown; a subscriber that is gone must not hold the exit.
  const int linger_ms = 2000;
  zmq_setsockopt(publisher->socket_, ZMQ_LINGER, &linger_ms, sizeof(linger_ms));
  if (zmq_bind(publisher->socket_, options.endpoint.c_str()) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--kv-events-endpoint '%s': cannot bind: %s (expected e.g. "
                        "tcp://*:5557, tcp://127.0.0.1:* or ipc:///path)",
                        options.endpoint, zmq_strerror(zmq_errno())));
  }
  char endpoint[512];
  size_t endpoint_size = sizeof(endpoint);
  zmq_getsockopt(publisher->socket_, ZMQ_LAST_ENDPOINT, endpoint, &endpoint_size);
  publisher->bound_endpoint_ = endpoint;
  kv::KvCacheEvent cleared;
  cleared.kind = kv::KvCacheEvent::Kind::kAllCleared;
  publisher->Publish({cleared});
  publisher->thread_ = std::thread([raw = publisher.get()] { raw->Run(); });
  return publisher;
}

KvEventPublisher::~KvEventPublisher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (socket_ != nullptr) zmq_close(socket_);
  if (context_ != nullptr) zmq_ctx_term(context_);
}

void KvEventPublisher::Publish(std::vector<kv::KvCacheEvent> events) {
  if (events.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back({UnixSeconds(), std::move(events)});
  }
  wake_.notify_one();
}

uint64_t KvEventPublisher::batches_sent() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sent_;
}

void KvEventPublisher::Run() {
  const std::string& topic = options_.topic;
  for (;;) {
    Batch batch;
    uint64_t sequence;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything was sent
      batch = std::move(queue_.front());
      queue_.pop_front();
      sequence = sent_;
    }
    const std::string payload = EncodeKvEventBatch(batch.ts, batch.events, options_.block_size);
    char sequence_bytes[8];
    for (int i = 0; i < 8; ++i) sequence_bytes[i] = static_cast<char>(sequence >> (8 * (7 - i)));
    // A PUB socket never blocks a send: past the high-water mark it drops for that subscriber,
    // which the subscriber sees as a gap in the sequence numbers.
    zmq_send(socket_, topic.data(), topic.size(), ZMQ_SNDMORE);
    zmq_send(socket_, sequence_bytes, sizeof(sequence_bytes), ZMQ_SNDMORE);
    zmq_send(socket_, payload.data(), payload.size(), 0);
    std::lock_guard<std::mutex> lock(mutex_);
    ++sent_;
  }
}

}  // namespace llmrt::server
