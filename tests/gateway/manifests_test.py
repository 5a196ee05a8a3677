#!/usr/bin/env python3
"""deploy/kubernetes/ describes a replica that really starts and behaves as the manifests say.

Reads the manifests with PyYAML and checks what a gateway relies on: probes on /health at the
HTTP port, a preStop pause, a grace period longer than preStop + --drain-timeout, resources,
scrape annotations that name the serving port, a Service that selects the Deployment's pods and
exposes the HTTP and KV-event ports. Then runs `llmrt serve` with the container's own command
and args (the plan path, the address and the KV-event port replaced for a test machine, $(POD_IP)
expanded) and LLMRT_API_KEY set as the Secret would: /health answers, /metrics and the chat
page need no key, the API and /kv_cache/blocks do, KV events are published, and SIGTERM drains to exit code 0.

    python3 manifests_test.py --llmc build/bin/llmc --llmrt build/bin/llmrt \
        --model-dir tests/data/stories260K --deploy-dir deploy/kubernetes

Skips (exit 77, saying why) when PyYAML is missing.
"""
import os
import re
import shutil
import subprocess
import tempfile
import time

import gateway_harness

try:
    import yaml
except ImportError:
    gateway_harness.skip("manifests_test", "the PyYAML package (import yaml) is not importable")


def flag(args, name):
    return args[args.index(name) + 1]


def main():
    args = gateway_harness.arguments("--deploy-dir")
    documents = {}
    for name in sorted(os.listdir(args.deploy_dir)):
        if name.endswith(".yaml") and name != "kustomization.yaml":
            with open(os.path.join(args.deploy_dir, name)) as f:
                for document in yaml.safe_load_all(f):
                    documents[document["kind"]] = document
    deployment, service = documents["Deployment"], documents["Service"]
    pod = deployment["spec"]["template"]
    container = pod["spec"]["containers"][0]
    command, container_args = container["command"], container["args"]
    assert command[:2] == ["llmrt", "serve"], command
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert int(flag(container_args, "--port")) == ports["http"]
    assert flag(container_args, "--kv-events-endpoint").endswith(":%d" % ports["kv-events"])
    assert flag(container_args, "--kv-events-replay-endpoint").endswith(
        ":%d" % ports["kv-replay"])
    assert "--metrics-public" in container_args
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}, probe
    pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    grace = pod["spec"]["terminationGracePeriodSeconds"]
    assert grace > pre_stop + float(flag(container_args, "--drain-timeout")), grace
    assert container["resources"]["requests"] and container["resources"]["limits"]
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == ports["http"]
    assert annotations["prometheus.io/path"] == "/metrics"
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert pod["metadata"]["labels"].items() >= service["spec"]["selector"].items()
    assert {p["targetPort"] for p in service["spec"]["ports"]} == set(ports)

    work = tempfile.mkdtemp(prefix="llmrt-manifests-")
    try:
        plan = gateway_harness.stories_plan(args.llmc, args.model_dir, work)
        env = {variable["name"]: variable for variable in container["env"]}
        assert env["LLMRT_API_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "llmrt-api-key"
        assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
        # A test machine: loopback, any free port, and a small KV pool (the manifest's
        # fraction of this machine's memory is not this test's business).
        local = {"--host": "127.0.0.1", "--port": "0",
                 "--kv-events-endpoint": "tcp://127.0.0.1:*",
                 "--kv-events-replay-endpoint": "tcp://127.0.0.1:*", "--kv-memory-fraction": "0.02"}
        run_args = []
        for index, value in enumerate(container_args):
            previous = container_args[index - 1] if index else None
            run_args.append(local.get(previous, value).replace("$(POD_IP)", "127.0.0.1"))
        stderr_path = os.path.join(work, "server.err")
        with open(stderr_path, "w") as stderr:
            process = subprocess.Popen(
                [args.llmrt, "serve", plan] + run_args, stdout=subprocess.DEVNULL, stderr=stderr,
                env=dict(os.environ, LLMRT_API_KEY="manifest-key"))
        deadline, port, log = time.monotonic() + 60, None, ""
        while port is None and time.monotonic() < deadline and process.poll() is None:
            with open(stderr_path) as f:
                log = f.read()
            match = re.search(r"listening on http://[0-9.]+:([0-9]+)", log)
            port = int(match.group(1)) if match else time.sleep(0.05)
        assert port is not None, log
        assert re.search(r"kv events on tcp://127.0.0.1:[0-9]+", log), log
        assert re.search(r"kv events replay on tcp://127.0.0.1:[0-9]+", log), log
        url = "http://127.0.0.1:%d" % port
        assert gateway_harness.http("GET", url + "/health")[0] == 200
        status, page = gateway_harness.http("GET", url + "/metrics")
        assert status == 200 and 'vllm:num_requests_running{model_name="model"} 0' in page
        assert gateway_harness.http("GET", url + "/v1/models")[0] == 401
        # The chat page holds no data: it needs no key (its API calls send the one typed in).
        status, page = gateway_harness.http("GET", url + "/")
        assert status == 200 and "<title>llmrt chat</title>" in page, status
        assert gateway_harness.http("GET", url + "/kv_cache/blocks")[0] == 401
        status, models = gateway_harness.http(
            "GET", url + "/v1/models", headers={"Authorization": "Bearer manifest-key"})
        assert status == 200 and models["data"][0]["id"] == "model", models
        process.terminate()
        assert process.wait(timeout=60) == 0
        print("manifests_test: OK")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
