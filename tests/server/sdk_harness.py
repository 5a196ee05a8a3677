"""A `llmrt serve` child process for the SDK tests (openai_sdk_test.py, anthropic_sdk_test.py),
and the scripted agent plan they share (make_agent_model.py)."""
import os
import re
import signal
import subprocess
import time

import make_agent_model


class ServerProcess:
    """`llmrt serve PLAN --port 0 --model-name NAME FLAGS`; the port is read from its
    'listening on' line."""

    def __init__(self, llmrt, plan, work, model_name, *flags):
        self.stderr_path = os.path.join(work, "server-%d.err" % time.monotonic_ns())
        self.stderr = open(self.stderr_path, "w")
        self.process = subprocess.Popen(
            [llmrt, "serve", plan, "--port", "0", "--model-name", model_name, *flags],
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

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=120)
        self.stderr.close()
        return code


def agent_plan(llmc, work):
    """The scripted Qwen3 plan (real Qwen3 tokenizer and chat template): every reply is
    make_agent_model.QWEN_REPLY -- reasoning, "Let me check.", then calls get_weather(city=Paris)
    and get_time(zone=CET) -- whatever the prompt. Returns the plan's path."""
    model = os.path.join(work, "agent-model")
    make_agent_model.make(llmc, "qwen3", model, make_agent_model.QWEN_REPLY)
    plan = os.path.join(work, "agent.plan")
    subprocess.run([llmc, "compile", model, "-o", plan, "--quiet"], check=True,
                   stdout=subprocess.DEVNULL)
    return plan


def run_tests(module):
    """Reads --llmc and --llmrt into module.ARGS and runs the module's unittest cases."""
    import argparse
    import sys
    import unittest
    parser = argparse.ArgumentParser()
    parser.add_argument("--llmc", required=True)
    parser.add_argument("--llmrt", required=True)
    module.ARGS, rest = parser.parse_known_args()
    unittest.main(module=module, argv=[sys.argv[0], "-v", *rest])
