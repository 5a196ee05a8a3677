#!/usr/bin/env python3
"""`llmrt serve` driven by the official OpenAI Python SDK.

Compiles stories260K (plus a small chat template) with the built llmc, starts the built
`llmrt serve` on a free port, and checks chat and completions, streamed and not, and that
server errors arrive as the SDK's own exception types. AgentTest serves a scripted Qwen3 plan
(make_agent_model.py) for tool calls, reasoning, the Responses API and the refused parameters.

    python3 openai_sdk_test.py --llmc build/bin/llmc --llmrt build/bin/llmrt \
        --model-dir tests/data/stories260K

Needs `pip install openai`. Without it the test FAILS (exit 1) with that instruction: a missing
client must not pass as a working server.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest
import urllib.error
import urllib.request

import make_agent_model
import sdk_harness

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


class Server(sdk_harness.ServerProcess):
    """The stories plan (or `plan`) served as `model_name`."""

    def __init__(self, *flags, plan=None, model_name="stories"):
        super().__init__(ARGS.llmrt, plan or PLAN, WORK, model_name, *flags)

    def client(self, api_key="unused", **kwargs):
        # max_retries=0: the SDK retries 429 and 5xx by default, which would hide them.
        return openai.OpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0,
                             timeout=120, **kwargs)


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


WEATHER_TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Current time in a zone",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}},
]
ASK = [{"role": "user", "content": "What is the weather in Paris, and the time?"}]
EXPECTED_CALLS = [("get_weather", {"city": "Paris"}), ("get_time", {"zone": "CET"})]


class AgentTest(unittest.TestCase):
    """Tool calls, reasoning and the Responses API on the scripted Qwen3 plan
    (sdk_harness.agent_plan: the model always answers with a <think> block, "Let me check."
    and two <tool_call>s, in Qwen3's real syntax)."""

    @classmethod
    def setUpClass(cls):
        cls.server = Server(plan=sdk_harness.agent_plan(ARGS.llmc, WORK), model_name="agent")
        cls.client = cls.server.client()

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def post(self, path, body):
        request = urllib.request.Request(self.server.url + path, json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.load(response)

    def assertCalls(self, calls):
        self.assertEqual([(c.function.name, json.loads(c.function.arguments)) for c in calls],
                         EXPECTED_CALLS)
        self.assertTrue(all(c.type == "function" and c.id.startswith("call_") for c in calls))
        self.assertEqual(len({c.id for c in calls}), len(calls))

    def test_tool_calls_reasoning_and_content(self):
        chat = self.client.chat.completions.create(model="agent", messages=ASK,
                                                   tools=WEATHER_TOOLS, temperature=0)
        choice = chat.choices[0]
        self.assertEqual(choice.finish_reason, "tool_calls")
        self.assertEqual(choice.message.content, "Let me check.")
        self.assertEqual(choice.message.reasoning_content, "I should check the weather.\n")
        self.assertCalls(choice.message.tool_calls)

    def test_streamed_tool_calls_accumulate_in_the_sdk(self):
        with self.client.chat.completions.stream(model="agent", messages=ASK,
                                                 tools=WEATHER_TOOLS, temperature=0.7,
                                                 seed=3) as stream:
            events = list(stream)
            final = stream.get_final_completion()
        choice = final.choices[0]
        self.assertEqual(choice.finish_reason, "tool_calls")
        self.assertEqual(choice.message.content, "Let me check.")
        self.assertCalls(choice.message.tool_calls)
        done = [(e.name, json.loads(e.arguments)) for e in events
                if e.type == "tool_calls.function.arguments.done"]
        self.assertEqual(done, EXPECTED_CALLS)
        # The raw chunks: id, type and name on a call's first delta, arguments after.
        chunks = list(self.client.chat.completions.create(model="agent", messages=ASK,
                                                          tools=WEATHER_TOOLS, stream=True))
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        reasoning = "".join(getattr(d, "reasoning_content", None) or "" for d in deltas)
        self.assertEqual(reasoning, "I should check the weather.\n")
        call_deltas = [t for d in deltas for t in (d.tool_calls or [])]
        self.assertEqual([t.index for t in call_deltas], [0, 0, 1, 1])
        self.assertEqual([t.function.name for t in call_deltas[::2]], ["get_weather", "get_time"])
        self.assertTrue(all(t.id is None and t.function.name is None for t in call_deltas[1::2]))

    def test_tool_choice_none_leaves_the_text_alone(self):
        chat = self.client.chat.completions.create(model="agent", messages=ASK,
                                                   tools=WEATHER_TOOLS, tool_choice="none")
        message = chat.choices[0].message
        self.assertEqual(chat.choices[0].finish_reason, "stop")
        self.assertIsNone(message.tool_calls)
        self.assertTrue(message.content.startswith("Let me check.\n<tool_call>"))
        # Without tools the text is not parsed either.
        chat = self.client.chat.completions.create(model="agent", messages=ASK)
        self.assertIsNone(chat.choices[0].message.tool_calls)
        self.assertIn('"get_time"', chat.choices[0].message.content)
        # tools are not rendered with "none": the prompt is the one without tools.
        with_tools = self.post("/tokenize", {"messages": ASK, "tools": WEATHER_TOOLS})
        with_none = self.post("/tokenize", {"messages": ASK, "tools": WEATHER_TOOLS,
                                            "tool_choice": "none"})
        without = self.post("/tokenize", {"messages": ASK})
        self.assertEqual(with_none["tokens"], without["tokens"])
        self.assertGreater(with_tools["count"], without["count"])

    def test_cut_short_by_max_tokens(self):
        chat = self.client.chat.completions.create(model="agent", messages=ASK,
                                                   tools=WEATHER_TOOLS, max_tokens=2)
        choice = chat.choices[0]
        self.assertEqual(choice.finish_reason, "length")
        self.assertEqual(choice.message.content, "Let me check.")
        self.assertIsNone(choice.message.tool_calls)
        chat = self.client.chat.completions.create(model="agent", messages=ASK, max_tokens=1)
        self.assertEqual(chat.choices[0].message.reasoning_content, "I should check the weather.\n")
        self.assertEqual(chat.choices[0].message.content, "")

    def test_chat_template_kwargs_reach_the_template(self):
        thinking = self.post("/tokenize", {"messages": ASK})
        no_thinking = self.post("/tokenize", {"messages": ASK,
                                              "chat_template_kwargs": {"enable_thinking": False}})
        # Qwen3's template closes an empty <think></think> in the prompt for enable_thinking false.
        text = self.post("/detokenize", {"tokens": no_thinking["tokens"]})["prompt"]
        self.assertTrue(text.endswith("<think>\n\n</think>\n\n"), text)
        self.assertGreater(no_thinking["count"], thinking["count"])

    def test_continue_final_message(self):
        messages = ASK + [{"role": "assistant", "content": "The weather in Paris is"}]
        continued = self.post("/tokenize", {"messages": messages, "add_generation_prompt": False,
                                            "continue_final_message": True})
        text = self.post("/detokenize", {"tokens": continued["tokens"]})["prompt"]
        # Qwen3's template writes an empty <think></think> into the last assistant turn; its
        # <|im_end|> is cut so the model goes on from the text.
        self.assertTrue(text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n"
                                      "The weather in Paris is"), text)
        chat = self.client.chat.completions.create(
            model="agent", messages=messages, max_tokens=2,
            extra_body={"add_generation_prompt": False, "continue_final_message": True})
        self.assertEqual(chat.usage.prompt_tokens, continued["count"])

    def test_refused_parameters_name_themselves(self):
        cases = [
            ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "'nope'"),
            ({"tool_choice": "required", "response_format": {"type": "json_object"}},
             "response_format"),
            ({"parallel_tool_calls": False}, "parallel_tool_calls"),
            ({"reasoning_effort": "low"}, "reasoning_effort"),
            ({"user": "u1"}, "'user'"),
            ({"extra_body": {"continue_final_message": True}}, "add_generation_prompt"),
            ({"extra_body": {"unknown_knob": 1}}, "'unknown_knob'"),
        ]
        for extra, name in cases:
            with self.subTest(extra=extra):
                with self.assertRaises(openai.BadRequestError) as raised:
                    self.client.chat.completions.create(model="agent", messages=ASK,
                                                        tools=WEATHER_TOOLS, max_tokens=2,
                                                        **extra)
                self.assertIn(name, str(raised.exception))

    def test_models_by_id(self):
        self.assertEqual(self.client.models.retrieve("agent").id, "agent")
        with self.assertRaises(openai.NotFoundError):
            self.client.models.retrieve("gpt-4o")

    def test_wrong_method_is_405(self):
        for path in ("/v1/chat/completions", "/v1/responses", "/v1/messages"):
            with self.assertRaises(urllib.error.HTTPError) as raised:
                urllib.request.urlopen(self.server.url + path, timeout=30)
            self.assertEqual(raised.exception.code, 405)
            self.assertEqual(raised.exception.headers["Allow"], "POST")

    def check_response(self, response):
        self.assertEqual(response.status, "completed")
        self.assertEqual([item.type for item in response.output],
                         ["reasoning", "message", "function_call", "function_call"])
        self.assertEqual(response.output[0].content[0].text, "I should check the weather.\n")
        self.assertEqual(response.output_text, "Let me check.")
        calls = response.output[2:]
        self.assertEqual([(c.name, json.loads(c.arguments)) for c in calls], EXPECTED_CALLS)
        self.assertEqual(response.usage.output_tokens, 5)  # 4 pieces and the EOS

    def test_responses(self):
        tools = [{"type": "function", "name": t["function"]["name"],
                  "parameters": t["function"]["parameters"], "strict": False}
                 for t in WEATHER_TOOLS]
        response = self.client.responses.create(model="agent", instructions="Be brief.",
                                                input=ASK[0]["content"], tools=tools)
        self.check_response(response)
        with self.client.responses.stream(model="agent", input=ASK[0]["content"],
                                          tools=tools) as stream:
            events = list(stream)
            final = stream.get_final_response()
        self.check_response(final)
        kinds = [e.type for e in events]
        self.assertEqual(kinds[:2], ["response.created", "response.in_progress"])
        self.assertEqual(kinds[-1], "response.completed")
        self.assertIn("response.output_text.delta", kinds)
        self.assertEqual(kinds.count("response.function_call_arguments.done"), 2)
        self.assertEqual([e.sequence_number for e in events], list(range(len(events))))
        # The calls go back as items, with their outputs: a second, stateless turn.
        second = self.client.responses.create(
            model="agent", tools=tools, max_output_tokens=2,
            input=[{"role": "user", "content": ASK[0]["content"]}] +
                  [{"type": "function_call", "call_id": c.call_id, "name": c.name,
                    "arguments": c.arguments} for c in response.output[2:]] +
                  [{"type": "function_call_output", "call_id": c.call_id, "output": "sunny"}
                   for c in response.output[2:]])
        self.assertEqual(second.status, "incomplete")
        self.assertEqual(second.incomplete_details.reason, "max_output_tokens")
        self.assertEqual(second.output_text, "Let me check.")

    def test_responses_cut_in_the_reasoning_streams_as_it_answers(self):
        plain = self.client.responses.create(model="agent", input="hi", max_output_tokens=1)
        with self.client.responses.stream(model="agent", input="hi",
                                          max_output_tokens=1) as stream:
            events = list(stream)
        # An incomplete response ends with response.incomplete, as the API reference says (the
        # SDK's get_final_response() waits for response.completed only).
        self.assertEqual(events[-1].type, "response.incomplete")
        streamed = events[-1].response
        for response in (plain, streamed):
            self.assertEqual(response.status, "incomplete")
            self.assertEqual([item.type for item in response.output], ["reasoning", "message"])
            self.assertEqual(response.output_text, "")

    def test_responses_refusals(self):
        for extra, name in [({"store": True}, "store"),
                            ({"previous_response_id": "resp_1"}, "previous_response_id"),
                            ({"tool_choice": "required"}, "tool_choice"),
                            ({"extra_body": {"max_tokens": 3}}, "'max_tokens'")]:
            with self.subTest(extra=extra):
                with self.assertRaises(openai.BadRequestError) as raised:
                    self.client.responses.create(model="agent", input="hi", **extra)
                self.assertIn(name, str(raised.exception))


class HarmonyAgentTest(unittest.TestCase):
    """gpt-oss's harmony format end to end: the scripted plan with gpt-oss's tokenizer and
    template (make_agent_model.HARMONY_REPLY, written with the real special tokens) always
    answers with an analysis message, a commentary preamble "Let me check." and a call of
    get_weather, ended by <|call|> (an EOS id of gpt-oss's generation_config)."""

    CALL = [("get_weather", {"city": "Paris"})]
    REASONING = "I should check the weather."

    @classmethod
    def setUpClass(cls):
        model = os.path.join(WORK, "harmony-model")
        make_agent_model.make(ARGS.llmc, "gpt_oss", model, make_agent_model.HARMONY_REPLY)
        plan = os.path.join(WORK, "harmony.plan")
        subprocess.run([ARGS.llmc, "compile", model, "-o", plan, "--quiet"], check=True,
                       stdout=subprocess.DEVNULL)
        cls.server = Server(plan=plan, model_name="harmony")
        cls.client = cls.server.client()

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def calls(self, calls):
        return [(c.function.name, json.loads(c.function.arguments)) for c in calls]

    def test_channels_and_call(self):
        chat = self.client.chat.completions.create(model="harmony", messages=ASK,
                                                   tools=WEATHER_TOOLS)
        choice = chat.choices[0]
        self.assertEqual(choice.finish_reason, "tool_calls")
        self.assertEqual(choice.message.reasoning_content, self.REASONING)
        self.assertEqual(choice.message.content, "Let me check.")
        self.assertEqual(self.calls(choice.message.tool_calls), self.CALL)
        # It stopped at <|call|> (an EOS id): the pieces and that token, not max_tokens.
        self.assertEqual(chat.usage.completion_tokens, len(make_agent_model.HARMONY_REPLY) + 1)
        with self.client.chat.completions.stream(model="harmony", messages=ASK,
                                                 tools=WEATHER_TOOLS) as stream:
            list(stream)
            final = stream.get_final_completion().choices[0]
        self.assertEqual(final.finish_reason, "tool_calls")
        self.assertEqual(final.message.content, "Let me check.")
        self.assertEqual(self.calls(final.message.tool_calls), self.CALL)
        # The call goes back (content "", see chat_template_test.py) with its result.
        call = choice.message.tool_calls[0]
        second = self.client.chat.completions.create(
            model="harmony", tools=WEATHER_TOOLS, max_tokens=4,
            messages=ASK + [{"role": "assistant", "content": "",
                             "reasoning_content": choice.message.reasoning_content,
                             "tool_calls": [call.model_dump()]},
                            {"role": "tool", "tool_call_id": call.id, "content": "sunny"}])
        self.assertEqual(second.choices[0].finish_reason, "length")
        self.assertEqual(second.choices[0].message.reasoning_content, self.REASONING)

    def test_without_tools_the_call_is_content(self):
        chat = self.client.chat.completions.create(model="harmony", messages=ASK)
        message = chat.choices[0].message
        self.assertEqual(chat.choices[0].finish_reason, "stop")
        self.assertIsNone(message.tool_calls)
        self.assertEqual(message.reasoning_content, self.REASONING)
        self.assertEqual(message.content,
                         "Let me check.<|start|>assistant<|channel|>commentary "
                         "to=functions.get_weather <|constrain|>json<|message|>"
                         '{"city": "Paris"}')
        # Cut in the analysis: reasoning only.
        chat = self.client.chat.completions.create(model="harmony", messages=ASK, max_tokens=4,
                                                   tools=WEATHER_TOOLS)
        self.assertEqual(chat.choices[0].finish_reason, "length")
        self.assertEqual(chat.choices[0].message.reasoning_content, self.REASONING)
        self.assertEqual(chat.choices[0].message.content, "")

    def test_forced_call(self):
        # The grammar never allows what the scripted model wants after <|channel|>, so it
        # writes the lowest allowed token each time (',' before '}'): bounded strings and no
        # other properties end the call.
        tools = json.loads(json.dumps(WEATHER_TOOLS))
        for tool in tools:
            parameters = tool["function"]["parameters"]
            parameters["additionalProperties"] = False
            for value in parameters["properties"].values():
                value["maxLength"] = 8
        for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
            chat = self.client.chat.completions.create(
                model="harmony", messages=ASK, tools=tools, tool_choice=choice,
                max_tokens=100, logprobs=True)
            result = chat.choices[0]
            self.assertEqual(result.finish_reason, "tool_calls")
            self.assertIsNone(result.message.reasoning_content)
            [call] = result.message.tool_calls
            arguments = json.loads(call.function.arguments)
            if isinstance(choice, dict):
                self.assertEqual(call.function.name, "get_weather")
            self.assertIn(call.function.name, ("get_weather", "get_time"))
            self.assertLessEqual(set(arguments), {"city", "zone"})
            tokens = [t.token for t in result.logprobs.content]
            # The markers are the special tokens, not text spelling them.
            self.assertEqual(tokens[0], "<|channel|>")
            self.assertIn("<|constrain|>", tokens)
            self.assertIn("<|message|>", tokens)

    def test_responses(self):
        tools = [{"type": "function", "name": t["function"]["name"],
                  "description": t["function"]["description"],
                  "parameters": t["function"]["parameters"], "strict": False}
                 for t in WEATHER_TOOLS]
        response = self.client.responses.create(model="harmony", input=ASK[0]["content"],
                                                tools=tools, reasoning={"effort": "low"})
        with self.client.responses.stream(model="harmony", input=ASK[0]["content"],
                                          tools=tools) as stream:
            list(stream)
            streamed = stream.get_final_response()
        for result in (response, streamed):
            self.assertEqual(result.status, "completed")
            self.assertEqual([item.type for item in result.output],
                             ["reasoning", "message", "function_call"])
            self.assertEqual(result.output[0].content[0].text, self.REASONING)
            self.assertEqual(result.output_text, "Let me check.")
            self.assertEqual([(c.name, json.loads(c.arguments)) for c in result.output[2:]],
                             self.CALL)
        # The call and its output go back as items: the template renders them (a call-only
        # turn is content "", which gpt-oss's template takes, null it refuses).
        [call] = response.output[2:]
        second = self.client.responses.create(
            model="harmony", tools=tools, max_output_tokens=4,
            input=[{"role": "user", "content": ASK[0]["content"]},
                   {"type": "function_call", "call_id": call.call_id, "name": call.name,
                    "arguments": call.arguments},
                   {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])
        self.assertEqual(second.status, "incomplete")
        self.assertEqual(second.output[0].content[0].text, self.REASONING)

    def messages(self, messages, max_tokens):
        body = {"model": "harmony", "max_tokens": max_tokens, "messages": messages,
                "tools": [{"name": t["function"]["name"],
                           "description": t["function"]["description"],
                           "input_schema": t["function"]["parameters"]}
                          for t in WEATHER_TOOLS]}
        request = urllib.request.Request(self.server.url + "/v1/messages",
                                         json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            return json.load(answer)

    def test_messages(self):
        message = self.messages(ASK, 50)
        self.assertEqual(message["stop_reason"], "tool_use")
        self.assertEqual([block["type"] for block in message["content"]],
                         ["thinking", "text", "tool_use"])
        self.assertEqual(message["content"][0]["thinking"], self.REASONING)
        self.assertEqual(message["content"][1]["text"], "Let me check.")
        self.assertEqual((message["content"][2]["name"], message["content"][2]["input"]),
                         self.CALL[0])
        # The tool_use block goes back alone (no text) with its result.
        use = message["content"][2]
        second = self.messages(ASK + [
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"],
                                          "content": "sunny"}]}], 4)
        self.assertEqual(second["stop_reason"], "max_tokens")
        self.assertEqual(second["content"][0]["thinking"], self.REASONING)


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
