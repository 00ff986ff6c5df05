#!/usr/bin/env python3
"""Benchmark: the placement's cost model on this machine, and the 9B + Laya scenario.

Measured in one run on this machine, with the pinned engine:

 1. what a request costs per prompt token on this CPU, for the SmolLM2 and Gemma-3
    deciders and the full-size laya-shape, kev-4b-shape and kev-9b-shape (zero weights,
    real compute), each served by `tandem serve` with `device: cpu` (so tandem's own cost
    records are fed exactly as in production), at two prompt sizes with distinct states
    (no prompt-cache reuse); then the estimate from the header against it: with no
    measurement (80 GFLOP/s per core) and calibrated by the other models (leave one out,
    as tandem calibrates by every measured model);
 2. the 9B + Laya scenario on a 6 GiB card: `tandem plan` with those measured CPU costs
    (the GPU side is the estimate: no GPU here), each arrangement's expected latency per
    decide-then-verify request, for Kev-9B Q4_K_M and IQ3_M.

Usage:
  build/venv/bin/python bench/placement_bench.py --tandem build/tandem --out docs/benchmarks.md
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from mdsection import replace_section  # noqa: E402
from serve_bench import (FIXTURES, Cleanup, Conn, cpu_model, engine_version, log,  # noqa: E402
                         start_serve, status_models, wait_quiet)

MODELS = {  # name: (ctx, repeats per size)
    "smollm2-decider": (2048, 3),
    "gemma3-decider": (2048, 3),
    "laya-shape": (512, 3),
    "kev-4b-shape": (2048, 2),
    "kev-9b-shape": (2048, 2),
}
SHORT = ["Disk usage on the database host reached {n}% overnight.",
         "Runner {n} failed three nightly jobs with out-of-memory errors.",
         "API latency doubled to {n} ms after the last deploy."]
LONG_TAIL = (" The on-call engineer notes that the nightly documentation builds, the log "
             "compaction and the integration suite all start at the same time, that two "
             "runners were taken out for maintenance yesterday, that the queue holds {n} jobs, "
             "and that the release branch must be cut before noon; the product team asked "
             "whether the release can go ahead, and the database team asked whether the "
             "maintenance window can move to the weekend. Memory pressure shows in swap "
             "activity on three hosts, and a disk on the artifact store is at 88%.")
QUESTION = {"act": {"type": "choice", "instructions": "What should the operator do?",
                    "criteria": {"reduce": "reduce concurrency", "stop": "stop non-critical jobs",
                                 "nothing": "change nothing"}}}
DEFAULT_FLOPS_PER_CORE = 80e9  # src/plan/cost.h COST_CPU_FLOPS_PER_CORE


def config(name, ctx):
    return (f"limits:\n  request_timeout: 600s\nmodels:\n  {name}:\n"
            f"    path: {FIXTURES / (name + '.gguf')}\n    ctx: {ctx}\n    device: cpu\n"
            f"    keep_alive: forever\n")


def n_params(tandem, name):
    out = subprocess.run([tandem, "inspect", str(FIXTURES / f"{name}.gguf"), "--json"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["parameters"]


def measure(tandem, tmp, name, ctx, reps, cleanup):
    """Requests of two sizes through `tandem serve` (device: cpu); returns the points."""
    wait_quiet()
    serve, stop = start_serve(tandem, tmp, f"place-{name}", None, cleanup,
                              config=config(name, ctx))
    conn = Conn(serve.url, timeout=900)
    points, n = [], 0
    for size in ("short", "long"):
        for r in range(reps):
            n += 1
            state = SHORT[r % 3].format(n=40 + n)
            if size == "long":
                state += LONG_TAIL.format(n=100 + n)
            body = {"model": name, "state": state, "questions": QUESTION}
            st, raw, dt = conn.request("POST", "/v1/systemone", body)
            if st != 200:
                raise RuntimeError(f"{name}: {st} {raw[:300]!r}")
            tokens = json.loads(raw)["usage"]["input_tokens"]
            points.append((tokens, dt, n == 1))
            log(f"{name}: {tokens} tokens in {dt:.3f} s")
    ready_ms = status_models(serve)[name]["swap"]["ready_ms"]
    conn.close()
    stop()
    return points, ready_ms


def fit(points):
    """Least squares t = a + b x over warm points (the first answer excluded)."""
    warm = [(x, y) for x, y, first in points if not first]
    xs, ys = [p[0] for p in warm], [p[1] for p in warm]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in warm) / sxx if sxx else my / mx
    return my - b * mx, b, sum(ys) / sum(xs)


def plan(tandem, kev):
    out = subprocess.run([tandem, "plan", str(FIXTURES / f"{kev}.gguf"),
                          str(FIXTURES / "laya-shape.gguf"), "--vram", "6GiB", "--reserve",
                          "512MiB", "--ctx", "8192", "--json"], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out)["placement"]


def gib(b):
    return f"{b / (1 << 30):.2f}"


def render(rows, plans, args, took):
    cores = os.cpu_count()
    lines = [
        "Measured on this machine (" + cpu_model() + f", {cores} cores, no GPU), "
        f"{datetime.date.today()}, engine {engine_version()}, in {took:.0f} s, by "
        "`build/venv/bin/python bench/placement_bench.py --tandem build/tandem "
        "--out docs/benchmarks.md`.",
        "",
        "### 1. Request cost per prompt token on this CPU, and the estimate's error",
        "",
        "Each model served by `tandem serve` with `device: cpu`; requests of about 40 and "
        "150 prompt tokens with distinct states. `fixed` and `per token` are a least-squares "
        "fit over the warm answers; `recorded` is what tandem stores (time over tokens). The "
        "estimate is 2 x parameters / FLOP/s: `default` with no measurement "
        f"({DEFAULT_FLOPS_PER_CORE / 1e9:.0f} GFLOP/s per core), `calibrated` with this "
        "host's FLOP/s from the other models' measurements (leave one out; tandem uses the "
        "median of every measured model).",
        "",
        "| model | parameters | load (ms) | fixed (ms) | per token (ms) | recorded (ms/token) "
        "| effective GFLOP/s | default estimate | error | calibrated estimate | error |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    flops = {r["name"]: 2 * r["params"] / r["recorded"] for r in rows}
    for r in rows:
        others = [f for n, f in flops.items() if n != r["name"]]
        default = 2 * r["params"] / (DEFAULT_FLOPS_PER_CORE * cores)
        calib = 2 * r["params"] / statistics.median(others)
        lines.append(
            f"| {r['name']} | {r['params'] / 1e9:.3f} B | {r['ready_ms']} | {r['a'] * 1000:.0f} "
            f"| {r['b'] * 1000:.2f} | {r['recorded'] * 1000:.2f} | {flops[r['name']] / 1e9:.0f} "
            f"| {default * 1000:.2f} | {(default / r['recorded'] - 1) * 100:+.0f}% "
            f"| {calib * 1000:.2f} | {(calib / r['recorded'] - 1) * 100:+.0f}% |")
    lines += ["", "### 2. Kev-9B + Laya on a 6 GiB card: expected latency per pipeline request",
              "",
              "`tandem plan KEV laya-shape --vram 6GiB --reserve 512MiB --ctx 8192` with the CPU "
              "costs just measured (the GPU costs are the estimate: no GPU here); one "
              "decide-then-verify request of 256 prompt tokens per stage, one client.", ""]
    for kev, p in plans.items():
        lines += [f"**{kev}**", "",
                  "| arrangement | fits | GPU (GiB) | host (GiB) | loads per request "
                  "| expected s per request | |",
                  "|---|---|---|---|---|---|---|"]
        for i, a in enumerate([p["chosen"], *p["rejected"]]):
            lines.append(f"| {a['label']} | {'yes' if a['fits'] else 'no'} "
                         f"| {gib(a['memory']['gpu:0'])} | {gib(a['memory']['host'])} "
                         f"| {a['work'][0]['loads']:.0f} | {a['expected_s']:.2f} "
                         f"| {'**chosen**' if i == 0 else a['reason']} |")
        costs = {c["name"]: c for c in p["costs"]}
        laya = costs["laya-shape.gguf"]["cpu"]
        kev_gpu = costs[f"{kev}.gguf"]["gpu"]
        lines += ["", f"Laya on the CPU: {laya['token_s'] * 1000:.2f} ms per token "
                  f"({'measured' if laya['token_measured'] else 'estimated'}), "
                  f"{laya['token_s'] * 256:.2f} s per 256-token verify; one switch to "
                  f"{kev} costs {kev_gpu['load_s']:.1f} s (estimated), and rotation pays two "
                  "per request.", ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tandem", default=str(ROOT / "build" / "tandem"))
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = ap.parse_args()
    t0 = time.time()
    rows = []
    cleanup = Cleanup()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for name, (ctx, reps) in MODELS.items():
                points, ready_ms = measure(args.tandem, Path(tmp), name, ctx, reps, cleanup)
                a, b, recorded = fit(points)
                rows.append({"name": name, "params": n_params(args.tandem, name), "a": a,
                             "b": b, "recorded": recorded, "ready_ms": ready_ms})
        finally:
            cleanup.run()
    plans = {k: plan(args.tandem, k) for k in ("kev-9b-shape", "kev-9b-iq3m-shape")}
    text = render(rows, plans, args, time.time() - t0)
    print(text)
    replace_section(Path(args.out), "placement", "## 5. Placement: the cost model and Kev-9B + Laya",
                    text)


if __name__ == "__main__":
    main()
