#include "runtime/server/kv_events.h"

#include <zmq.h>

#include <chrono>
#include <cstring>
#include <optional>
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
  void Map(size_t size) {  // at most 15 entries here (fixmap)
    out_ += static_cast<char>(0x80 | size);
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
                               int32_t block_size, KvEventEncoding encoding) {
  const bool as_map = encoding == KvEventEncoding::kMap;
  MsgpackWriter writer;
  // One event: its tag, then its fields. In the map encoding each value follows its name and
  // the tag is the "type" entry; in the array encoding the names are left out.
  auto begin_event = [&](const char* tag, size_t num_fields) {
    if (as_map) {
      writer.Map(num_fields + 1);
      writer.String("type");
    } else {
      writer.Array(num_fields + 1);
    }
    writer.String(tag);
  };
  auto field = [&](const char* name) {
    if (as_map) writer.String(name);
  };
  auto hashes = [&](const std::vector<uint64_t>& block_hashes) {
    field("block_hashes");
    writer.Array(block_hashes.size());
    for (uint64_t hash : block_hashes) writer.Unsigned(hash);
  };
  // The map encoding's batch also carries data_parallel_rank: one engine, rank 0.
  writer.Array(as_map ? 3 : 2);
  writer.Float64(ts);
  writer.Array(events.size());
  for (const kv::KvCacheEvent& event : events) {
    switch (event.kind) {
      case kv::KvCacheEvent::Kind::kStored:
        begin_event("BlockStored", 7);
        hashes(event.block_hashes);
        field("parent_block_hash");
        if (event.has_parent) {
          writer.Unsigned(event.parent_hash);
        } else {
          writer.Nil();
        }
        field("token_ids");
        writer.Array(event.token_ids.size());
        for (int32_t token : event.token_ids) writer.Signed(token);
        field("block_size");
        writer.Signed(block_size);
        field("lora_id");
        writer.Nil();
        field("medium");
        writer.Nil();
        field("lora_name");
        writer.Nil();
        break;
      case kv::KvCacheEvent::Kind::kRemoved:
        begin_event("BlockRemoved", 2);
        hashes(event.block_hashes);
        field("medium");
        writer.Nil();
        break;
      case kv::KvCacheEvent::Kind::kAllCleared:
        begin_event("AllBlocksCleared", 0);
        break;
    }
  }
  if (as_map) writer.Unsigned(0);
  return writer.Take();
}

absl::StatusOr<KvEventEncoding> ParseKvEventEncoding(const std::string& name) {
  if (name == "map") return KvEventEncoding::kMap;
  if (name == "array") return KvEventEncoding::kArray;
  return absl::InvalidArgumentError(absl::StrFormat(
      "--kv-events-encoding: expected 'map' (vLLM's current format) or 'array' (its format "
      "before named fields), found '%s'",
      name));
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
  if (!options.replay_endpoint.empty()) {
    publisher->replay_socket_ = zmq_socket(publisher->context_, ZMQ_ROUTER);
    const int no_linger = 0;  // a replay in progress is not worth waiting for at exit
    zmq_setsockopt(publisher->replay_socket_, ZMQ_LINGER, &no_linger, sizeof(no_linger));
    if (zmq_bind(publisher->replay_socket_, options.replay_endpoint.c_str()) != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--kv-events-replay-endpoint '%s': cannot bind: %s",
                          options.replay_endpoint, zmq_strerror(zmq_errno())));
    }
    endpoint_size = sizeof(endpoint);
    zmq_getsockopt(publisher->replay_socket_, ZMQ_LAST_ENDPOINT, endpoint, &endpoint_size);
    publisher->bound_replay_endpoint_ = endpoint;
  }
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
  if (replay_socket_ != nullptr) zmq_close(replay_socket_);
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

namespace {

void SequenceBytes(uint64_t sequence, char (&bytes)[8]) {
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(sequence >> (8 * (7 - i)));
}

// Receives the frames of one multipart message that zmq_poll said is there.
std::vector<std::string> ReceiveFrames(void* socket) {
  std::vector<std::string> frames;
  int more = 1;
  while (more) {
    zmq_msg_t message;
    zmq_msg_init(&message);
    if (zmq_msg_recv(&message, socket, 0) < 0) {
      zmq_msg_close(&message);
      break;
    }
    frames.emplace_back(static_cast<const char*>(zmq_msg_data(&message)), zmq_msg_size(&message));
    more = zmq_msg_more(&message);
    zmq_msg_close(&message);
  }
  return frames;
}

}  // namespace

void KvEventPublisher::ServeReplays() {
  zmq_pollitem_t item = {replay_socket_, 0, ZMQ_POLLIN, 0};
  while (zmq_poll(&item, 1, 0) > 0 && (item.revents & ZMQ_POLLIN)) {
    // [client identity, empty delimiter, first wanted sequence: 8 bytes big-endian]
    const std::vector<std::string> frames = ReceiveFrames(replay_socket_);
    if (frames.size() != 3 || !frames[1].empty() || frames[2].size() != 8) continue;
    uint64_t first = 0;
    for (unsigned char byte : frames[2]) first = (first << 8) | byte;
    const std::string& client = frames[0];
    for (const auto& [sequence, payload] : replay_buffer_) {
      if (sequence < first) continue;
      char sequence_bytes[8];
      SequenceBytes(sequence, sequence_bytes);
      zmq_send(replay_socket_, client.data(), client.size(), ZMQ_SNDMORE);
      zmq_send(replay_socket_, "", 0, ZMQ_SNDMORE);
      zmq_send(replay_socket_, sequence_bytes, sizeof(sequence_bytes), ZMQ_SNDMORE);
      zmq_send(replay_socket_, payload.data(), payload.size(), 0);
    }
    // The end: sequence -1 and an empty payload.
    const char end[8] = {'\xff', '\xff', '\xff', '\xff', '\xff', '\xff', '\xff', '\xff'};
    zmq_send(replay_socket_, client.data(), client.size(), ZMQ_SNDMORE);
    zmq_send(replay_socket_, "", 0, ZMQ_SNDMORE);
    zmq_send(replay_socket_, end, sizeof(end), ZMQ_SNDMORE);
    zmq_send(replay_socket_, "", 0, 0);
  }
}

void KvEventPublisher::Run() {
  const std::string& topic = options_.topic;
  // With a replay socket the thread also wakes every 20 ms to answer replay requests: a
  // condition variable cannot wait on a socket, and 20 ms is nothing to a resynchronising
  // subscriber.
  constexpr auto kReplayPoll = std::chrono::milliseconds(20);
  for (;;) {
    std::optional<Batch> batch;
    uint64_t sequence = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      auto ready = [this] { return stop_ || !queue_.empty(); };
      if (replay_socket_ != nullptr) {
        wake_.wait_for(lock, kReplayPoll, ready);
      } else {
        wake_.wait(lock, ready);
      }
      if (queue_.empty() && stop_) return;  // everything was sent
      if (!queue_.empty()) {
        batch = std::move(queue_.front());
        queue_.pop_front();
        sequence = sent_;
      }
    }
    if (replay_socket_ != nullptr) ServeReplays();
    if (!batch.has_value()) continue;
    std::string payload =
        EncodeKvEventBatch(batch->ts, batch->events, options_.block_size, options_.encoding);
    char sequence_bytes[8];
    SequenceBytes(sequence, sequence_bytes);
    // A PUB socket never blocks a send: past the high-water mark it drops for that subscriber,
    // which the subscriber sees as a gap in the sequence numbers.
    zmq_send(socket_, topic.data(), topic.size(), ZMQ_SNDMORE);
    zmq_send(socket_, sequence_bytes, sizeof(sequence_bytes), ZMQ_SNDMORE);
    zmq_send(socket_, payload.data(), payload.size(), 0);
    if (replay_socket_ != nullptr) {
      replay_buffer_.emplace_back(sequence, std::move(payload));
      if (replay_buffer_.size() > static_cast<size_t>(options_.replay_batches)) {
        replay_buffer_.pop_front();
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    ++sent_;
  }
}

}  // namespace llmrt::server
