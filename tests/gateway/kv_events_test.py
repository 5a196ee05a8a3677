#!/usr/bin/env python3
"""KV-cache events are complete: a subscriber that applies every batch mirrors the replica.

Serves stories260K with --kv-events-endpoint and a KV pool of a few dozen blocks, subscribes
with pyzmq, and runs 32 concurrent requests (shared prefixes, n = 2 forks, prompts that outgrow
the pool so cached blocks are evicted). Every batch is decoded by msgspec -- the decoder vLLM's
own subscribers use -- into structs declared here after vLLM's schema (vllm/distributed/
kv_events.py: BlockStored / BlockRemoved / AllBlocksCleared tagged under "type", in a
[ts, events, data_parallel_rank] batch). Checks: sequence numbers run without a gap from the
startup AllBlocksCleared (or the batch after it, sent before we subscribed); timestamps never go back; no block is stored twice or removed
while not stored; and at the end the mirror (hash -> parent hash, token ids) equals
GET /kv_cache/blocks, the engine's own table. Runs with the default map encoding (vLLM's current
events, named fields), then with --kv-events-encoding array (its earlier positional events) and
16 requests. Last, vLLM's replay protocol (--kv-events-replay-endpoint) returns every batch from
sequence 0 byte for byte, and a mirror built from the replay alone equals the engine's table.

    python3 kv_events_test.py --llmc build/bin/llmc --llmrt build/bin/llmrt \
        --model-dir tests/data/stories260K

Skips (exit 77, saying why) when pyzmq or msgspec is missing.
"""
import concurrent.futures
import shutil
import tempfile
import threading
import time

import gateway_harness

try:
    import msgspec
    import zmq
    import zmq.utils.monitor
except ImportError as error:
    gateway_harness.skip("kv_events_test", "Python package missing: %s" % error.name)


def schema(array_like):
    """vLLM's event structs (vllm/distributed/kv_events.py), declared here: tagged by class name
    under "type", events as maps (array_like False, vLLM's current encoding) or positional
    arrays (its earlier one); the batch is an array either way."""
    def event(name, fields):
        return msgspec.defstruct(name, fields, array_like=array_like, tag=True)

    stored = event("BlockStored", [("block_hashes", list[int]),
                                   ("parent_block_hash", int | None), ("token_ids", list[int]),
                                   ("block_size", int), ("lora_id", int | None),
                                   ("medium", str | None)])
    removed = event("BlockRemoved", [("block_hashes", list[int]), ("medium", str | None)])
    cleared = event("AllBlocksCleared", [])
    return msgspec.defstruct(
        "KvEventBatch", [("ts", float), ("events", list[stored | removed | cleared]),
                         ("data_parallel_rank", int | None, None)], array_like=True)


TOPIC = b"kv@test@stories"
STORIES = [
    "Once upon a time there was a little girl named Lily who loved to play in the park with "
    "her red ball and her dog Max.",
    "One day a small boy called Tim found a shiny stone near the river and wanted to show it "
    "to his mom and dad.",
    "There was a big tree in the garden where the birds sang every morning and the children "
    "liked to sit in its shade.",
    "A happy cat lived in a little house by the sea, and every day it watched the boats come "
    "back with fish.",
]


class Mirror:
    """A replica's prefix cache as a subscriber rebuilds it from batches, checking each batch
    as it applies it."""

    def __init__(self, encoding):
        self.decoder = msgspec.msgpack.Decoder(type=schema(encoding == "array"))
        self.encoding = encoding
        self.blocks = {}  # hash -> (parent hash or None, token ids)
        self.sequences = []
        self.last_ts = 0.0
        self.counts = {"stored": 0, "removed": 0, "cleared": 0, "multi_block_stores": 0}

    def apply(self, topic, sequence, payload):
        assert topic == TOPIC, topic
        batch = self.decoder.decode(payload)
        self.sequences.append(sequence)
        assert batch.ts >= self.last_ts - 1e-3, (batch.ts, self.last_ts)
        self.last_ts = batch.ts
        # The map encoding's batch names the data-parallel rank (one engine: 0).
        assert batch.data_parallel_rank == (0 if self.encoding == "map" else None), batch
        for event in batch.events:
            kind = type(event).__name__
            if kind == "BlockStored":
                size = event.block_size
                assert len(event.token_ids) == size * len(event.block_hashes)
                if len(event.block_hashes) > 1:
                    self.counts["multi_block_stores"] += 1
                parent = event.parent_block_hash
                for index, block_hash in enumerate(event.block_hashes):
                    assert block_hash not in self.blocks, "stored twice: %d" % block_hash
                    self.blocks[block_hash] = (parent,
                                               event.token_ids[index * size:(index + 1) * size])
                    parent = block_hash
                    self.counts["stored"] += 1
            elif kind == "BlockRemoved":
                for block_hash in event.block_hashes:
                    assert block_hash in self.blocks, "removed while not stored: %d" % block_hash
                    del self.blocks[block_hash]
                    self.counts["removed"] += 1
            else:
                self.blocks.clear()
                self.counts["cleared"] += 1


class Subscriber:
    """Receives batches on a thread and applies them to a Mirror (under `lock`)."""

    def __init__(self, endpoint, encoding):
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.SUB)
        self.socket.setsockopt(zmq.SUBSCRIBE, TOPIC)
        self.socket.setsockopt(zmq.RCVTIMEO, 100)
        # The subscription travels right after the ZMTP handshake; until the publisher has it,
        # what it sends is not for us. Wait for the handshake, then give the subscription a
        # moment to arrive, before any request runs.
        monitor = self.socket.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        self.socket.connect(endpoint)
        assert monitor.poll(10000), "no ZMTP handshake with %s in 10 s" % endpoint
        zmq.utils.monitor.recv_monitor_message(monitor)
        self.socket.disable_monitor()
        monitor.close(linger=0)
        time.sleep(0.2)
        self.mirror = Mirror(encoding)
        self.payloads = {}  # sequence -> payload, as received
        self.errors = []
        self.lock = threading.Lock()
        self.stopping = False
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self):
        while not self.stopping:
            try:
                topic, sequence, payload = self.socket.recv_multipart()
            except zmq.Again:
                continue
            with self.lock:
                try:
                    self.payloads[int.from_bytes(sequence, "big")] = payload
                    self.mirror.apply(topic, int.from_bytes(sequence, "big"), payload)
                except Exception as error:  # reported by the test, not lost on this thread
                    self.errors.append(repr(error))

    def close(self):
        self.stopping = True
        self.thread.join()
        self.socket.close(linger=0)
        self.context.term()


def engine_table(server):
    status, body = gateway_harness.http("GET", server.url + "/kv_cache/blocks")
    assert status == 200, body
    return {block["hash"]: (block["parent_hash"], block["token_ids"]) for block in body["blocks"]}


def check_replay(endpoint, encoding, subscriber, expected):
    """vLLM's replay protocol: from sequence 0, every batch comes back byte for byte as it was
    published (the startup AllBlocksCleared first), then the end marker; a mirror built from
    the replay alone equals the engine's table."""
    context = zmq.Context()
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.RCVTIMEO, 10000)
    dealer.connect(endpoint)
    dealer.send_multipart([b"", (0).to_bytes(8, "big")])
    replayed = {}
    while True:
        empty, sequence, payload = dealer.recv_multipart()
        assert empty == b""
        if int.from_bytes(sequence, "big", signed=True) == -1:
            assert payload == b""
            break
        replayed[int.from_bytes(sequence, "big")] = payload
    dealer.close(linger=0)
    context.term()
    assert sorted(replayed) == list(range(len(replayed))), sorted(replayed)[:10]
    for sequence, payload in subscriber.payloads.items():
        assert replayed[sequence] == payload, sequence
    rebuilt = Mirror(encoding)
    for sequence in sorted(replayed):
        rebuilt.apply(TOPIC, sequence, replayed[sequence])
    assert rebuilt.counts["cleared"] == 1, rebuilt.counts
    assert rebuilt.blocks == expected
    print("kv_events_test: replay returned %d batches from sequence 0" % len(replayed))


def scenario(args, work, plan, encoding, num_requests):
    """Runs num_requests concurrent requests against a fresh replica publishing `encoding` and
    checks the subscriber's mirror against the engine's table."""
    # 768 KiB of KV: a few dozen 16-token blocks of this plan, far fewer than the requests'
    # prompts and replies need, so cached blocks are evicted while they run.
    server = gateway_harness.Server(
        args.llmrt, plan, work, "--kv-events-endpoint", "tcp://127.0.0.1:*",
        "--kv-events-topic", TOPIC.decode(), "--kv-events-encoding", encoding,
        "--kv-events-replay-endpoint", "tcp://127.0.0.1:*",
        "--kv-memory", str(768 * 1024), "--max-seqs", "12")
    subscriber = Subscriber(server.kv_events_endpoint, encoding)
    try:
        def one(index):
            story = STORIES[index % len(STORIES)]
            prompt = story if index < 16 else story + " " + STORIES[(index + 1) % 4]
            body = {"prompt": prompt, "max_tokens": 24 + index, "temperature": 1.0,
                    "seed": index, "n": 2 if index % 5 == 0 else 1}
            return gateway_harness.http("POST", server.url + "/v1/completions", body)

        with concurrent.futures.ThreadPoolExecutor(num_requests) as pool:
            results = list(pool.map(one, range(num_requests)))
        failed = [body for status, body in results if status != 200]
        assert not failed, failed[:2]

        # The last batch travels after the last response; wait for the mirror to settle.
        expected = engine_table(server)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with subscriber.lock:
                if subscriber.mirror.blocks == expected or subscriber.errors:
                    break
            time.sleep(0.05)
        with subscriber.lock:
            assert not subscriber.errors, subscriber.errors
            sequences = list(subscriber.mirror.sequences)
            mirror = dict(subscriber.mirror.blocks)
            counts = dict(subscriber.mirror.counts)
        print("kv_events_test: %s encoding, %d requests: %d batches, %s; engine holds %d blocks"
              % (encoding, num_requests, len(sequences), counts, len(expected)))
        # Sequence 0 is the startup AllBlocksCleared, sent as the server starts (usually before
        # we subscribed); from there on nothing may be missing.
        first = sequences[0] if sequences else None
        assert first in (0, 1) and sequences == list(range(first, first + len(sequences))), (
            sequences[:10])
        assert counts["removed"] > 0, "no eviction happened: the pool is too large"
        assert counts["multi_block_stores"] > 0, counts
        assert mirror == expected, (
            "mirror differs: %d blocks only in the mirror, %d only in the engine" %
            (len(mirror.keys() - expected.keys()), len(expected.keys() - mirror.keys())))
        check_replay(server.kv_events_replay_endpoint, encoding, subscriber, expected)
    finally:
        subscriber.close()
        assert server.stop() == 0


def main():
    args = gateway_harness.arguments()
    work = tempfile.mkdtemp(prefix="llmrt-kv-events-")
    try:
        plan = gateway_harness.stories_plan(args.llmc, args.model_dir, work)
        scenario(args, work, plan, "map", 32)
        scenario(args, work, plan, "array", 16)
        print("kv_events_test: OK")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
