#!/usr/bin/env python3
"""TPOT with and without structured output at C concurrent streaming requests.

Starts `llmrt serve PLAN`, then alternates rounds: C concurrent streamed /v1/completions of
--max-tokens tokens each, unconstrained (ignore_eos) or under a JSON schema whose free-form
array (minItems 100) cannot end before max_tokens, so both modes run the same number of
steps at the same batch size. TPOT of a request is
(last token time - first token time) / (tokens - 1); the figure per mode is the median over
all requests of all its rounds. Also printed: the engine's time per step split into the model
and the sample phase (masks, matchers, sampler), from /metrics. Not a test; numbers go to
docs/structured-output.md.

    python3 bench/grammar/tpot_bench.py --llmrt build/bin/llmrt --plan q110.plan
"""
import argparse
import json
import re
import signal
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request

SCHEMA = {"type": "object",
          "properties": {"title": {"type": "string"}, "year": {"type": "integer"},
                         "notes": {"type": "array", "items": {"type": "string"},
                                   "minItems": 100}},
          "required": ["title", "year", "notes"], "additionalProperties": False}


def stream_one(url, body, results):
    request = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    times = []
    with urllib.request.urlopen(request, timeout=600) as response:
        for line in response:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk["choices"] and chunk["choices"][0]["text"]:
                times.append(time.monotonic())
    if len(times) > 2:
        results.append(((times[-1] - times[0]) / (len(times) - 1), len(times)))


def engine_seconds(url):
    """The engine's cumulative step, model and sample seconds and steps, from /metrics."""
    with urllib.request.urlopen(url + "/metrics") as response:
        text = response.read().decode()
    values = {}
    for name in ("engine_step_seconds_total", "engine_model_seconds_total",
                 "engine_sample_seconds_total", "engine_steps_total"):
        match = re.search(r"^llmrt:%s\{[^}]*\} ([0-9.e+-]+)$" % name, text, re.M)
        values[name] = float(match.group(1))
    return values


def round_of(url, concurrency, body):
    results, threads = [], []
    for i in range(concurrency):
        request_body = dict(body, seed=i)
        thread = threading.Thread(target=stream_one, args=(url, request_body, results))
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--llmrt", required=True)
    parser.add_argument("--plan", required=True)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    err = tempfile.NamedTemporaryFile("w+", suffix=".err")
    server = subprocess.Popen([args.llmrt, "serve", args.plan, "--port", "0"],
                              stdout=subprocess.DEVNULL, stderr=err)
    try:
        port = None
        while port is None:
            time.sleep(0.1)
            err.seek(0)
            match = re.search(r"listening on http://[0-9.]+:([0-9]+)", err.read())
            if match:
                port = int(match.group(1))
            elif server.poll() is not None:
                raise SystemExit("llmrt serve failed: " + open(err.name).read())
        url = "http://127.0.0.1:%d" % port
        base = {"prompt": "Once upon a time", "max_tokens": args.max_tokens, "stream": True,
                "temperature": 1.0}
        modes = {
            "unconstrained": dict(base, ignore_eos=True),
            "json_schema": dict(base, response_format={
                "type": "json_schema", "json_schema": {"name": "b", "schema": SCHEMA}}),
        }
        round_of(url, args.concurrency, modes["json_schema"])  # compile + warm the caches
        tpot = {mode: [] for mode in modes}
        # Engine time per step by phase: the model does not depend on the mode, so the sample
        # phase (masks, matchers and the sampler) shows the constraint's own cost even when
        # other load on the machine moves the TPOT.
        phases = {mode: {} for mode in modes}
        for _ in range(args.rounds):
            for mode, body in modes.items():
                before = engine_seconds(url)
                tpot[mode] += round_of(url, args.concurrency, body)
                after = engine_seconds(url)
                for name, value in after.items():
                    phases[mode][name] = phases[mode].get(name, 0.0) + value - before[name]
        medians = {mode: statistics.median(v[0] for v in values) * 1000
                   for mode, values in tpot.items()}
        for mode, value in medians.items():
            print("%-14s TPOT median %.2f ms over %d requests, %.1f chunks each" %
                  (mode, value, len(tpot[mode]), statistics.mean(v[1] for v in tpot[mode])))
        print("overhead %.1f%%" % (100 * (medians["json_schema"] / medians["unconstrained"] - 1)))
        for mode, values in phases.items():
            steps = values["engine_steps_total"]
            print("%-14s per engine step: %.2f ms (model %.2f ms, sample %.2f ms), %d steps" %
                  (mode, 1000 * values["engine_step_seconds_total"] / steps,
                   1000 * values["engine_model_seconds_total"] / steps,
                   1000 * values["engine_sample_seconds_total"] / steps, steps))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)


if __name__ == "__main__":
    main()
