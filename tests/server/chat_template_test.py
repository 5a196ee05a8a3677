#!/usr/bin/env python3
"""The server renders chat requests with the plan's templates as transformers does: the
`tool_use` named template when the request has tools (Hermes-3's pair of templates), the
template the request's `chat_template` names, and tool-call `arguments` sent as a JSON string
turned into an object first (as vLLM does; templates write `arguments | tojson`). Checked
against transformers' own renderer (jinja2 in apply_chat_template's environment) on the real
templates in ../shared/tokenizers: Hermes-3, Qwen3, Llama 3.1, and gpt-oss's harmony template
(system and developer messages, reasoning in the history as `thinking`, a call and its result,
`reasoning_effort`). The server's prompt is read back with /tokenize and /detokenize.

    python3 chat_template_test.py --llmc build/bin/llmc --llmrt build/bin/llmrt
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

from transformers.utils.chat_template_utils import _normalize_chat_messages, render_jinja_template

import make_agent_model
from sdk_harness import ServerProcess, run_tests

SHARED = make_agent_model.SHARED
ARGS = None
WORK = None
SERVERS = {}
TEMPLATES = {}  # plan name: {template name: source}
SPECIAL = {}    # plan name: {"bos_token": ..., "eos_token": ...} as transformers passes them

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "days": {"type": "integer"}},
                   "required": ["city"]}}}]
# The arguments as a client sends them back: a JSON string, here without json.dumps' spaces, so
# a template that wrote the string as is would differ from one given the object.
CONVERSATION = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Weather in Paris for 2 days?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city":"Paris","days":2}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
]


# gpt-oss's template describes every tool (`tool.description` is required) and reads an
# assistant call turn's analysis from `thinking` (the server passes reasoning_content so, as
# transformers does); it tests `"..." in message.content`, so content null is an error there
# (jinja2's TypeError) and a call turn carries "".
HARMONY_CONVERSATION = [
    {"role": "developer", "content": "Answer briefly."},
    {"role": "user", "content": "Weather in Paris for 2 days?"},
    {"role": "assistant", "content": "", "reasoning_content": "Need the forecast tool.",
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "get_weather",
                                  "arguments": '{"city":"Paris","days":2}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
]
# The turn answered: the template drops the analysis of every earlier turn.
HARMONY_ANSWERED = HARMONY_CONVERSATION + [
    {"role": "assistant", "content": "Sunny in Paris.", "reasoning_content": "Dropped."},
    {"role": "user", "content": "And tomorrow?"},
]


def with_object_arguments(messages):
    converted = json.loads(json.dumps(messages))
    for message in converted:
        for call in message.get("tool_calls") or []:
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    return converted


def make_plan(name, family, templates, chat_template_file=None):
    """templates: {name: source} written into tokenizer_config.json as transformers' list form
    (None: keep the tokenizer's own)."""
    model = os.path.join(WORK, name)
    make_agent_model.make(ARGS.llmc, family, model, ["<unused reply>"], chat_template_file)
    config_path = os.path.join(model, "tokenizer_config.json")
    with open(config_path) as f:
        config = json.load(f)
    if templates is not None:
        config["chat_template"] = [{"name": n, "template": t} for n, t in templates.items()]
        with open(config_path, "w") as f:
            json.dump(config, f)
    elif chat_template_file:
        with open(chat_template_file) as f:
            templates = {"default": f.read()}
    else:
        templates = {"default": config["chat_template"]}
    TEMPLATES[name] = templates

    def token(value):
        return value.get("content") if isinstance(value, dict) else value
    SPECIAL[name] = {key: token(config[key]) for key in ("bos_token", "eos_token")
                     if config.get(key) is not None}
    plan = os.path.join(WORK, name + ".plan")
    subprocess.run([ARGS.llmc, "compile", model, "-o", plan, "--quiet"], check=True,
                   stdout=subprocess.DEVNULL)
    SERVERS[name] = ServerProcess(ARGS.llmrt, plan, WORK, name)


def setUpModule():
    global WORK
    WORK = tempfile.mkdtemp(prefix="llmrt-chat-template-")
    with open(os.path.join(SHARED, "qwen2", "tokenizer_config.json")) as f:
        chatml = json.load(f)["chat_template"]
    with open(os.path.join(SHARED, "hermes3", "chat_template.tool_use.jinja")) as f:
        hermes_tool_use = f.read()
    # Hermes-3 ships a default (ChatML) template and a tool_use one; Qwen2.5's tokenizer stands
    # in for its own (both ChatML).
    make_plan("hermes3", "qwen2", {"default": chatml, "tool_use": hermes_tool_use})
    make_plan("qwen3", "qwen3", None)
    make_plan("llama31", "llama3", None, os.path.join(
        SHARED, "llama3", "more", "chat_template.Llama-3.1-8B-Instruct.jinja"))
    make_plan("gpt_oss", "gpt_oss", None, os.path.join(SHARED, "gpt-oss", "chat_template.jinja"))


def tearDownModule():
    for server in SERVERS.values():
        server.stop()
    shutil.rmtree(WORK, ignore_errors=True)


def post(name, path, body):
    request = urllib.request.Request(SERVERS[name].url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request) as response:
            return 200, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def server_prompt(name, **fields):
    status, tokens = post(name, "/tokenize", fields)
    if status != 200:
        raise AssertionError(tokens)
    status, text = post(name, "/detokenize", {"tokens": tokens["tokens"]})
    return text["prompt"]


def reference(name, template, messages, tools, **variables):
    # apply_chat_template's first step drops None-valued message keys; then it renders.
    return render_jinja_template(conversations=[_normalize_chat_messages(messages)], tools=tools,
                                 chat_template=TEMPLATES[name][template],
                                 add_generation_prompt=True, **SPECIAL[name], **variables)[0][0]


class Rendering(unittest.TestCase):
    def test_tool_use_template_is_picked_with_tools(self):
        expected = reference("hermes3", "tool_use", with_object_arguments(CONVERSATION), TOOLS)
        self.assertIn("<tools>", expected)
        self.assertEqual(server_prompt("hermes3", messages=CONVERSATION, tools=TOOLS), expected)
        # Without tools (and with tool_choice none, which does not render them): the default.
        plain = CONVERSATION[:2]
        self.assertEqual(server_prompt("hermes3", messages=plain),
                         reference("hermes3", "default", plain, None))
        self.assertEqual(server_prompt("hermes3", messages=plain, tools=TOOLS,
                                       tool_choice="none"),
                         reference("hermes3", "default", plain, None))

    def test_chat_template_names_one(self):
        self.assertEqual(
            server_prompt("hermes3", messages=CONVERSATION, tools=TOOLS, chat_template="tool_use"),
            reference("hermes3", "tool_use", with_object_arguments(CONVERSATION), TOOLS))
        self.assertEqual(
            server_prompt("hermes3", messages=CONVERSATION, tools=TOOLS, chat_template="default"),
            reference("hermes3", "default", with_object_arguments(CONVERSATION), TOOLS))

    def test_chat_template_refusals(self):
        status, body = post("hermes3", "/v1/chat/completions",
                            {"messages": CONVERSATION[:2], "chat_template": "fancy"})
        self.assertEqual(status, 400)
        self.assertIn("'chat_template'", body["error"]["message"])
        self.assertIn("default, tool_use", body["error"]["message"])
        status, body = post("hermes3", "/v1/chat/completions",
                            {"messages": CONVERSATION[:2],
                             "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"})
        self.assertEqual(status, 400)
        self.assertIn("not template text", body["error"]["message"])
        status, body = post("hermes3", "/v1/chat/completions",
                            {"messages": CONVERSATION[:2], "chat_template": 3})
        self.assertEqual(status, 400)
        self.assertIn("'chat_template'", body["error"]["message"])

    def test_string_arguments_render_as_objects(self):
        for name in ("hermes3", "qwen3", "llama31"):
            with self.subTest(plan=name):
                template = "tool_use" if "tool_use" in TEMPLATES[name] else "default"
                expected = reference(name, template, with_object_arguments(CONVERSATION), TOOLS)
                self.assertIn('"city": "Paris"', expected)
                self.assertEqual(server_prompt(name, messages=CONVERSATION, tools=TOOLS),
                                 expected)


class Harmony(unittest.TestCase):
    def test_harmony_conversations_render_as_transformers(self):
        tools = json.loads(json.dumps(TOOLS))
        expected = reference("gpt_oss", "default", with_object_arguments(HARMONY_CONVERSATION),
                             tools)
        # What the comparison covers: the analysis of the call turn, the call, its result.
        for part in ("<|start|>developer<|message|># Instructions\n\nAnswer briefly.",
                     "<|channel|>analysis<|message|>Need the forecast tool.<|end|>",
                     "<|start|>assistant to=functions.get_weather<|channel|>commentary json"
                     "<|message|>{\"city\": \"Paris\", \"days\": 2}<|call|>",
                     "<|start|>functions.get_weather to=assistant<|channel|>commentary"
                     "<|message|>\"sunny\"<|end|>", "Reasoning: medium"):
            self.assertIn(part, expected)
        self.assertEqual(server_prompt("gpt_oss", messages=HARMONY_CONVERSATION, tools=tools),
                         expected)
        expected = reference("gpt_oss", "default", with_object_arguments(HARMONY_ANSWERED), tools)
        self.assertIn("<|channel|>final<|message|>Sunny in Paris.<|end|>", expected)
        self.assertNotIn("Need the forecast tool.", expected)
        self.assertNotIn("Dropped.", expected)
        self.assertEqual(server_prompt("gpt_oss", messages=HARMONY_ANSWERED, tools=tools),
                         expected)
        # A system message, no tools, and reasoning_effort (the template variable).
        plain = [{"role": "system", "content": "Be terse."},
                 {"role": "user", "content": "Hi"},
                 {"role": "assistant", "content": "Hello.", "thinking": "Greet back."},
                 {"role": "user", "content": "Bye"}]
        for effort in ("low", "high"):
            expected = reference("gpt_oss", "default", plain, None, reasoning_effort=effort)
            self.assertIn("Reasoning: %s" % effort, expected)
            self.assertEqual(server_prompt("gpt_oss", messages=plain, reasoning_effort=effort),
                             expected)

    def test_null_content_beside_calls_renders_as_in_transformers(self):
        # OpenAI clients send "content": null on a turn of calls; apply_chat_template drops the
        # key (gpt-oss's `"..." in message.content` failed on None before transformers 5).
        messages = json.loads(json.dumps(HARMONY_CONVERSATION))
        messages[2]["content"] = None
        expected = reference("gpt_oss", "default", with_object_arguments(messages), TOOLS)
        self.assertEqual(server_prompt("gpt_oss", messages=messages, tools=TOOLS), expected)


if __name__ == "__main__":
    run_tests(sys.modules[__name__])
