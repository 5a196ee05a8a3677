#!/usr/bin/env python3
"""32 agent conversations at once against one `llmrt serve` (not timed): each, on its own
thread with the OpenAI SDK, sends tools with tool_choice "required", streams the reply, checks
every call (name offered, arguments valid for the tool's JSON schema with Python `jsonschema`),
sends the tool results back and streams a second forced turn. All 32 must finish with 0
failures and 0 invalid calls, and afterwards /metrics must show nothing running or waiting and
no KV-cache block in use.

The plan is a random-walk Qwen3 (make_agent_model.py; real tokenizer and chat template): what
the model would write is never allowed, so every call is what the grammar let it sample. The
same runs again with gpt-oss's tokenizer and harmony template (HarmonyAgents).

    python3 agents_test.py --llmc build/bin/llmc --llmrt build/bin/llmrt
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

import jsonschema
import openai

import make_agent_model
from sdk_harness import ServerProcess, run_tests

ARGS = None
AGENTS = 32

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                      "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 8},
                       "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "search", "description": "Search",
                                      "parameters": {
        "type": "object",
        "properties": {"query": {"type": "string", "maxLength": 12},
                       "limit": {"type": "integer", "minimum": 1, "maximum": 10}},
        "required": ["query"], "additionalProperties": False}}},
]
SCHEMAS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}


def metric(text, name):
    values = [float(m.group(1)) for m in
              re.finditer(r"^%s\{[^}]*\} ([0-9.e+-]+)$" % re.escape(name), text, re.M)]
    if not values:
        raise AssertionError("metric %s not in /metrics" % name)
    return values[0]


class Agents(unittest.TestCase):
    FAMILY = "qwen3"
    CALL_TURN_CONTENT = None  # the assistant turn with the calls, as the SDK's clients send it

    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="llmrt-agents-")
        model = os.path.join(cls.work, "model")
        make_agent_model.make(ARGS.llmc, cls.FAMILY, model, ["Sorry, no tools today."])
        plan = os.path.join(cls.work, "agents.plan")
        subprocess.run([ARGS.llmc, "compile", model, "-o", plan, "--quiet"], check=True,
                       stdout=subprocess.DEVNULL)
        cls.server = ServerProcess(ARGS.llmrt, plan, cls.work, "agents", "--max-seqs", "32")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.work, ignore_errors=True)

    def stream_turn(self, client, messages, seed):
        """One streamed forced turn: the assistant message with its calls."""
        calls, finish = {}, None
        for chunk in client.chat.completions.create(
                model="agents", messages=messages, tools=TOOLS, tool_choice="required",
                stream=True, seed=seed, max_tokens=300):
            for choice in chunk.choices:
                for delta in choice.delta.tool_calls or []:
                    entry = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                    entry["id"] += delta.id or ""
                    entry["name"] += delta.function.name or ""
                    entry["arguments"] += delta.function.arguments or ""
                finish = choice.finish_reason or finish
        if finish != "tool_calls":
            raise AssertionError("finish_reason %r" % finish)
        return [calls[index] for index in sorted(calls)]

    def invalid_calls(self, calls):
        invalid = 0
        for call in calls:
            try:
                jsonschema.validate(json.loads(call["arguments"]), SCHEMAS[call["name"]])
            except (KeyError, ValueError, jsonschema.ValidationError):
                invalid += 1
        return invalid + (0 if calls else 1)

    def test_32_conversations(self):
        failures, invalid = [], [0]
        lock = threading.Lock()
        barrier = threading.Barrier(AGENTS)

        def agent(index):
            turn = 0
            try:
                client = openai.OpenAI(base_url=self.server.url + "/v1", api_key="unused",
                                       max_retries=0, timeout=600)
                messages = [{"role": "user", "content": "Agent %d: weather and news?" % index}]
                barrier.wait()
                turn = 1
                calls = self.stream_turn(client, messages, seed=index)
                bad = self.invalid_calls(calls)
                messages.append({"role": "assistant", "content": self.CALL_TURN_CONTENT,
                                 "tool_calls": [
                    {"id": c["id"], "type": "function",
                     "function": {"name": c["name"], "arguments": c["arguments"]}}
                    for c in calls]})
                for call in calls:
                    messages.append({"role": "tool", "tool_call_id": call["id"],
                                     "content": json.dumps({"ok": True, "agent": index})})
                turn = 2
                second = self.stream_turn(client, messages, seed=1000 + index)
                bad += self.invalid_calls(second)
                with lock:
                    invalid[0] += bad
            except Exception as error:  # every failure is counted and reported below
                with lock:
                    failures.append("agent %d, turn %d: %r (cause %r)" %
                                    (index, turn, error, error.__cause__))

        # The SDK builds its pydantic response models on first use, and 32 threads doing it at once
        # can meet a half-built one (PydanticUserError "Pydantic models should inherit from
        # BaseModel"): one streamed turn here builds them before the agents start.
        warm_up = openai.OpenAI(base_url=self.server.url + "/v1", api_key="unused", max_retries=0,
                                timeout=600)
        self.stream_turn(warm_up, [{"role": "user", "content": "Warm-up: weather?"}], seed=5000)
        threads = [threading.Thread(target=agent, args=(i,)) for i in range(AGENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual(failures, [])
        self.assertEqual(invalid[0], 0)

        # Every sequence has ended and given its blocks back (the handlers finish writing a
        # moment after the engine; allow a second).
        deadline = time.monotonic() + 10
        while True:
            with urllib.request.urlopen(self.server.url + "/metrics") as response:
                text = response.read().decode()
            idle = (metric(text, "llmrt:num_requests_running"),
                    metric(text, "llmrt:num_requests_waiting"),
                    metric(text, "llmrt:kv_cache_usage_perc"))
            if idle == (0, 0, 0) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.assertEqual(idle, (0, 0, 0))


class HarmonyAgents(Agents):
    """gpt-oss's harmony format: calls are commentary messages ended by <|call|>, an EOS id.
    Its template refuses an assistant turn with content null (docs/server.md, Harmony)."""
    FAMILY = "gpt_oss"
    CALL_TURN_CONTENT = ""


if __name__ == "__main__":
    run_tests(sys.modules[__name__])
