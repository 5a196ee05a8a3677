#!/usr/bin/env python3
"""Forced tool calls end to end: `llmrt serve` on random-walk plans with real tokenizers and chat
templates (make_agent_model.py: the model's own choice is never allowed by the grammar, so it
samples uniformly among what the grammar allows -- the weakest model there is) must answer
tool_choice "required", a named function and parallel_tool_calls false with calls that the
OpenAI SDK reads, whose names are the offered tools' and whose arguments validate with Python
`jsonschema` against the tool's parameters -- for each tool-call format a real tokenizer here
has (hermes: Qwen3 and Qwen2.5; llama3_json: Llama 3.1; phi4_mini: Phi-4-mini; harmony:
gpt-oss), streamed and not, n > 1, several seeds; also Anthropic's tool_choice any / tool with
disable_parallel_tool_use and the Responses API's named function. Mistral's and DeepSeek's
formats, whose tokenizers are not in ../shared/tokenizers, are covered by the grammar walk of
runtime/server/tool_grammar_test.cc.

    python3 tool_choice_test.py --llmc build/bin/llmc --llmrt build/bin/llmrt
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

import jsonschema
import openai

import make_agent_model
from sdk_harness import ServerProcess, run_tests

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = make_agent_model.SHARED
ARGS = None
WORK = None
SERVERS = {}

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 8},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "hourly": {"type": "boolean"},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
ROUTE = {
    "type": "object",
    "properties": {
        "stops": {"type": "array", "items": {"type": "string", "maxLength": 4},
                  "minItems": 1, "maxItems": 3},
        "mode": {"anyOf": [{"const": "walk"}, {"type": "null"}]},
    },
    "required": ["stops", "mode"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                      "parameters": WEATHER}},
    {"type": "function", "function": {"name": "plan_route", "description": "A route",
                                      "parameters": ROUTE}},
    {"type": "function", "function": {"name": "now", "description": "The time; no arguments"}},
]
SCHEMAS = {"get_weather": WEATHER, "plan_route": ROUTE,
           "now": {"type": "object", "additionalProperties": False}}
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


def compile_plan(family, name, chat_template=None):
    model = os.path.join(WORK, name)
    # One reply piece the grammar never allows at the start: the model's own pick is masked,
    # and it samples uniformly among the tokens the grammar allows.
    make_agent_model.make(ARGS.llmc, family, model, ["Sorry, no tools today."], chat_template)
    plan = os.path.join(WORK, name + ".plan")
    subprocess.run([ARGS.llmc, "compile", model, "-o", plan, "--quiet"], check=True,
                   stdout=subprocess.DEVNULL)
    return plan


def extract_template(config_path, name):
    with open(config_path) as f:
        template = json.load(f)["chat_template"]
    path = os.path.join(WORK, name + ".jinja")
    with open(path, "w") as f:
        f.write(template)
    return path


# name: (family, chat template or None). llmc records the tool-call format from the template
# (hermes, hermes, llama3_json, phi4_mini, harmony); a plan without one would answer 400 below.
# gpt-oss's template needs every tool's description (TOOLS have one).
PLANS = {
    "qwen3": ("qwen3", None),
    "qwen2": ("qwen2", None),
    "llama31": ("llama3", os.path.join(SHARED, "llama3", "more",
                                       "chat_template.Llama-3.1-8B-Instruct.jinja")),
    "phi4": ("phi4", None),
    "gpt_oss": ("gpt_oss", None),
}


def setUpModule():
    global WORK
    WORK = tempfile.mkdtemp(prefix="llmrt-tool-choice-")
    plans = dict(PLANS)
    # Qwen3-Thinking's generation prompt opens <think>: the forced call must close it first.
    plans["qwen3_thinking"] = ("qwen3", extract_template(
        os.path.join(SHARED, "qwen3", "tokenizer_config.qwen3-thinking-2507.json"),
        "qwen3-thinking"))
    for name, (family, template) in plans.items():
        plan = compile_plan(family, name, template)
        SERVERS[name] = ServerProcess(ARGS.llmrt, plan, WORK, name, "--max-seqs", "8")


def tearDownModule():
    for server in SERVERS.values():
        server.stop()
    shutil.rmtree(WORK, ignore_errors=True)


def client(name):
    return openai.OpenAI(base_url=SERVERS[name].url + "/v1", api_key="unused", max_retries=0)


class ForcedCalls(unittest.TestCase):
    def check_calls(self, calls, function=None, parallel=True):
        """calls: [(name, arguments text)]."""
        self.assertGreaterEqual(len(calls), 1)
        if not parallel:
            self.assertEqual(len(calls), 1)
        for name, arguments in calls:
            if function:
                self.assertEqual(name, function)
            self.assertIn(name, SCHEMAS)
            jsonschema.validate(json.loads(arguments), SCHEMAS[name])

    def request(self, name, tool_choice, parallel, seed, stream):
        extra = {} if parallel else {"parallel_tool_calls": False}
        kwargs = dict(model=name, messages=MESSAGES, tools=TOOLS, tool_choice=tool_choice, n=2,
                      seed=seed, temperature=1.0, max_tokens=400, **extra)
        if not stream:
            response = client(name).chat.completions.create(**kwargs)
            results = []
            for choice in response.choices:
                self.assertEqual(choice.finish_reason, "tool_calls", choice)
                self.assertFalse(choice.message.content)
                results.append([(c.function.name, c.function.arguments)
                                for c in choice.message.tool_calls])
                for call in choice.message.tool_calls:
                    self.assertTrue(call.id)
            return results
        calls = {0: {}, 1: {}}
        finish = {}
        content = {0: "", 1: ""}
        for chunk in client(name).chat.completions.create(stream=True, **kwargs):
            for choice in chunk.choices:
                content[choice.index] += choice.delta.content or ""
                for delta in choice.delta.tool_calls or []:
                    entry = calls[choice.index].setdefault(delta.index, ["", ""])
                    if delta.function.name:
                        entry[0] += delta.function.name
                    entry[1] += delta.function.arguments or ""
                if choice.finish_reason:
                    finish[choice.index] = choice.finish_reason
        self.assertEqual(finish, {0: "tool_calls", 1: "tool_calls"})
        self.assertEqual(content, {0: "", 1: ""})
        return [[tuple(calls[i][k]) for k in sorted(calls[i])] for i in (0, 1)]

    def test_every_format_streamed_and_not_n2_seeds(self):
        named = {"type": "function", "function": {"name": "plan_route"}}
        for name in SERVERS:
            for tool_choice, function in (("required", None), (named, "plan_route")):
                for parallel in (True, False):
                    for seed in (1, 2):
                        with self.subTest(plan=name, tool_choice=str(tool_choice),
                                          parallel=parallel, seed=seed):
                            plain = self.request(name, tool_choice, parallel, seed, False)
                            streamed = self.request(name, tool_choice, parallel, seed, True)
                            for calls in plain + streamed:
                                self.check_calls(calls, function, parallel)
                            # A seed fixes the sampled calls, streamed or not.
                            self.assertEqual(plain, streamed)

    def test_thinking_template_closes_the_open_think_first(self):
        response = client("qwen3_thinking").chat.completions.create(
            model="qwen3_thinking", messages=MESSAGES, tools=TOOLS, tool_choice="required",
            seed=3, max_tokens=400)
        message = response.choices[0].message
        self.assertEqual(response.choices[0].finish_reason, "tool_calls")
        self.assertFalse(getattr(message, "reasoning_content", None))
        self.check_calls([(c.function.name, c.function.arguments) for c in message.tool_calls])

    def test_anthropic_any_and_tool(self):
        tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
                  "input_schema": t["function"].get("parameters", {"type": "object"})}
                 for t in TOOLS]
        for (choice, function), name in [(case, name) for case in (
                ({"type": "any"}, None),
                ({"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
                 "get_weather")) for name in ("qwen3", "gpt_oss")]:
            body = {"model": name, "max_tokens": 400, "tools": tools, "tool_choice": choice,
                    "messages": MESSAGES}
            request = urllib.request.Request(
                SERVERS[name].url + "/v1/messages", data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json", "anthropic-version": "2023-06-01"})
            with urllib.request.urlopen(request) as response:
                reply = json.load(response)
            self.assertEqual(reply["stop_reason"], "tool_use")
            uses = [block for block in reply["content"] if block["type"] == "tool_use"]
            self.check_calls([(u["name"], json.dumps(u["input"])) for u in uses], function,
                             parallel=function is None)

    def test_responses_named_function(self):
        tools = [{"type": "function", "name": "get_weather", "description": "Weather",
                  "parameters": WEATHER}]
        for name in ("qwen2", "gpt_oss"):
            response = client(name).responses.create(
                model=name, input="Weather?", tools=tools,
                tool_choice={"type": "function", "name": "get_weather"},
                parallel_tool_calls=False, max_output_tokens=400)
            calls = [item for item in response.output if item.type == "function_call"]
            self.check_calls([(c.name, c.arguments) for c in calls], "get_weather",
                             parallel=False)
            self.assertEqual(response.parallel_tool_calls, False)

    def test_refusals_name_the_field(self):
        def refused(part, **kwargs):
            with self.assertRaises(openai.BadRequestError) as raised:
                client("qwen2").chat.completions.create(model="qwen2", messages=MESSAGES,
                                                        max_tokens=5, **kwargs)
            self.assertIn(part, str(raised.exception))

        unenforceable = [{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"x": {"type": "string", "not": {"const": "a"}}}}}}]
        refused("'not'", tools=unenforceable, tool_choice="required")
        refused("tools[0].function.parameters", tools=unenforceable, tool_choice="required")
        refused("'nope'", tools=TOOLS,
                tool_choice={"type": "function", "function": {"name": "nope"}})
        refused("response_format", tools=TOOLS, tool_choice="required",
                response_format={"type": "json_object"})
        refused("parallel_tool_calls", tools=TOOLS, parallel_tool_calls=False)
        # auto does not convert schemas: a tool it cannot enforce is still offered.
        response = client("qwen2").chat.completions.create(
            model="qwen2", messages=MESSAGES, tools=unenforceable, max_tokens=3)
        self.assertEqual(len(response.choices), 1)


if __name__ == "__main__":
    run_tests(sys.modules[__name__])
