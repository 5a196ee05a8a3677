"""Shared pieces of the gateway tests: the stories260K plan with a plain chat template, `llmrt
serve` child processes, HTTP helpers, and the exit code ctest reads as "skipped"."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

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


class Server:
    """`llmrt serve PLAN --port 0 --model-name stories FLAGS`; the port (and the KV-event
    endpoint, when asked for) are read from its stderr."""

    def __init__(self, llmrt, plan, work, *flags):
        self.stderr_path = os.path.join(work, "server-%d.err" % time.monotonic_ns())
        self.stderr = open(self.stderr_path, "w")
        self.process = subprocess.Popen(
            [llmrt, "serve", plan, "--port", "0", "--model-name", "stories", *flags],
            stdout=subprocess.DEVNULL, stderr=self.stderr)
        self.port = None
        self.kv_events_endpoint = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.port is None:
            text = self.log()
            match = re.search(r"listening on http://[0-9.]+:([0-9]+)", text)
            events = re.search(r"kv events on (\S+)", text)
            if match:
                self.port = int(match.group(1))
                self.kv_events_endpoint = events.group(1) if events else None
            elif self.process.poll() is not None:
                break
            else:
                time.sleep(0.02)
        if self.port is None:
            self.process.kill()
            raise RuntimeError("llmrt serve did not start: " + self.log())

    def log(self):
        with open(self.stderr_path) as f:
            return f.read()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=60)
        self.stderr.close()
        return code


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
