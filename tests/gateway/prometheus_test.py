#!/usr/bin/env python3
"""Two `llmrt serve` replicas scraped by a real Prometheus, as a gateway's endpoint picker sees
them.

Both replicas require an API key and run with --metrics-public, so Prometheus scrapes them with
no credentials while the API stays closed. Prometheus (Debian's package) scrapes both every
second; while clients keep both replicas busy (more concurrent requests than --max-seqs, so
requests queue), the test reads through Prometheus' HTTP API every gauge the Gateway API
Inference Extension's model-server protocol names: vllm:num_requests_waiting
(TotalQueuedRequests), vllm:num_requests_running (TotalRunningRequests),
vllm:kv_cache_usage_perc (KVCacheUtilization) and vllm:cache_config_info's block_size /
num_gpu_blocks labels. Each must be seen non-zero on both replicas during the load, and back to
exactly 0 on both after it.

    python3 prometheus_test.py --llmc build/bin/llmc --llmrt build/bin/llmrt \
        --model-dir tests/data/stories260K

Skips (exit 77, saying why) when the prometheus binary is missing.
"""
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse

import gateway_harness

PROMETHEUS = shutil.which("prometheus")
if PROMETHEUS is None:
    gateway_harness.skip("prometheus_test", "the prometheus binary is not on PATH")

KEY = "gateway-test-key"
GAUGES = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"]
MAX_SEQS = 2


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Prometheus:
    def __init__(self, work, targets):
        self.port = free_port()
        config = os.path.join(work, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
                    "scrape_configs:\n  - job_name: llmrt\n    static_configs:\n"
                    "      - targets: [%s]\n" % ", ".join("'%s'" % t for t in targets))
        self.log = open(os.path.join(work, "prometheus.log"), "w")
        self.process = subprocess.Popen(
            [PROMETHEUS, "--config.file=" + config,
             "--storage.tsdb.path=" + os.path.join(work, "tsdb"),
             "--web.listen-address=127.0.0.1:%d" % self.port], stdout=self.log,
            stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if gateway_harness.http("GET", self.url + "/-/ready", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError("prometheus did not become ready; see %s" % self.log.name)

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def query(self, promql):
        """{instance: value} of an instant query."""
        status, body = gateway_harness.http(
            "GET", self.url + "/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        if isinstance(body, str):
            body = json.loads(body)
        assert status == 200 and body["status"] == "success", body
        return {r["metric"].get("instance"): float(r["value"][1]) for r in body["data"]["result"]}

    def series(self, promql):
        status, body = gateway_harness.http(
            "GET", self.url + "/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        if isinstance(body, str):
            body = json.loads(body)
        assert status == 200, body
        return [r["metric"] for r in body["data"]["result"]]

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


def wait_for(description, condition, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.25)
    raise AssertionError("timed out after %g s waiting for %s" % (seconds, description))


def main():
    args = gateway_harness.arguments()
    work = tempfile.mkdtemp(prefix="llmrt-prometheus-")
    replicas, prometheus, clients = [], None, []
    stop_load = threading.Event()
    try:
        plan = gateway_harness.stories_plan(args.llmc, args.model_dir, work)
        for _ in range(2):
            replicas.append(gateway_harness.Server(
                args.llmrt, plan, work, "--api-key", KEY, "--metrics-public", "--max-seqs",
                str(MAX_SEQS), "--threads", "1"))
        for replica in replicas:
            # The scraper needs no key; the API still does.
            status, page = gateway_harness.http("GET", replica.url + "/metrics")
            assert status == 200 and "vllm:num_requests_running" in page, (status, page[:200])
            assert gateway_harness.http("GET", replica.url + "/v1/models")[0] == 401
        instances = sorted("127.0.0.1:%d" % r.port for r in replicas)
        prometheus = Prometheus(work, instances)
        wait_for("both replicas up in Prometheus",
                 lambda: prometheus.query("up") == {i: 1.0 for i in instances}, 20)

        client_errors = []

        def client(replica, seed):
            body = {"prompt": "Once upon a time", "max_tokens": 100, "ignore_eos": True,
                    "seed": seed}
            try:
                while not stop_load.is_set():
                    status, answer = gateway_harness.http(
                        "POST", replica.url + "/v1/completions", body,
                        {"Authorization": "Bearer " + KEY})
                    assert status == 200, answer
                    body["seed"] += 1000
            except Exception as error:  # reported by the main thread
                client_errors.append("%s: %r" % (replica.url, error))

        # Three clients per replica against --max-seqs 2: two requests run, one waits.
        for index in range(6):
            thread = threading.Thread(target=client, args=(replicas[index % 2], index),
                                      daemon=True)
            thread.start()
            clients.append(thread)
        for gauge in GAUGES:
            peaks = {}

            def busy_on_both():
                assert not client_errors, client_errors
                peaks.update(prometheus.query("max_over_time(%s[10s])" % gauge))
                return sorted(k for k, v in peaks.items() if v > 0) == sorted(instances)

            try:
                wait_for("%s > 0 on both replicas during the load" % gauge, busy_on_both, 30)
            except AssertionError as error:
                raise AssertionError("%s; last peaks %s" % (error, peaks))
        running = prometheus.query("max_over_time(vllm:num_requests_running[10s])")
        assert all(value <= MAX_SEQS for value in running.values()), running
        info = prometheus.series("vllm:cache_config_info")
        assert sorted(m["instance"] for m in info) == instances, info
        assert all(m["block_size"] == "16" and int(m["num_gpu_blocks"]) > 0 for m in info), info
        print("prometheus_test: under load, max running %s" % running)

        stop_load.set()
        for thread in clients:
            thread.join(timeout=60)
        assert not client_errors, client_errors
        # Idle replicas: the next scrape of each must read every gauge as exactly 0.
        for gauge in GAUGES:
            wait_for("%s == 0 on both replicas after the load" % gauge,
                     lambda: prometheus.query(gauge) == {i: 0.0 for i in instances}, 15)
        print("prometheus_test: OK")
    finally:
        stop_load.set()
        if prometheus is not None:
            prometheus.stop()
        for replica in replicas:
            replica.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
