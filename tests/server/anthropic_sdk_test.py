#!/usr/bin/env python3
"""`llmrt serve`'s Anthropic Messages API driven by the official Anthropic Python SDK.

Serves the scripted Qwen3 plan of sdk_harness.agent_plan (real Qwen3 tokenizer and chat
template; every reply is a <think> block, "Let me check." and two tool calls) and checks
messages.create / messages.stream / messages.count_tokens: system prompts, multi-turn with
tool_use and tool_result blocks, thinking / text / tool_use content blocks, every stop_reason,
usage, and errors as the SDK's exception types.

    python3 anthropic_sdk_test.py --llmc build/bin/llmc --llmrt build/bin/llmrt

Needs `pip install anthropic` (scripts/install-deps.sh installs it). Without it the test is
skipped (exit 77, which ctest reports as skipped) and says why.
"""
import argparse
import json
import shutil
import sys
import tempfile
import unittest

try:
    import anthropic
except ImportError:
    print("anthropic_sdk_test: SKIPPED: the Anthropic Python SDK is not importable; run "
          "`pip install anthropic` (scripts/install-deps.sh does) to run this test.")
    sys.exit(77)

import sdk_harness

ARGS = None
WORK = None
TOOLS = [
    {"name": "get_weather", "description": "Current weather in a city",
     "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                      "required": ["city"]}},
    {"name": "get_time", "description": "Current time in a zone",
     "input_schema": {"type": "object", "properties": {"zone": {"type": "string"}}}},
]
ASK = [{"role": "user", "content": "What is the weather in Paris, and the time?"}]
EXPECTED_CALLS = [("get_weather", {"city": "Paris"}), ("get_time", {"zone": "CET"})]


class AnthropicSdkTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        global WORK
        WORK = tempfile.mkdtemp(prefix="llmrt-anthropic-sdk-")
        cls.plan = sdk_harness.agent_plan(ARGS.llmc, WORK)
        cls.server = sdk_harness.ServerProcess(ARGS.llmrt, cls.plan, WORK, "agent")
        cls.client = cls.client_for(cls.server)

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0
        shutil.rmtree(WORK, ignore_errors=True)

    @staticmethod
    def client_for(server, api_key="unused"):
        # max_retries=0: the SDK retries 429 and 5xx by default, which would hide them.
        return anthropic.Anthropic(base_url=server.url, api_key=api_key, max_retries=0,
                                   timeout=120)

    def check_message(self, message):
        self.assertEqual(message.type, "message")
        self.assertEqual(message.role, "assistant")
        self.assertEqual(message.model, "agent")
        self.assertEqual([block.type for block in message.content],
                         ["thinking", "text", "tool_use", "tool_use"])
        self.assertEqual(message.content[0].thinking, "I should check the weather.\n")
        self.assertEqual(message.content[1].text, "Let me check.")
        calls = message.content[2:]
        self.assertEqual([(c.name, c.input) for c in calls], EXPECTED_CALLS)
        self.assertEqual(len({c.id for c in calls}), 2)
        self.assertEqual(message.stop_reason, "tool_use")
        self.assertIsNone(message.stop_sequence)
        self.assertEqual(message.usage.output_tokens, 5)  # 4 pieces and the end of turn

    def test_create_with_system_and_tools(self):
        message = self.client.messages.create(model="agent", max_tokens=64, system="Be brief.",
                                              messages=ASK, tools=TOOLS)
        self.check_message(message)
        counted = self.client.messages.count_tokens(model="agent", system="Be brief.",
                                                    messages=ASK, tools=TOOLS)
        self.assertEqual(counted.input_tokens, message.usage.input_tokens)
        without_system = self.client.messages.count_tokens(model="agent", messages=ASK,
                                                           tools=TOOLS)
        self.assertLess(without_system.input_tokens, counted.input_tokens)

    def test_stream_events_accumulate_to_the_same_message(self):
        with self.client.messages.stream(model="agent", max_tokens=64, messages=ASK,
                                         tools=TOOLS) as stream:
            events = list(stream)
            final = stream.get_final_message()
        self.check_message(final)
        kinds = [event.type for event in events]
        self.assertEqual(kinds[0], "message_start")
        self.assertEqual(kinds[-1], "message_stop")
        self.assertEqual(kinds.count("content_block_start"), 4)
        self.assertEqual(kinds.count("content_block_stop"), 4)
        deltas = [e.delta.type for e in events if e.type == "content_block_delta"]
        self.assertEqual(deltas, ["thinking_delta", "text_delta", "input_json_delta",
                                  "input_json_delta"])
        start = next(e for e in events if e.type == "message_start")
        self.assertEqual(start.message.usage.input_tokens, final.usage.input_tokens)

    def test_multi_turn_with_tool_results(self):
        first = self.client.messages.create(model="agent", max_tokens=64, messages=ASK,
                                            tools=TOOLS)
        calls = [block for block in first.content if block.type == "tool_use"]
        history = ASK + [
            {"role": "assistant", "content": [block.model_dump(exclude_none=True)
                                              for block in first.content
                                              if block.type != "thinking"]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": calls[0].id, "content": "sunny, 21 C"},
                {"type": "tool_result", "tool_use_id": calls[1].id,
                 "content": [{"type": "text", "text": "14:05"}]},
                {"type": "text", "text": "Thanks, and tomorrow?"}]},
        ]
        counted = self.client.messages.count_tokens(model="agent", messages=history, tools=TOOLS)
        second = self.client.messages.create(model="agent", max_tokens=64, messages=history,
                                             tools=TOOLS)
        self.check_message(second)
        self.assertEqual(second.usage.input_tokens, counted.input_tokens)
        self.assertGreater(counted.input_tokens, first.usage.input_tokens + 20)

    def test_stop_reasons(self):
        cut = self.client.messages.create(model="agent", max_tokens=2, messages=ASK, tools=TOOLS)
        self.assertEqual(cut.stop_reason, "max_tokens")
        self.assertEqual([b.type for b in cut.content], ["thinking", "text"])
        stopped = self.client.messages.create(model="agent", max_tokens=64, messages=ASK,
                                              stop_sequences=["me check"])
        self.assertEqual(stopped.stop_reason, "stop_sequence")
        self.assertEqual(stopped.stop_sequence, "me check")
        self.assertEqual(stopped.content[-1].text, "Let ")
        # Without tools the calls are text, and the turn ends normally.
        plain = self.client.messages.create(model="agent", max_tokens=64, messages=ASK)
        self.assertEqual(plain.stop_reason, "end_turn")
        self.assertIn("<tool_call>", plain.content[-1].text)
        # tool_choice none: the tools are not offered and nothing is parsed.
        none = self.client.messages.create(model="agent", max_tokens=64, messages=ASK,
                                           tools=TOOLS, tool_choice={"type": "none"})
        self.assertEqual(none.stop_reason, "end_turn")

    def test_errors_in_anthropic_shape(self):
        with self.assertRaises(anthropic.BadRequestError) as raised:
            self.client.messages.create(model="agent", max_tokens=8, messages=ASK, tools=TOOLS,
                                        tool_choice={"type": "tool", "name": "nope"})
        self.assertIn("tool_choice", str(raised.exception))
        self.assertEqual(raised.exception.body["type"], "error")
        self.assertEqual(raised.exception.body["error"]["type"], "invalid_request_error")
        # (This SDK version has no temperature argument; the API still documents [0, 1].)
        for extra, name in [({"extra_body": {"temperature": 1.5}}, "temperature"),
                            ({"metadata": {"user_id": "u"}}, "metadata"),
                            ({"thinking": {"type": "enabled", "budget_tokens": 1024}},
                             "thinking")]:
            with self.subTest(extra=extra):
                with self.assertRaises(anthropic.BadRequestError) as raised:
                    self.client.messages.create(model="agent", max_tokens=8, messages=ASK,
                                                **extra)
                self.assertIn(name, str(raised.exception))
        with self.assertRaises(anthropic.BadRequestError) as raised:
            self.client.messages.create(model="agent", max_tokens=8, messages=[
                {"role": "user", "content": [{"type": "image", "source": {
                    "type": "base64", "media_type": "image/png", "data": "AAAA"}}]}])
        self.assertIn("messages[0].content[0]", str(raised.exception))
        with self.assertRaises(anthropic.NotFoundError) as raised:
            self.client.messages.create(model="no-such-model", max_tokens=8, messages=ASK)
        self.assertEqual(raised.exception.body["error"]["type"], "not_found_error")

    def test_api_key_as_x_api_key(self):
        server = sdk_harness.ServerProcess(ARGS.llmrt, self.plan, WORK, "agent",
                                           "--api-key", "sekrit")
        try:
            with self.assertRaises(anthropic.AuthenticationError) as raised:
                self.client_for(server, "wrong").messages.create(model="agent", max_tokens=2,
                                                                 messages=ASK)
            self.assertEqual(raised.exception.body["error"]["type"], "authentication_error")
            message = self.client_for(server, "sekrit").messages.create(
                model="agent", max_tokens=2, messages=ASK)
            self.assertEqual(message.stop_reason, "max_tokens")
        finally:
            self.assertEqual(server.stop(), 0)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--llmc", required=True)
    parser.add_argument("--llmrt", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
