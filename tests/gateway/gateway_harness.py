"""Shared pieces of the gateway tests: the command line, the stories260K plan with a plain chat
template, `llmrt serve` child processes, HTTP helpers, and the exit code ctest reads as
"skipped"."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

# The server harness of the SDK tests, beside this folder.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
import sdk_harness  # noqa: E402

SKIP = 77  # SKIP_RETURN_CODE of every test in tests/gateway/CMakeLists.txt

CHAT_TEMPLATE = ("{{ bos_token }}{% for message in messages %}{{ message['role'] }}: "
                 "{{ message['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant:"
                 "{% endif %}")


def skip(test, why):
    print("%s: SKIPPED: %s (scripts/install-deps.sh installs it)" % (test, why))
    sys.exit(SKIP)


def stories_plan(llmc, model_dir, work):
    """Compiles stories260K with CHAT_TEMPLATE; returns the plan's path."""
    model = os.path.join(work, "model")
    shutil.copytree(model_dir, model)
    with open(os.path.join(model, "chat_template.jinja"), "w") as f:
        f.write(CHAT_TEMPLATE)
    plan = os.path.join(work, "stories.plan")
    subprocess.run([llmc, "compile", model, "-o", plan, "--quiet"], check=True,
                   stdout=subprocess.DEVNULL)
    return plan


class Server(sdk_harness.ServerProcess):
    """`llmrt serve PLAN --port 0 --model-name stories FLAGS` (tests/server/sdk_harness.py),
    plus the KV-event endpoints it printed (--kv-events-endpoint, --kv-events-replay-endpoint)."""

    def __init__(self, llmrt, plan, work, *flags):
        super().__init__(llmrt, plan, work, "stories", *flags)
        with open(self.stderr_path) as f:
            log = f.read()
        events = re.search(r"kv events on (\S+)", log)
        replay = re.search(r"kv events replay on (\S+)", log)
        self.kv_events_endpoint = events.group(1) if events else None
        self.kv_events_replay_endpoint = replay.group(1) if replay else None


def arguments(*extra):
    """The command line every gateway test takes: --llmc, --llmrt, --model-dir and `extra`."""
    parser = argparse.ArgumentParser()
    for flag in ("--llmc", "--llmrt", "--model-dir") + extra:
        parser.add_argument(flag, required=True)
    return parser.parse_args()


def http(method, url, body=None, headers=None, timeout=120):
    """(status, parsed JSON or text) of one request; HTTP errors are returned, not raised."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, raw, kind = response.status, response.read(), response.headers.get(
                "Content-Type", "")
    except urllib.error.HTTPError as error:
        status, raw, kind = error.code, error.read(), error.headers.get("Content-Type", "")
    text = raw.decode()
    return status, json.loads(text) if kind.startswith("application/json") else text
