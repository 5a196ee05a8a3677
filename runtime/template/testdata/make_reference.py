#!/usr/bin/env python3
"""Makes the reference outputs the chat-template tests compare against, with Python jinja2.

Rendering goes through transformers' own code (transformers.utils.chat_template_utils:
_normalize_chat_messages, render_jinja_template and _compile_jinja_template), so the messages and
the environment are exactly the ones apply_chat_template uses: None-valued message keys dropped,
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True), loop controls, its tojson
filter, raise_exception, strftime_now, namespace and dict. strftime_now
is pinned to 2024-07-26 10:00:00 so the outputs are deterministic (the C++ test pins the same).

Writes, next to this script:
  chat_reference.json      every template in ../shared/tokenizers (each folder's *.jinja, its
                           extra/ and more/ *.jinja, and the templates inside tokenizer_config*.json
                           and chat_template.json, named "file#name" for a list) on every
                           conversation below (tools offered, tool calls with dict and JSON-string
                           arguments, tool results, the templates' keyword variables), with and
                           without add_generation_prompt: the output, or the error it raised.
  features_reference.json  small templates exercising each language feature, with jinja2's output.
  chat_template_selection.json
                           model folders with chat templates in tokenizer_config.json (a string or
                           a list of named ones), chat_template.jinja and additional_chat_templates/,
                           the templates transformers loads from each and the one
                           get_chat_template(name, tools) picks for each request.

Usage: python3 runtime/template/testdata/make_reference.py [path/to/shared/tokenizers]
Needs: pip install jinja2 transformers
"""
import datetime as real_datetime
import glob
import json
import os
import sys

import jinja2
import transformers
from transformers.utils import chat_template_utils

HERE = os.path.dirname(os.path.abspath(__file__))
FIXED_NOW = real_datetime.datetime(2024, 7, 26, 10, 0, 0)


class _FixedDatetime(real_datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


# strftime_now reads the module's `datetime`; pin it before the first template compiles.
chat_template_utils.datetime = _FixedDatetime


def special_token(config, key):
    value = config.get(key)
    if isinstance(value, dict):
        return value.get("content")
    return value


# Folders without a tokenizer_config.json: the tokens their models' tokenizers define
# (Mistral's SentencePiece <s>/</s>; SmolLM2's tokenizer_config sets both to its im tokens).
FALLBACK_TOKENS = {
    "mistral": ("<s>", "</s>"),
    "smollm2": ("<|im_start|>", "<|im_end|>"),
}


def folder_tokens(folder):
    for name in ("tokenizer_config.json", "llama2_tokenizer_config.json"):
        path = os.path.join(folder, name)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                config = json.load(f)
            return special_token(config, "bos_token"), special_token(config, "eos_token")
    return FALLBACK_TOKENS.get(os.path.basename(folder), (None, None))


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather for a city, in \"celsius\" or 'fahrenheit'.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}

TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a timezone.",
        "parameters": {
            "type": "object",
            "properties": {
                "timezone": {"type": "string", "description": "IANA name"},
                "format": {"type": ["string", "null"], "enum": ["24h", "12h", None]},
                "fields": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["timezone"],
        },
        "return": {"type": "string", "description": "HH:MM"},
    },
}

OSLO_WEATHER = {"city": "Oslo", "unit": "celsius"}
OSLO_TIME = {"timezone": "Europe/Oslo"}


def oslo_round_trip(content, weather_arguments, time_arguments):
    """A question, two parallel tool calls with these arguments, their results, the answer."""
    def call(call_id, name, arguments):
        return {"id": call_id, "type": "function",
                "function": {"name": name, "arguments": arguments}}
    return [
        {"role": "user", "content": "Weather and time in Oslo?"},
        {"role": "assistant", "content": content,
         "tool_calls": [call("abc123def", "get_weather", weather_arguments),
                        call("xyz789uvw", "get_time", time_arguments)]},
        {"role": "tool", "content": "{\"temperature\": -3}", "tool_call_id": "abc123def",
         "name": "get_weather"},
        {"role": "tool", "content": "14:05", "tool_call_id": "xyz789uvw", "name": "get_time"},
        {"role": "assistant", "content": "It is -3 °C and 14:05 in Oslo."},
    ]


CONVERSATIONS = [
    {"name": "single_user", "messages": [{"role": "user", "content": "Hello!"}]},
    {
        "name": "system_user",
        "messages": [
            {"role": "system", "content": "You are a terse assistant."},
            {"role": "user", "content": "What is 2+2?"},
        ],
    },
    {
        "name": "multi_turn",
        "messages": [
            {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "Tell me a joke."},
        ],
    },
    {
        "name": "assistant_last",
        "messages": [
            {"role": "user", "content": "Name a color."},
            {"role": "assistant", "content": "Blue."},
        ],
    },
    {
        "name": "tricky_content",
        "messages": [
            {"role": "system", "content": "  Answer in JSON: {\"a\": 'b'}\n\n"},
            {"role": "user",
             "content": "Quotes \" and ' and \\ backslash\nnew line\ttab {{ x }} {% if y %} {# c #}"},
            {"role": "assistant", "content": "Ünïcödé 日本語 emoji 👍🏽 and </s> <|im_end|>\r\n"},
            {"role": "user", "content": "  spaced out  \n"},
        ],
    },
    {
        "name": "long_multi_turn_with_system",
        "messages": [
            {"role": "system", "content": "System prompt."},
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": "two"},
            {"role": "user", "content": "three"},
            {"role": "assistant", "content": "<think>hmm</think>four"},
            {"role": "user", "content": "five"},
        ],
    },
    {
        "name": "tool_calls",
        "tools": [WEATHER_TOOL],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather",
                                 "arguments": {"city": "Paris", "unit": "celsius"}},
                }],
            },
            {"role": "tool", "content": "{\"temperature\": 21}", "tool_call_id": "call_1"},
        ],
    },
    # Tools offered, no call yet: what a server renders for the first request of an agent.
    {
        "name": "tools_offered",
        "tools": [WEATHER_TOOL, TIME_TOOL],
        "messages": [
            {"role": "system", "content": "You are a helpful agent."},
            {"role": "user", "content": "What's the weather in Zürich?"},
        ],
    },
    # The OpenAI wire form: arguments as a JSON string; ids of 9 characters (Mistral requires
    # them); two parallel calls, their results (with `name`, as some templates read it) and the
    # assistant's answer, then a new question.
    {
        "name": "tool_round_trip_string_arguments",
        "tools": [WEATHER_TOOL, TIME_TOOL],
        "messages": [{"role": "system", "content": "Use the tools."}] + oslo_round_trip(
            None, json.dumps(OSLO_WEATHER), json.dumps(OSLO_TIME)) + [
            {"role": "user", "content": "Thanks! And tomorrow?"}],
    },
    # The same with arguments as dicts (transformers' own form), and content beside the call.
    {
        "name": "tool_round_trip_dict_arguments",
        "tools": [WEATHER_TOOL, TIME_TOOL],
        "messages": oslo_round_trip("Let me check.", OSLO_WEATHER, OSLO_TIME),
    },
    # Reasoning kept in the history: transformers also passes it as `thinking` (gpt-oss reads
    # that); a `reasoning` name is aliased the same way.
    {
        "name": "reasoning_in_history",
        "messages": [
            {"role": "user", "content": "Pick a number."},
            {"role": "assistant", "content": "42", "reasoning_content": "Any number will do."},
            {"role": "user", "content": "Why that one?"},
            {"role": "assistant", "content": "Tradition.", "reasoning": "Douglas Adams."},
        ],
    },
    # The templates' own keyword variables: Qwen3's enable_thinking, gpt-oss's reasoning_effort,
    # Llama 3.x's builtin_tools and date_string. Every template gets them; the others ignore them.
    {
        "name": "kwargs_thinking_off",
        "kwargs": {"enable_thinking": False},
        "messages": [
            {"role": "user", "content": "Quick: 3*7?"},
            {"role": "assistant", "content": "<think>\n3*7=21\n</think>\n\n21"},
            {"role": "user", "content": "And 4*8?"},
        ],
    },
    {
        "name": "kwargs_reasoning_effort",
        "kwargs": {"reasoning_effort": "high"},
        "tools": [WEATHER_TOOL],
        "messages": [
            {"role": "developer", "content": "Answer in French."},
            {"role": "user", "content": "Weather in Lyon?"},
        ],
    },
    {
        "name": "kwargs_builtin_tools",
        "kwargs": {"builtin_tools": ["brave_search", "wolfram_alpha"], "date_string": "1 Mar 2025"},
        "tools": [WEATHER_TOOL],
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Search for llama news."},
        ],
    },
    {
        "name": "roles_not_alternating",
        "messages": [
            {"role": "user", "content": "first"},
            {"role": "user", "content": "second"},
        ],
    },
]


def error_record(error):
    return {"error_type": type(error).__name__, "error": str(error)}


def render_chat(source, conversation, add_generation_prompt, bos, eos):
    kwargs = {}
    if bos is not None:
        kwargs["bos_token"] = bos
    if eos is not None:
        kwargs["eos_token"] = eos
    try:
        kwargs.update(conversation.get("kwargs", {}))
        # apply_chat_template's first step: message keys whose value is None are dropped.
        messages = chat_template_utils._normalize_chat_messages(conversation["messages"])
        rendered, _ = chat_template_utils.render_jinja_template(
            conversations=[messages],
            tools=conversation.get("tools"),
            chat_template=source,
            add_generation_prompt=add_generation_prompt,
            **kwargs,
        )
        return {"output": rendered[0]}
    except jinja2.exceptions.TemplateError as error:
        return error_record(error)
    except (TypeError, ValueError) as error:
        return error_record(error)
    except RecursionError as error:
        # Hermes' json_to_python_type recurses without end on an "array" parameter (it passes
        # `spec|items`, which has no .type); we stop at max_call_depth instead.
        return error_record(error)


def config_templates(path):
    """The chat templates a tokenizer_config.json (or a processor's chat_template.json) holds."""
    with open(path, encoding="utf-8") as f:
        value = json.load(f).get("chat_template")
    if isinstance(value, str):
        return [("", value)]
    if isinstance(value, list):
        return [("#" + entry["name"], entry["template"]) for entry in value]
    return []


def template_sources(shared):
    """(name, source, folder) of every template under `shared`: the .jinja files of each folder
    and of its extra/ and more/, and the templates inside its tokenizer_config*.json files."""
    found = []
    for pattern in ("*/*.jinja", "*/extra/*.jinja", "*/more/*.jinja"):
        for path in sorted(glob.glob(os.path.join(shared, pattern))):
            with open(path, encoding="utf-8") as f:
                found.append((os.path.relpath(path, shared), f.read()))
    for pattern in ("*/tokenizer_config*.json", "*/more/tokenizer_config*.json",
                    "*/chat_template.json"):
        for path in sorted(glob.glob(os.path.join(shared, pattern))):
            for suffix, source in config_templates(path):
                found.append((os.path.relpath(path, shared) + suffix, source))
    # The same template text under several names is rendered once, under its first name.
    seen, unique = set(), []
    for name, source in found:
        if source not in seen:
            seen.add(source)
            unique.append((name, source, os.path.join(shared, name.split("/")[0])))
    return unique


def make_chat_reference(shared):
    templates, cases = [], []
    for rel, source, folder in template_sources(shared):
        bos, eos = folder_tokens(folder)
        templates.append({"name": rel, "source": source, "bos_token": bos, "eos_token": eos})
        for conversation in CONVERSATIONS:
            for add_generation_prompt in (False, True):
                case = {"template": rel, "conversation": conversation["name"],
                        "add_generation_prompt": add_generation_prompt}
                case.update(render_chat(source, conversation, add_generation_prompt, bos, eos))
                cases.append(case)
    return {"jinja2_version": jinja2.__version__, "transformers_version": transformers.__version__,
            "strftime_now": FIXED_NOW.isoformat(), "templates": templates,
            "conversations": CONVERSATIONS, "cases": cases}


# (name, template, variables). Each is rendered by jinja2 in transformers' environment.
MESSAGES = [{"role": "system", "content": "sys"}, {"role": "user", "content": " Hi "},
            {"role": "assistant", "content": "yo"}]
FEATURES = [
    ("if_elif_else", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}"
     "many{% endif %};{% endfor %}", {}),
    ("for_loop_vars", "{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.length }}/"
     "{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }} {% endfor %}",
     {"messages": MESSAGES}),
    ("for_prev_next_cycle", "{% for x in 'abc' %}{{ loop.previtem }}{{ x }}{{ loop.nextitem }}"
     "{{ loop.cycle('+', '-') }}{% endfor %}", {}),
    ("for_else", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in none_list %}x{% else %}"
     "undef{% endfor %}", {}),
    ("for_filter_and_unpack", "{% for k, v in d.items() if v > 1 %}{{ k }}={{ v }},{% endfor %}",
     {"d": {"a": 1, "b": 2, "c": 3}}),
    ("for_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}"
     "{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("loop_scoping", "{% set x = 5 %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}"
     "[{{ x }}]{% if true %}{% set y = 3 %}{% endif %}{{ y }}", {}),
    ("namespace", "{% set ns = namespace(found=false, n=0) %}{% for m in messages %}"
     "{% if m.role == 'user' %}{% set ns.found = true %}{% endif %}{% set ns.n = ns.n + 1 %}"
     "{% endfor %}{{ ns.found }} {{ ns.n }}", {"messages": MESSAGES}),
    ("macro_call", "{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}"
     "{{ greet('a') }} {{ greet('b', '?') }} {{ greet(name='c', punct='.') }}", {}),
    ("macro_caller", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}"
     "{% call wrap('b') %}bold {{ 1 + 1 }}{% endcall %}", {}),
    ("filter_block", "{% filter upper %}shout {{ 'this' }}{% endfilter %}", {}),
    ("set_block", "{% set text %}  block {{ 7 }}  {% endset %}[{{ text }}][{{ text | trim }}]", {}),
    ("raw", "{% raw %}{{ not rendered }} {% if %}{% endraw %}", {}),
    ("literals", "{{ [1, 'a', none, true, 2.5] }} {{ {'k': 'v', 'n': 1} }} {{ (1, 2) }} {{ (1,) }} "
     "{{ 'adj' 'acent' }} {{ 1_000 }} {{ 1e3 }} {{ -3 }}", {}),
    ("string_escapes", "{{ 'a\\nb\\tc\\\\d\\'e' }}|{{ \"q\\\"q\" }}|{{ '\\u00e9\\x41' }}", {}),
    ("attribute_item_access", "{{ m.role }} {{ m['content'] }} {{ l[0] }} {{ l[-1] }} {{ l.1 }} "
     "{{ m.missing }}|{{ l[10] }}|", {"m": MESSAGES[1], "l": [10, 20, 30]}),
    ("slicing", "{{ l[1:] }} {{ l[:-1] }} {{ l[::2] }} {{ l[::-1] }} {{ s[1:4] }} {{ s[-3:] }} "
     "{{ s[::-1] }}", {"l": [1, 2, 3, 4, 5], "s": "héllo wörld"}),
    ("in_not_in", "{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} "
     "{{ 'role' in m }} {{ 'tool_calls' in m }}", {"m": MESSAGES[0]}),
    ("arithmetic", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} "
     "{{ -7 % 3 }} {{ 2 ** 10 }} {{ 1.5 + 1 }} {{ 0.1 + 0.2 }} {{ 10 / 4 * 2 }} {{ 'ab' * 3 }} "
     "{{ [1] + [2] }} {{ true + 1 }}", {}),
    ("concat_tilde", "{{ 'a' ~ 1 ~ none ~ true ~ [1] ~ undefined_name }}", {}),
    ("comparisons", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ 1 != '1' }} "
     "{{ [1, 2] < [1, 3] }} {{ none == none }} {{ 2 >= 2 }} {{ 1 <= 0 }}", {}),
    ("logic", "{{ true and 'x' }} {{ 0 or 'fallback' }} {{ not '' }} {{ none or [] }} "
     "{{ 1 and 0 }} {{ not undefined_name }}", {}),
    ("conditional_expression", "{{ 'yes' if flag else 'no' }} {{ 'yes' if not flag else 'no' }} "
     "[{{ 'only' if not flag }}]", {"flag": True}),
    ("string_methods", "{{ '  x  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '  x'.lstrip() }}|"
     "{{ 'x  '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|"
     "{{ 'a b c'.split(' ', 1) }}|{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|"
     "{{ 'MiXed'.upper() }}|{{ 'MiXed'.lower() }}|{{ 'hello wORLD-x'.title() }}|"
     "{{ 'hELLO'.capitalize() }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'a/b/c'.rsplit('/', 1) }}|"
     "{{ 'abcabc'.find('c') }}|{{ 'abcabc'.count('bc') }}|{{ '-'.join(['x', 'y']) }}", {}),
    ("dict_methods", "{% for k, v in d.items() %}{{ k }}:{{ v }} {% endfor %}{{ d.keys() | list }} "
     "{{ d.values() | list }} {{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 'dflt') }}",
     {"d": {"a": 1, "b": [2]}}),
    ("tests_types", "{{ x is defined }} {{ nope is defined }} {{ nope is undefined }} {{ n is none }} "
     "{{ s is string }} {{ d is mapping }} {{ l is iterable }} {{ s is iterable }} "
     "{{ 1 is number }} {{ l is sequence }} {{ d is sequence }} {{ true is boolean }} "
     "{{ true is true }} {{ 0 is false }} {{ 1 is integer }} {{ 1.0 is float }} "
     "{{ 1.0 is integer }} {{ n is not none }}",
     {"x": 1, "n": None, "s": "str", "d": {"a": 1}, "l": [1]}),
    ("tests_comparisons", "{{ 1 is eq 1 }} {{ 'a' is equalto 'a' }} {{ 2 is in [1, 2] }} "
     "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 1 is lt 2 }} {{ 2 is ge 3 }} "
     "{{ none is sameas none }}", {}),
    ("filters_text", "{{ '  t  ' | trim }}|{{ 'abc' | upper }}|{{ 'ABC' | lower }}|"
     "{{ 'hello wORLD-x(y' | title }}|{{ 'hELLO world' | capitalize }}|"
     "{{ 'aXbX' | replace('X', '-') }}|{{ 42 | string }}|{{ 'safe<>' | safe }}", {}),
    ("filters_length", "{{ 'héllo' | length }} {{ [1, 2] | count }} {{ {'a': 1} | length }} "
     "{{ nope | length }}", {}),
    ("filters_default", "{{ nope | default('d') }} {{ '' | default('d') }} {{ '' | d('d', true) }} "
     "{{ none | default('d') }} {{ 0 | default('d', boolean=true) }}", {}),
    ("filters_numbers", "{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} "
     "{{ 3.9 | int }} {{ '2.5' | float }} {{ 3 | float }} {{ -4 | abs }} {{ 2.567 | round }} "
     "{{ 2.567 | round(2) }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.1 | round(0, 'ceil') }} "
     "{{ 2.9 | round(method='floor') }}", {}),
    ("filters_sequences", "{{ l | first }} {{ l | last }} {{ 'abc' | list }} {{ l | join(', ') }} "
     "{{ l | join }} {{ [3, 1, 3, 2] | unique | list }} {{ ['B', 'a', 'b'] | unique | list }} "
     "{{ d | items | list }} {{ d | dictsort }} {{ [3, 1, 2] | sort }} {{ [1, 2, 3] | sum }} "
     "{{ [4, 2, 8] | min }} {{ [4, 2, 8] | max }}", {"l": ["x", "y", "z"], "d": {"b": 2, "a": 1}}),
    ("filters_map_select", "{{ messages | map(attribute='role') | join(',') }}|"
     "{{ ['a', 'b'] | map('upper') | list }}|{{ [1, 2, 3, 4] | select('odd') | list }}|"
     "{{ [1, 2, 3, 4] | reject('odd') | list }}|"
     "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }}|"
     "{{ messages | rejectattr('role', 'eq', 'system') | list | length }}|"
     "{{ [0, 1, '', 'x'] | select | list }}|{{ messages | selectattr('content') | list | length }}",
     {"messages": MESSAGES}),
    ("filters_join_attribute", "{{ messages | join(' ', attribute='role') }}", {"messages": MESSAGES}),
    ("filter_tojson", "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ 'é\"\\n' | tojson }}|"
     "{{ [1, 2.0, none, true] | tojson }}|{{ {} | tojson(indent=4) }}|{{ d | tojson(sort_keys=true) }}",
     {"d": {"z": "ü", "a": [1, {"b": None}]}}),
    ("filter_indent", "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|"
     "{{ 'a\\n\\nb' | indent(1, blank=true) }}|{{ 'x\\ny' | indent('> ') }}", {}),
    ("filter_chain_precedence", "{{ ' a ' | trim + 'b' }}|{{ -3 | abs }}|{{ 'x' ~ ' y ' | trim }}|"
     "{{ messages | length > 2 }}|{{ not messages | length }}", {"messages": MESSAGES}),
    ("whitespace_control", "a  {%- if true -%}  b  {%- endif -%}  c\n  {{- ' d ' -}}  \n e", {}),
    ("trim_and_lstrip_blocks", "<\n  {% if true %}\n    yes\n  {% endif %}\n  {# note #}\n>\n"
     "  {{ 'var' }}\n  {%+ if true %}kept{% endif %}\n{% if true +%}\nno-trim\n{%- endif %}\n", {}),
    ("trailing_newline", "line\n", {}),
    ("comments", "a{# comment {{ x }} #}b{#- strip -#}  c", {}),
    ("none_and_bool_output", "{{ none }} {{ true }} {{ false }} {{ n }}", {"n": None}),
    ("nested_data", "{{ messages[1]['content'] | trim }}{{ messages[0].role | upper }}"
     "{{ messages[-1].content ~ '!' }}", {"messages": MESSAGES}),
    ("dict_global", "{{ dict(a=1, b='x') }} {{ dict(a=1) | tojson }}", {}),
    ("strftime_now", "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M') }}", {}),
    ("undefined_printing", "[{{ nope }}][{{ m.nope }}][{{ nope | trim }}][{{ m.nope ~ 'x' }}]"
     "{% for x in nope %}never{% endfor %}{{ nope is none }}{{ nope == nope2 }}",
     {"m": {"a": 1}}),
    ("int_attribute_is_undefined", "[{{ m.a.b }}]", {"m": {"a": 1}}),
    # Falsy input to select/reject/map is an empty result in jinja2 (`if seq:`), not an error.
    ("none_select_map", "{{ none | selectattr('a') | list }}|{{ none | map(attribute='a') | list }}|"
     "{{ none | select | list }}|{{ none | reject | list }}|{{ none | rejectattr('a') | list }}|"
     "{{ nope | selectattr('a') | list }}|{{ '' | select | list }}|{{ 0 | map('upper') | list }}|"
     "{{ m.tool_calls | selectattr('type', 'eq', 'function') | list | length }}",
     {"m": {"tool_calls": None}}),
    # |safe and |escape make markupsafe.Markup: + escapes the plain side, ~ does not.
    ("markup", "{{ ('<b>' | safe) + '<i>' }}|{{ '<i>' + ('<b>' | safe) }}|{{ ('<b>' | safe) ~ '<i>' }}|"
     "{{ q | e }}|{{ '<a>' | escape | e }}|{{ '<a>' | safe | forceescape }}|"
     "{{ '<a>' | e | length }}|{{ '<a>' | e is escaped }}|{{ 'x' is escaped }}|"
     "{{ ('a<b' | safe).replace('<', '>') }}|{{ ('a<b' | safe).split('<') }}|"
     "{{ ('<b>' | safe | upper) + '<' }}|{{ ('<b>' | safe)[0] + '<' }}|"
     "{{ d | tojson | safe + ' <' }}|{{ ('<b>' | safe) * 2 + '&' }}|{{ ('<b>' | safe | trim) + '&' }}|"
     "{{ ('<b>' | safe | string) + '&' }}|{{ '<b>' | safe | replace('b', '<') }}|"
     "{{ ('<b>' | safe | tojson) + '<' }}|{{ ['<'] | join('<' | safe) + '&' }}|"
     "{{ ('<b>' | safe).strip('<') + '&' }}|{{ [('<b>' | safe)] }}|{{ ('<b>' | e) == '&lt;b&gt;' }}|"
     "{{ ('<{}>' | safe).format('<') }}|{{ ('-' | safe).join(['<', 'a']) }}|{{ '%s<' | safe | format('&') }}|"
     "{{ ('<%s>' | safe) % '&' }}",
     {"d": {"k": "<v>"}, "q": "<&>\"'"}),
    ("filters_grouping", "{% for g in people | groupby('city') %}{{ g.grouper }}:"
     "{{ g.list | map(attribute='name') | join(',') }};{% endfor %}|"
     "{% for city, items in people | groupby('city', case_sensitive=true) %}{{ city }}={{ items | length }} "
     "{% endfor %}|{% for g in people | groupby('age', default=0) %}{{ g.grouper }} {% endfor %}|"
     "{{ [1, 2, 3, 4, 5] | batch(2) | list }} {{ [1, 2, 3] | batch(2, 'x') | list }}|"
     "{{ [1, 2, 3, 4, 5] | slice(2) | list }} {{ [1, 2, 3, 4] | slice(3, 0) | list }}|"
     "{{ 'abc' | reverse }} {{ [1, 2, 3] | reverse | list }} {{ (1, 2) | reverse | list }}",
     {"people": [{"name": "a", "city": "Oslo", "age": 3}, {"name": "b", "city": "Bern"},
                 {"name": "c", "city": "oslo", "age": 3}]}),
    ("filters_text_more", "{{ 'a b  c\nd-e' | wordcount }}|{{ 'hello world foo bar' | truncate(11) }}|"
     "{{ 'hello world' | truncate(5, true) }}|{{ 'hello world foo' | truncate(9, false, '..', 0) }}|"
     "{{ 'short' | truncate(10) }}|{{ 'hello worlds' | truncate(11) }}|[{{ 'ab' | center(6) }}]"
     "[{{ 'ab' | center(7) }}][{{ 'abcdef' | center(3) }}]|{{ '%s-%d' | format('a', 3) }}|"
     "{{ '%(x)s/%(y)r' | format(x=1, y='q') }}|{{ '%.2f%%' | format(2.5) }}|{{ '%5s|%-4d|' | format('a', 7) }}|"
     "{% set ns = namespace(x=5) %}[{{ d | attr('a') }}][{{ ns | attr('x') }}]",
     {"d": {"a": 1}}),
    ("tests_filter_test", "{{ 'upper' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }} "
     "{{ 'nope' is test }} {{ 'tojson' is filter }}", {}),
    ("string_methods_more", "{{ '{} and {}'.format('a', 1) }}|{{ '{0}{1}{0}'.format('x', 'y') }}|"
     "{{ '{name}!'.format(name='n') }}|{{ '{{x}}'.format() }}|{{ 'a-b-c'.partition('-') }}|"
     "{{ 'a-b-c'.rpartition('-') }}|[{{ 'ab'.center(6, '*') }}][{{ 'ab'.ljust(4) }}][{{ 'ab'.rjust(4, '0') }}]|"
     "{{ '42'.zfill(5) }}|{{ '-4'.zfill(4) }}|{{ 'MiXeD'.swapcase() }}|"
     "{{ 'a b'.title() }}|{{ '\n\nx\n'.lstrip('\n') }}", {}),
    ("tojson_arguments", "{{ d | tojson(separators=(',', ':')) }}|{{ d | tojson(ensure_ascii=true) }}|"
     "{{ d | tojson(indent=2, separators=(',', ': ')) }}|{{ d | tojson(indent='\t', sort_keys=true) }}|"
     "{{ [1, [2]] | tojson(indent=1) }}",
     {"d": {"z": "é😀", "a": [1, None]}}),
    ("macro_call_arguments", "{% macro list_items(items) %}{% for i in items %}{{ caller(i) }}"
     "{% endfor %}{% endmacro %}{% call(item) list_items([1, 2]) %}<{{ item }}>{% endcall %}|"
     "{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}", {}),
    ("set_block_filter", "{% set x | upper %}ab{{ 'c' }}{% endset %}{{ x }}|"
     "{% filter replace('a', 'b') | upper %}aXa{% endfilter %}", {}),
    ("loop_depth_and_cycle", "{% for x in [1, 2, 3] %}{{ loop.depth }}{{ loop.depth0 }}"
     "{{ loop.cycle('a', 'b') }}{{ loop.previtem is defined }}{{ loop.nextitem | default('-') }} "
     "{% endfor %}", {}),
    ("tests_text_and_callable", "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'aBc' is lower }} "
     "{{ range is callable }} {{ 1 is callable }} {{ 'x' is ne 'y' }} "
     "{{ 3 is gt 2 }} {{ 3 is le 2 }} {{ true is sameas true }} {{ 1 is sameas true }}", {}),
    ("string_methods_predicates", "{{ 'abc'.removeprefix('a') }} {{ 'abc'.removesuffix('c') }} "
     "{{ '12'.isdigit() }} {{ 'ab'.isalpha() }} {{ ' \t'.isspace() }} {{ 'a1'.isalnum() }} "
     "{{ 'ab1'.islower() }} {{ 'AB'.isupper() }} {{ 'a\nb\r\nc'.splitlines() }} "
     "{{ 'abcb'.rfind('b') }} {{ 'abc'.index('c') }} {{ [1, 2, 1].count(1) }} {{ (1, 2).index(2) }}",
     {}),
    # Errors: jinja2 raises, and so must we (the tests compare the message).
    ("error_raise_exception", "{{ raise_exception('Custom failure: ' ~ 42) }}", {}),
    ("error_undefined_attribute", "{{ nope.attr }}", {}),
    ("error_missing_key_chained", "{{ m.tool_calls[0] }}", {"m": {"role": "user"}}),
    ("error_list_index_chained", "{{ l[5].a }}", {"l": [1]}),
    ("error_string_plus_int", "{{ 'a' + 1 }}", {}),
    ("error_undefined_plus", "{{ nope + 'a' }}", {}),
    ("error_compare_types", "{{ 1 < 'a' }}", {}),
    ("error_list_append_unsafe", "{% set l = [1] %}{{ l.append(2) }}", {}),
    ("error_truncate_shorter_than_end", "{{ 'abcdef' | truncate(2) }}", {}),
    ("error_namespace_underscore", "{% set ns = namespace() %}{% set ns._x = 1 %}", {}),
]


def make_features_reference():
    cases = []
    for name, source, variables in FEATURES:
        case = {"name": name, "template": source, "variables": variables}
        try:
            compiled = chat_template_utils._compile_jinja_template(source)
            case["output"] = compiled.render(**variables)
        except jinja2.exceptions.TemplateError as error:
            case.update(error_record(error))
        except (TypeError, ValueError, AssertionError) as error:
            case.update(error_record(error))
        cases.append(case)
    return {"jinja2_version": jinja2.__version__, "strftime_now": FIXED_NOW.isoformat(),
            "cases": cases}


# A tokenizer transformers loads without a model: the smallest BPE tokenizer.json.
SELECTION_TOKENIZER = {
    "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
    "normalizer": None, "pre_tokenizer": None, "post_processor": None, "decoder": None,
    "model": {"type": "BPE", "dropout": None, "unk_token": None,
              "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": False,
              "byte_fallback": False, "ignore_merges": False,
              "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]},
}
DEFAULT_SOURCE = "D:{% for m in messages %}{{ m.content }}{% endfor %}"
TOOL_USE_SOURCE = "T:{{ tools | length }}"
RAG_SOURCE = "R:{{ documents }}"
FILE_SOURCE = "F:{% for m in messages %}{{ m.content }}{% endfor %}"
# (name, tokenizer_config "chat_template" or None, files beside it {relative path: text}).
SELECTION_SCENARIOS = [
    ("config_string", DEFAULT_SOURCE, {}),
    ("config_list", [{"name": "default", "template": DEFAULT_SOURCE},
                     {"name": "tool_use", "template": TOOL_USE_SOURCE}], {}),
    ("config_list_without_default", [{"name": "tool_use", "template": TOOL_USE_SOURCE},
                                     {"name": "rag", "template": RAG_SOURCE}], {}),
    ("config_list_repeated_name", [{"name": "default", "template": DEFAULT_SOURCE},
                                   {"name": "default", "template": FILE_SOURCE}], {}),
    ("jinja_file_wins_over_config_list",
     [{"name": "default", "template": DEFAULT_SOURCE},
      {"name": "tool_use", "template": TOOL_USE_SOURCE}],
     {"chat_template.jinja": FILE_SOURCE}),
    ("jinja_file_wins_over_config_string", DEFAULT_SOURCE, {"chat_template.jinja": FILE_SOURCE}),
    ("additional_templates_replace_config", DEFAULT_SOURCE,
     {"additional_chat_templates/tool_use.jinja": TOOL_USE_SOURCE}),
    ("jinja_file_and_additional_templates", None,
     {"chat_template.jinja": FILE_SOURCE,
      "additional_chat_templates/tool_use.jinja": TOOL_USE_SOURCE,
      "additional_chat_templates/rag.jinja": RAG_SOURCE,
      "additional_chat_templates/notes.txt": "not a template"}),
    ("additional_default_wins_over_jinja_file", None,
     {"chat_template.jinja": FILE_SOURCE,
      "additional_chat_templates/default.jinja": DEFAULT_SOURCE}),
]
# What get_chat_template is asked: (requested name or None, tools or None).
SELECTION_REQUESTS = [(None, None), (None, []), (None, [WEATHER_TOOL]), ("tool_use", None),
                      ("default", None), ("rag", [WEATHER_TOOL])]


def make_selection_reference():
    """How transformers loads and picks chat templates from a model folder: the loaded
    tokenizer.chat_template and, for each request, the template get_chat_template returns."""
    import tempfile
    scenarios = []
    for name, config_template, files in SELECTION_SCENARIOS:
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
                json.dump(SELECTION_TOKENIZER, f)
            config = {"tokenizer_class": "PreTrainedTokenizerFast"}
            if config_template is not None:
                config["chat_template"] = config_template
            with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
                json.dump(config, f)
            for path, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(folder, path)), exist_ok=True)
                with open(os.path.join(folder, path), "w", encoding="utf-8") as f:
                    f.write(text)
            tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
            requests = []
            for requested, tools in SELECTION_REQUESTS:
                request = {"name": requested, "tools": tools}
                try:
                    request["template"] = tokenizer.get_chat_template(requested, tools)
                except ValueError as error:
                    request["error"] = str(error)
                requests.append(request)
            scenarios.append({"name": name, "config_chat_template": config_template,
                              "files": files, "loaded": tokenizer.chat_template,
                              "requests": requests})
    return {"transformers_version": transformers.__version__,
            "tokenizer_json": SELECTION_TOKENIZER, "scenarios": scenarios}


def write(name, data):
    path = os.path.join(HERE, name)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)
    print("wrote", path)


def main():
    shared = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        HERE, "..", "..", "..", "..", "shared", "tokenizers")
    write("chat_reference.json", make_chat_reference(os.path.abspath(shared)))
    write("features_reference.json", make_features_reference())
    write("chat_template_selection.json", make_selection_reference())


if __name__ == "__main__":
    main()
