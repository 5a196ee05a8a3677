#!/usr/bin/env python3
"""The GPU kit's report: REPORT_DIR/report.json and report.txt from run.sh's DETAILS_DIR.

Reads checks.tsv (one line per check), the gtest JSON of the two test programs, the JSON Lines
of `llmrt bench` (bench-<plan>-b<batch>.jsonl) and kit-bench's JSON (kitbench-<plan>.json);
prints the summary table last. Standard library only: the lent machine has a stock Python.
Exit status 0, or 1 when a check failed.
"""
import argparse
import glob
import json
import os
import sys

# docs/cuda.md's cost table (llmc-cuda-cost): every kernel of a decode step at its bandwidth
# bound, no launch overhead, TinyLlama-1.1B f16 at context 1024. H100 scales the H200 bound by
# the bandwidth ratio 4.8 / 3.35 TB/s (the model's H200 figure is bandwidth-bound throughout).
PREDICTED_TINYLLAMA_DECODE_US = {"H200": 442.8, "H100": 442.8 * 4.8 / 3.35, "A100": 1042.4}
# The same for the Qwen3-MoE-1.6B-A0.4B f16 decode step (8 distinct experts a layer: 935 MB),
# and the launches of either step (~3 us each without CUDA graphs: 13 x 22 for TinyLlama, 412
# for the MoE shape).
PREDICTED_QWEN3_MOE_DECODE_US = {"H200": 194.8, "H100": 194.8 * 4.8 / 3.35}
LAUNCH_OVERHEAD_MS = {"tinyllama": 0.9, "qwen3-moe": 1.24}


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def load_jsonl(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    rows.append(json.loads(line))
    except (OSError, ValueError):
        pass
    return rows


def gtest_cases(path):
    """(name, status, failure message) per test case of a gtest JSON report."""
    data = load_json(path)
    cases = []
    if not data:
        return cases
    for suite in data.get("testsuites", []):
        for case in suite.get("testsuite", []):
            name = suite["name"] + "." + case["name"]
            failures = case.get("failures", [])
            if failures:
                status = "fail"
            elif case.get("result") == "SKIPPED" or case.get("status") == "NOTRUN":
                status = "skip"
            else:
                status = "pass"
            props = {k: v for k, v in case.items()
                     if k in ("device", "table", "greedy_equal", "kernels")}
            message = failures[0].get("failure", "").splitlines()[0:3] if failures else []
            cases.append({"name": name, "status": status, "properties": props,
                          "failure": " / ".join(message)})
    return cases


def predicted_us(device, table=PREDICTED_TINYLLAMA_DECODE_US):
    for key, value in table.items():
        if key in device:
            return key, value
    return None, None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("details_dir")
    parser.add_argument("report_dir")
    parser.add_argument("--device", default="0")
    parser.add_argument("--seconds", type=int, default=0)
    args = parser.parse_args()
    directory = args.details_dir

    checks = []
    with open(os.path.join(directory, "checks.tsv")) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) == 4:
                checks.append({"name": fields[0], "result": fields[1], "seconds": int(fields[2]),
                               "detail": fields[3]})
    device_text = open(os.path.join(directory, "device.txt")).read().strip()
    has_device = args.device == "1"

    tests = {name: gtest_cases(os.path.join(directory, name + ".json"))
             for name in ("backend_cuda_test", "kit_gpu_test")}

    bench = []
    for path in sorted(glob.glob(os.path.join(directory, "bench-*.jsonl"))):
        plan = os.path.basename(path)[len("bench-"):].rsplit("-b", 1)[0]
        for row in load_jsonl(path):
            row["plan"] = plan
            bench.append(row)
    kitbench = {}
    for path in sorted(glob.glob(os.path.join(directory, "kitbench-*.json"))):
        data = load_json(path)
        if data:
            kitbench[os.path.basename(path)[len("kitbench-"):-len(".json")]] = data

    # One row per (plan, batch): llmrt bench's rates, kit-bench's device figures.
    rows = []
    for row in bench:
        plan, batch = row["plan"], row.get("batch", 1)
        out = {"plan": plan, "batch": batch, "backend": row.get("backend", ""),
               "prefill_tok_s": row.get("pp_tok_s"), "decode_tok_s": row.get("tg_tok_s"),
               "ms_per_step": row.get("ms_per_token"),
               "bytes_per_step": row.get("decode_bytes_per_step"),
               # MoE plans: experts chosen per layer and step (the bytes count only those)
               "active_experts": row.get("moe_active_experts") if row.get("moe_layers") else None}
        device = kitbench.get(plan)
        if device:
            copy = device["copy_bytes_per_s"]
            out["copy_gb_s"] = copy / 1e9
            if out["bytes_per_step"] and out["ms_per_step"]:
                out["mbu"] = out["bytes_per_step"] / (out["ms_per_step"] / 1e3) / copy
                out["bound_ms"] = out["bytes_per_step"] / copy * 1e3
            for decode in device.get("decode", []):
                if decode["batch"] == batch:
                    out["kit_step_ms"] = decode["step_ms"]
                    out["kit_mbu"] = decode["mbu"]
                    out["kernels"] = decode["kernels"]
                    out["kernel_us_sum"] = sum(k["us_per_step"] for k in decode["kernels"])
        else:
            out["mbu_host"] = row.get("mbu")
        rows.append(out)

    prediction = None
    name, value = predicted_us(device_text)
    if value is not None:
        prediction = {"device": name, "tinyllama_f16_decode_bound_us": value,
                      "qwen3_moe_f16_decode_bound_us":
                          predicted_us(device_text, PREDICTED_QWEN3_MOE_DECODE_US)[1],
                      "source": "docs/cuda.md cost table (context 1024)"}

    failed = [c for c in checks if c["result"] != "pass"]
    report = {"device": device_text, "has_device": has_device, "seconds": args.seconds,
              "checks": checks, "tests": tests, "bench": rows, "kitbench": kitbench,
              "prediction": prediction, "passed": not failed}
    with open(os.path.join(args.report_dir, "report.json"), "w") as f:
        json.dump(report, f, indent=1)

    lines = []
    lines.append("GPU kit report: %s" % device_text)
    lines.append("%d s in all; %d of %d checks passed%s" % (
        args.seconds, len(checks) - len(failed), len(checks),
        "" if has_device else " (no CUDA device: the CPU half)"))
    lines.append("")
    lines.append("%-20s %-6s %5s  %s" % ("check", "result", "s", "what"))
    for c in checks:
        lines.append("%-20s %-6s %5d  %s" % (c["name"], c["result"], c["seconds"], c["detail"]))
    for test, cases in tests.items():
        counts = {s: sum(1 for c in cases if c["status"] == s) for s in ("pass", "fail", "skip")}
        lines.append("%-20s %d passed, %d failed, %d skipped" % (
            test, counts["pass"], counts["fail"], counts["skip"]))
        for c in cases:
            if c["status"] == "fail":
                lines.append("  FAIL %s: %s" % (c["name"], c["failure"][:160]))
    if rows:
        lines.append("")
        lines.append("%-30s %5s %7s %11s %11s %9s %9s %7s %6s %7s" % (
            "plan", "batch", "backend", "prefill t/s", "decode t/s", "ms/step", "bound ms",
            "MBU", "copyGB", "experts"))
        for r in rows:
            # Against the device's copy bandwidth. On the CPU against llmrt bench's read probe,
            # for MoE rows only: a dense smoke plan (stories260K) fits in the caches.
            mbu = r.get("mbu") or (r.get("mbu_host") if r["active_experts"] is not None else None)
            lines.append("%-30s %5d %7s %11.1f %11.1f %9.3f %9s %7s %6s %7s" % (
                r["plan"][:30], r["batch"], r["backend"], r["prefill_tok_s"] or 0,
                r["decode_tok_s"] or 0, r["ms_per_step"] or 0,
                "%.3f" % r["bound_ms"] if "bound_ms" in r else "-",
                "%.1f%%" % (100 * mbu) if mbu else "-",
                "%.0f" % r["copy_gb_s"] if "copy_gb_s" in r else "-",
                "%.1f" % r["active_experts"] if r["active_experts"] is not None else "-"))
        lines.append("(MoE rows: bytes and MBU count the experts each step chose, the batch's union "
                     "per layer; experts = that union's mean size per layer)")
        if not has_device:
            lines.append("(CPU figures from the no-device path: a smoke run, not a measurement)")
    for plan, data in kitbench.items():
        if not data.get("moe"):
            continue
        layers = data["moe"]
        lines.append("")
        lines.append("%s: %d MoE layers of %d experts, top %d, %.2f MB an expert" % (
            plan, len(layers), layers[0]["experts"], layers[0]["top_k"],
            layers[0]["bytes_per_expert"] / 1e6))
        for decode in data.get("decode", []):
            # llmrt-kit bench's sequences decode random tokens: at batch 16 they read the experts
            # a served batch would, where llmrt bench's identical sessions read top_k.
            active = decode.get("active_experts", [])
            lines.append("  batch %d (%s): %.3f ms/step, MBU %s; %.1f of %.1f MB a step are "
                         "experts; active per layer: %s" % (
                             decode["batch"], decode["table"], decode["step_ms"],
                             "%.1f%%" % (100 * decode["mbu"]) if "mbu" in decode else "-",
                             decode.get("expert_bytes_per_step", 0) / 1e6,
                             decode["bytes_per_step"] / 1e6, " ".join("%.1f" % a for a in active)))
    for plan, data in kitbench.items():
        for decode in data.get("decode", []):
            if decode["batch"] != 1 or not decode["kernels"]:
                continue
            lines.append("")
            lines.append("%s batch 1 decode: %.3f ms/step on the device clock, kernels (us/step):" % (
                plan, decode["step_ms"]))
            for k in decode["kernels"][:8]:
                lines.append("  %-56s %8.1f  x%.0f" % (k["name"][:56], k["us_per_step"],
                                                     k["launches_per_step"]))
    if prediction:
        for prefix, label, key in (
                ("tinyllama", "TinyLlama f16", "tinyllama_f16_decode_bound_us"),
                ("qwen3-moe", "Qwen3-MoE-1.6B-A0.4B f16", "qwen3_moe_f16_decode_bound_us")):
            if prediction.get(key) is None:
                continue
            measured = [r for r in rows if r["plan"].startswith(prefix) and
                        r["plan"].endswith("f16") and r["batch"] == 1]
            lines.append("")
            lines.append("prediction (%s): %s decode step %.1f us at the bandwidth bound, "
                         "+ ~%.1f ms launch overhead (docs/cuda.md)" % (
                             prediction["device"], label, prediction[key],
                             LAUNCH_OVERHEAD_MS[prefix]))
            for r in measured:
                lines.append("measured: %.1f us per step (MBU %.1f%%)" % (
                    r["ms_per_step"] * 1e3, 100 * r.get("mbu", 0)))
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.report_dir, "report.txt"), "w") as f:
        f.write(text)
    sys.stdout.write("\n" + text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
