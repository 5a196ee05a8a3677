#!/usr/bin/env python3
"""Structured output end to end: `llmrt serve` on stories260K (a tiny byte-fallback model that
knows nothing about JSON) and on a random-weight plan with the real Qwen2 tokenizer (byte-level,
151,665 tokens; made with `llmc synth`) must return, for every schema of a suite, text that
parses and validates with Python `jsonschema` -- through the official OpenAI SDK, with n > 1,
seeds, streaming, both endpoints, and the grammar and regex forms; bad formats are 400s naming
the field.

    python3 structured_output_test.py --llmc build/bin/llmc --llmrt build/bin/llmrt \
        --model-dir tests/data/stories260K --qwen-tokenizer-dir ../shared/tokenizers/qwen2
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import jsonschema
import openai

ARGS = None
WORK = None
SERVER = None
QWEN_SERVER = None
# A random-weight Llama of Qwen2's vocabulary, small enough to compile in a second.
QWEN_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 151936,
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 4, "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True,
    "bos_token_id": 151643, "eos_token_id": 151645}

SCHEMAS = {
    "nested": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 8},
            "address": {
                "type": "object",
                "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 6},
                               "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["city", "zip"],
                "additionalProperties": False,
            },
        },
        "required": ["name", "address"],
        "additionalProperties": False,
    },
    "array_bounds": {"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 5},
                     "minItems": 2, "maxItems": 4},
    "enum_anyof": {
        "type": "object",
        "properties": {"color": {"enum": ["red", "green", None, 7]},
                       "value": {"anyOf": [{"type": "boolean"}, {"type": "null"},
                                           {"type": "integer", "minimum": 10, "maximum": 99}]}},
        "required": ["color", "value"],
        "additionalProperties": False,
    },
    "refs": {
        "$defs": {"node": {"type": "object",
                           "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 9},
                                          "next": {"anyOf": [{"$ref": "#/$defs/node"},
                                                             {"type": "null"}]}},
                           "required": ["id", "next"], "additionalProperties": False}},
        "$ref": "#/$defs/node",
    },
    "formats": {
        "type": "object",
        "properties": {"day": {"type": "string", "format": "date"},
                       "at": {"type": "string", "format": "date-time"},
                       "id": {"type": "string", "format": "uuid"}},
        "required": ["day", "at", "id"],
        "additionalProperties": False,
    },
}


class ServerProcess:
    def __init__(self, plan, name="stories"):
        self.err_path = os.path.join(WORK, name + ".err")
        self.err = open(self.err_path, "w")
        self.process = subprocess.Popen(
            [ARGS.llmrt, "serve", plan, "--port", "0", "--model-name", name],
            stdout=subprocess.DEVNULL, stderr=self.err)
        self.port = None
        deadline = time.monotonic() + 60
        while self.port is None and time.monotonic() < deadline:
            with open(self.err_path) as f:
                match = re.search(r"listening on http://[0-9.]+:([0-9]+)", f.read())
            if match:
                self.port = int(match.group(1))
            elif self.process.poll() is not None:
                break
            time.sleep(0.02)
        if self.port is None:
            self.process.kill()
            raise RuntimeError("llmrt serve did not start: " + open(self.err_path).read())

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=120)


def setUpModule():
    global WORK, SERVER
    WORK = tempfile.mkdtemp(prefix="llmrt-structured-")
    model = os.path.join(WORK, "model")
    shutil.copytree(ARGS.model_dir, model)
    with open(os.path.join(model, "chat_template.jinja"), "w") as f:
        f.write("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                "{% if add_generation_prompt %}assistant: {% endif %}")
    plan = os.path.join(WORK, "stories.plan")
    subprocess.run([ARGS.llmc, "compile", model, "-o", plan], check=True,
                   stdout=subprocess.DEVNULL)
    SERVER = ServerProcess(plan)
    global QWEN_SERVER
    config = os.path.join(WORK, "qwen-config.json")
    with open(config, "w") as f:
        json.dump(QWEN_CONFIG, f)
    qwen = os.path.join(WORK, "qwen")
    subprocess.run([ARGS.llmc, "synth", "--preset", config, "-o", qwen, "--seed", "3"],
                   check=True, stdout=subprocess.DEVNULL)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        os.remove(os.path.join(qwen, name))
    for name in ("vocab.json", "merges.txt", "added_tokens.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(ARGS.qwen_tokenizer_dir, name), qwen)
    with open(os.path.join(qwen, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 151643, "eos_token_id": [151645, 151643]}, f)
    qwen_plan = os.path.join(WORK, "qwen.plan")
    subprocess.run([ARGS.llmc, "compile", qwen, "-o", qwen_plan], check=True,
                   stdout=subprocess.DEVNULL)
    QWEN_SERVER = ServerProcess(qwen_plan, "qwen")


def tearDownModule():
    assert SERVER.stop() == 0
    assert QWEN_SERVER.stop() == 0
    shutil.rmtree(WORK, ignore_errors=True)


def client(server=None):
    return openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % (server or SERVER).port,
                         api_key="unused", max_retries=0, timeout=300)


class StructuredOutputTest(unittest.TestCase):
    def check(self, text, schema, finish_reason):
        self.assertEqual(finish_reason, "stop", text)
        jsonschema.validate(json.loads(text), schema)

    def test_schema_suite_completions_n_and_seed(self):
        for name, schema in SCHEMAS.items():
            with self.subTest(schema=name):
                fmt = {"type": "json_schema",
                       "json_schema": {"name": name, "schema": schema, "strict": True}}
                result = client().completions.create(
                    model="stories", prompt="Once upon a time", max_tokens=400, n=3, seed=5,
                    temperature=1.0, extra_body={"response_format": fmt})
                self.assertEqual(len(result.choices), 3)
                for choice in result.choices:
                    self.check(choice.text, schema, choice.finish_reason)
                again = client().completions.create(
                    model="stories", prompt="Once upon a time", max_tokens=400, n=3, seed=5,
                    temperature=1.0, extra_body={"response_format": fmt})
                self.assertEqual([c.text for c in again.choices],
                                 [c.text for c in result.choices])

    def test_schema_suite_random_qwen_model(self):
        # A random model over a 151k byte-level vocabulary: any token that fits may come, so
        # this exercises multi-byte characters split across tokens and long merged pieces.
        # (The recursive "refs" list is left out: a random model nests on and on.)
        for name, schema in SCHEMAS.items():
            if name == "refs":
                continue
            with self.subTest(schema=name):
                fmt = {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}
                result = client(QWEN_SERVER).completions.create(
                    model="qwen", prompt="Hello", max_tokens=1500, n=2, seed=9,
                    extra_body={"response_format": fmt})
                for choice in result.choices:
                    self.check(choice.text, schema, choice.finish_reason)

    def test_chat_streaming(self):
        schema = SCHEMAS["enum_anyof"]
        stream = client().chat.completions.create(
            model="stories", messages=[{"role": "user", "content": "Tell a story"}],
            max_tokens=400, n=2, seed=3, stream=True,
            response_format={"type": "json_schema",
                             "json_schema": {"name": "e", "schema": schema}})
        texts, reasons = {}, {}
        for chunk in stream:
            for choice in chunk.choices:
                texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
                if choice.finish_reason:
                    reasons[choice.index] = choice.finish_reason
        self.assertEqual(sorted(texts), [0, 1])
        for index, text in texts.items():
            self.check(text, schema, reasons[index])

    def test_responses_text_format(self):
        # The Responses API's text.format is response_format in that API's layout.
        for stream in (False, True):
            kwargs = dict(model="qwen", input="A person:", max_output_tokens=300, temperature=1.0,
                          text={"format": {"type": "json_schema", "name": "person",
                                           "schema": SCHEMAS["nested"], "strict": True}})
            if stream:
                with client(QWEN_SERVER).responses.stream(**kwargs) as events:
                    response = events.get_final_response()
            else:
                response = client(QWEN_SERVER).responses.create(**kwargs)
            self.assertEqual(response.status, "completed")
            jsonschema.validate(json.loads(response.output_text), SCHEMAS["nested"])
            self.assertEqual(response.text.format.type, "json_schema")

    def test_json_object(self):
        # A story model prefers ", " after every member and runs into max_tokens inside the
        # object (the schema suite above covers complete objects); what it writes must still be
        # an object's beginning, and any choice that ends must be a JSON object.
        result = client().chat.completions.create(
            model="stories", messages=[{"role": "user", "content": "Tell a story"}],
            max_tokens=60, n=4, seed=3, response_format={"type": "json_object"})
        for choice in result.choices:
            text = choice.message.content
            self.assertRegex(text, r'^\{("|\})', text)
            if choice.finish_reason == "stop":
                self.assertIsInstance(json.loads(text), dict)

    def test_grammar_and_regex_forms(self):
        grammar = 'root ::= "Answer: " ("yes" | "no") "!"'
        result = client().completions.create(
            model="stories", prompt="Once", max_tokens=50, n=4, seed=1,
            extra_body={"response_format": {"type": "grammar", "grammar": grammar}})
        for choice in result.choices:
            self.assertIn(choice.text, ["Answer: yes!", "Answer: no!"])
        result = client().completions.create(
            model="stories", prompt="Once", max_tokens=50, n=4, seed=2,
            extra_body={"response_format": {"type": "regex", "regex": "[a-c]{3}-\\d{2}"}})
        for choice in result.choices:
            self.assertRegex(choice.text, r"^[a-c]{3}-\d{2}$")

    def test_max_tokens_cut_is_length(self):
        result = client().completions.create(
            model="stories", prompt="Once", max_tokens=3,
            extra_body={"response_format": {"type": "json_schema", "json_schema": {
                "name": "n", "schema": SCHEMAS["formats"]}}})
        self.assertEqual(result.choices[0].finish_reason, "length")

    def test_unsupported_keyword_is_400_naming_it(self):
        with self.assertRaises(openai.BadRequestError) as raised:
            client().completions.create(
                model="stories", prompt="Once", max_tokens=5,
                extra_body={"response_format": {"type": "json_schema", "json_schema": {
                    "name": "x", "schema": {"type": "array", "uniqueItems": True}}}})
        self.assertIn("uniqueItems", str(raised.exception))
        with self.assertRaises(openai.BadRequestError) as raised:
            client().completions.create(model="stories", prompt="Once", max_tokens=5,
                                        extra_body={"response_format": {"type": "xml"}})
        self.assertIn("response_format.type", str(raised.exception))


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--llmc", required=True)
    parser.add_argument("--llmrt", required=True)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--qwen-tokenizer-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)


if __name__ == "__main__":
    main()
