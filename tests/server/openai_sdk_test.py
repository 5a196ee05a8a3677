#!/usr/bin/env python3
"""`llmrt serve` driven by the official OpenAI Python SDK.

Compiles stories260K (plus a small chat template) with the built llmc, starts the built
`llmrt serve` on a free port, and checks chat and completions, streamed and not, and that
server errors arrive as the SDK's own exception types.

    python3 openai_sdk_test.py --llmc build/bin/llmc --llmrt build/bin/llmrt \
        --model-dir tests/data/stories260K

Needs `pip install openai`. Without it the test FAILS (exit 1) with that instruction: a missing
client must not pass as a working server.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

try:
    import openai
except ImportError:
    sys.stderr.write(
        "openai_sdk_test: the OpenAI Python SDK is not installed; run `pip install openai` "
        "(or `python3 -m pip install --user openai`) and rerun. This test fails rather than "
        "skips so that CI without the SDK does not report the server as tested.\n")
    sys.exit(1)

CHAT_TEMPLATE = ("{{ bos_token }}{% for message in messages %}{{ message['role'] }}: "
                 "{{ message['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant:"
                 "{% endif %}")
ARGS = None
WORK = None
PLAN = None


class Server:
    """`llmrt serve PLAN --port 0 FLAGS`; the port is read from its 'listening on' line."""

    def __init__(self, *flags):
        self.stderr_path = os.path.join(WORK, "server-%d.err" % time.monotonic_ns())
        self.stderr = open(self.stderr_path, "w")
        self.process = subprocess.Popen(
            [ARGS.llmrt, "serve", PLAN, "--port", "0", "--model-name", "stories", *flags],
            stdout=subprocess.DEVNULL, stderr=self.stderr)
        deadline = time.monotonic() + 60
        self.port = None
        while time.monotonic() < deadline and self.port is None:
            with open(self.stderr_path) as f:
                match = re.search(r"listening on http://[0-9.]+:([0-9]+)", f.read())
            if match:
                self.port = int(match.group(1))
            elif self.process.poll() is not None:
                break
            else:
                time.sleep(0.02)
        if self.port is None:
            self.process.kill()
            with open(self.stderr_path) as f:
                raise RuntimeError("llmrt serve did not start: " + f.read())

    def client(self, api_key="unused", **kwargs):
        # max_retries=0: the SDK retries 429 and 5xx by default, which would hide them.
        return openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % self.port, api_key=api_key,
                             max_retries=0, timeout=120, **kwargs)

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=120)
        self.stderr.close()
        return code


def setUpModule():
    global WORK, PLAN
    WORK = tempfile.mkdtemp(prefix="llmrt-openai-sdk-")
    model = os.path.join(WORK, "model")
    shutil.copytree(ARGS.model_dir, model)
    with open(os.path.join(model, "chat_template.jinja"), "w") as f:
        f.write(CHAT_TEMPLATE)
    PLAN = os.path.join(WORK, "stories.plan")
    subprocess.run([ARGS.llmc, "compile", model, "-o", PLAN], check=True,
                   stdout=subprocess.DEVNULL)


def tearDownModule():
    shutil.rmtree(WORK, ignore_errors=True)


class OpenAiSdkTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.client = cls.server.client()

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def test_models(self):
        models = self.client.models.list()
        self.assertEqual([m.id for m in models.data], ["stories"])

    def test_completion_greedy_equals_llmrt_run(self):
        prompt = "Once upon a time"
        run = subprocess.run([ARGS.llmrt, "run", PLAN, "-p", prompt, "-n", "40", "--temp", "0"],
                             check=True, capture_output=True, text=True)
        expected = run.stdout[len(prompt):-1]
        completion = self.client.completions.create(model="stories", prompt=prompt,
                                                    max_tokens=40, temperature=0)
        self.assertEqual(completion.choices[0].text, expected)
        self.assertEqual(completion.choices[0].finish_reason, "length")
        self.assertEqual(completion.usage.completion_tokens, 40)
        self.assertEqual(completion.usage.total_tokens, completion.usage.prompt_tokens + 40)

        stream = self.client.completions.create(model="stories", prompt=prompt, max_tokens=40,
                                                temperature=0, stream=True)
        chunks = list(stream)
        self.assertEqual("".join(c.choices[0].text for c in chunks), expected)
        self.assertEqual(len({c.id for c in chunks}), 1)
        self.assertEqual(chunks[-1].choices[0].finish_reason, "length")

    def test_completion_logprobs_and_prompt_list(self):
        completion = self.client.completions.create(
            model="stories", prompt=["Once upon a time", "The dog"], max_tokens=4, n=2,
            temperature=0, logprobs=3)
        self.assertEqual(sorted(c.index for c in completion.choices), [0, 1, 2, 3])
        for choice in completion.choices:
            self.assertEqual(len(choice.logprobs.tokens), 4)
            self.assertEqual(len(choice.logprobs.top_logprobs[0]), 3)
            self.assertEqual("".join(choice.logprobs.tokens), choice.text)
        self.assertEqual(completion.usage.completion_tokens, 16)

    def test_chat(self):
        messages = [{"role": "user", "content": "Tell me a story about a cat."}]
        chat = self.client.chat.completions.create(model="stories", messages=messages,
                                                   max_completion_tokens=16, temperature=0)
        self.assertEqual(chat.object, "chat.completion")
        self.assertEqual(chat.choices[0].message.role, "assistant")
        self.assertTrue(chat.choices[0].message.content)
        self.assertEqual(chat.usage.completion_tokens, 16)

        stream = self.client.chat.completions.create(
            model="stories", messages=messages, max_completion_tokens=16, temperature=0,
            stream=True, stream_options={"include_usage": True})
        chunks = list(stream)
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        self.assertEqual(len({c.id for c in chunks}), 1)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertEqual(text, chat.choices[0].message.content)
        finishing = [c for c in chunks if c.choices and c.choices[0].finish_reason]
        self.assertEqual([c.choices[0].finish_reason for c in finishing], ["length"])
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 16)
        self.assertEqual(chunks[-1].usage.prompt_tokens, chat.usage.prompt_tokens)

    def test_chat_stop_sequence_and_seed(self):
        messages = [{"role": "user", "content": "Hi"}]
        first = self.client.chat.completions.create(model="stories", messages=messages,
                                                    max_tokens=20, temperature=1.0, seed=5)
        second = self.client.chat.completions.create(model="stories", messages=messages,
                                                     max_tokens=20, temperature=1.0, seed=5)
        self.assertEqual(first.choices[0].message.content, second.choices[0].message.content)
        completion = self.client.completions.create(model="stories", prompt="Once upon a time",
                                                    max_tokens=40, temperature=0, stop=["girl"])
        self.assertEqual(completion.choices[0].text, ", there was a little ")
        self.assertEqual(completion.choices[0].finish_reason, "stop")

    def test_errors_map_to_sdk_exceptions(self):
        with self.assertRaises(openai.BadRequestError) as raised:
            self.client.completions.create(model="stories", prompt="Once", max_tokens=600)
        self.assertIn("maximum context length is 512", str(raised.exception))
        with self.assertRaises(openai.BadRequestError):
            self.client.chat.completions.create(model="stories", messages=[], max_tokens=2)
        with self.assertRaises(openai.BadRequestError):
            self.client.completions.create(model="stories", prompt="x", temperature=5)
        with self.assertRaises(openai.NotFoundError):
            self.client.completions.create(model="gpt-4o", prompt="x")


class OpenAiSdkLimitsTest(unittest.TestCase):
    def test_api_key(self):
        server = Server("--api-key", "sekrit")
        try:
            with self.assertRaises(openai.AuthenticationError):
                server.client(api_key="wrong").models.list()
            self.assertEqual(server.client(api_key="sekrit").models.list().data[0].id, "stories")
        finally:
            self.assertEqual(server.stop(), 0)

    def test_queue_full_is_rate_limit_error(self):
        server = Server("--max-seqs", "12", "--max-queued", "0")
        try:
            client = server.client()
            started = threading.Event()

            def long_stream():
                stream = client.completions.create(model="stories", prompt="Once", n=12,
                                                   max_tokens=480, extra_body={"ignore_eos": True},
                                                   stream=True)
                for _ in stream:
                    started.set()

            worker = threading.Thread(target=long_stream)
            worker.start()
            self.assertTrue(started.wait(60))
            with self.assertRaises(openai.RateLimitError):
                client.completions.create(model="stories", prompt="Once", max_tokens=2)
            worker.join()
        finally:
            self.assertEqual(server.stop(), 0)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--llmc", required=True)
    parser.add_argument("--llmrt", required=True)
    parser.add_argument("--model-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
