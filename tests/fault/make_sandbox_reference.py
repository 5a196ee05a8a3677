#!/usr/bin/env python3
"""Renders template-injection payloads with transformers' own chat-template environment.

Template injection through a model's chat template (CVE-2024-34359, llama-cpp-python rendered
chat templates with a plain jinja2 Environment) lets a model file run code on the machine that
loads it. transformers renders with ImmutableSandboxedEnvironment; this script records what that
sandbox does with each payload, so security_test.cc can check that our interpreter never renders
more than it: the same output, or an error where jinja2's sandbox raised (our interpreter may
also refuse what jinja2 allows; it must never create a file or show internals).

Every payload tries to create MARKER; the test checks the file never appears.

Writes sandbox_reference.json next to this script.
Usage: python3 tests/fault/make_sandbox_reference.py      Needs: pip install jinja2 transformers
"""
import json
import os

import jinja2
from transformers.utils import chat_template_utils

HERE = os.path.dirname(os.path.abspath(__file__))
MARKER = "/tmp/llmrt-template-injection-marker"

PAYLOADS = [
    # The CVE-2024-34359 proof of concept: reach os through a class found by walking subclasses.
    ("cve_2024_34359",
     "{% for x in ().__class__.__base__.__subclasses__() %}{% if \"warning\" in x.__name__ %}"
     "{{ x()._module.__builtins__['__import__']('os').popen('touch " + MARKER + "') }}"
     "{% endif %}{% endfor %}"),
    ("string_class_mro", "{{ ''.__class__.__mro__[1].__subclasses__() }}"),
    ("self_globals",
     "{{ self.__init__.__globals__.__builtins__.__import__('os').popen('touch " + MARKER +
     "').read() }}"),
    ("cycler_globals", "{{ cycler.__init__.__globals__.os.popen('touch " + MARKER + "').read() }}"),
    ("lipsum_globals", "{{ lipsum.__globals__['os'].popen('touch " + MARKER + "').read() }}"),
    ("joiner_globals", "{{ joiner.__init__.__globals__ }}"),
    ("namespace_globals",
     "{{ namespace.__init__.__globals__.os.system('touch " + MARKER + "') }}"),
    ("raise_exception_globals", "{{ raise_exception.__globals__ }}"),
    ("strftime_globals", "{{ strftime_now.__globals__ }}"),
    ("message_class", "{{ messages.__class__ }}"),
    ("message_item_class", "{{ messages[0].__class__.__init__ }}"),
    ("attr_filter_class", "{{ messages|attr('__class__') }}"),
    ("map_attribute_class", "{{ messages|map(attribute='__class__')|list }}"),
    ("format_attribute", "{{ '{0.__class__}'.format(messages) }}"),
    ("format_filter", "{{ '%s'|format(messages[0]['content']) }}"),
    ("dict_class", "{{ dict.__class__ }}"),
    ("namespace_instance_class", "{{ namespace().__class__ }}"),
    ("string_method_globals", "{{ 'x'.upper.__globals__ }}"),
    ("mutate_messages", "{{ messages.append({'role': 'system', 'content': 'injected'}) }}"),
    ("mutate_message", "{% set _ = messages[0].update({'content': 'injected'}) %}{{ messages }}"),
    ("pop_messages", "{{ messages.pop() }}"),
    ("config_object", "{{ config }}"),
    ("request_object", "{{ request }}"),
    ("include_file", "{% include '/etc/passwd' %}"),
    ("import_file", "{% import '/etc/passwd' as passwd %}{{ passwd }}"),
    ("from_import_file", "{% from '/etc/passwd' import root %}{{ root }}"),
    ("extends_file", "{% extends '/etc/passwd' %}"),
    ("underscore_namespace_attribute",
     "{% set ns = namespace() %}{% set ns.__class__ = 1 %}{{ ns }}"),
    ("plain_template", "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"),
]

MESSAGES = [{"role": "user", "content": "hello"}]


def main():
    if os.path.exists(MARKER):
        os.remove(MARKER)
    cases = []
    for name, source in PAYLOADS:
        case = {"name": name, "template": source}
        try:
            rendered, _ = chat_template_utils.render_jinja_template(
                conversations=[MESSAGES], chat_template=source, add_generation_prompt=False)
            case["output"] = rendered[0]
        except Exception as error:  # the sandbox's SecurityError, TemplateNotFound, ...
            case["error_type"] = type(error).__name__
            case["error"] = str(error)
        cases.append(case)
    assert not os.path.exists(MARKER), "jinja2's sandbox let a payload create the marker file"
    with open(os.path.join(HERE, "sandbox_reference.json"), "w", encoding="utf-8") as f:
        json.dump({"jinja2_version": jinja2.__version__, "marker": MARKER,
                   "messages": MESSAGES, "cases": cases}, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
