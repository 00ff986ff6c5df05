#!/usr/bin/env python3
"""Benchmark: what a model switch costs on the bare engine.

The script-glue setups tandem replaces switch models by stopping one
llama-server and starting another. This measures, side by side in one run on
this machine, with the pinned engine and the two real test models:
  - cold start: spawn until /health answers 200;
  - swap: SIGTERM the running model until it exits, then cold-start the other;
  - warm request: one 8-token chat completion on a loaded model.
It reports medians and the swap/warm ratio (how many warm requests one swap
costs), and writes a Markdown table. Usage:
  build/venv/bin/python bench/engine_start.py [--rounds N] [--out docs/bench-engine-start.md]
"""
import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from conftest import ENGINE, MODELS, PINS, LlamaServer, http  # noqa: E402

MODEL_FILES = {"smollm2-135m": PINS["SMOLLM2_GGUF"], "gemma3-270m": PINS["GEMMA3_GGUF"]}


def warm_request(server):
    t = time.monotonic()
    status, body = http("POST", server.url + "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Name a colour."}],
        "max_tokens": 8, "temperature": 0}, timeout=120)
    assert status == 200, body
    return time.monotonic() - t


def cpu_model():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="docs/bench-engine-start.md")
    args = ap.parse_args()
    names = list(MODEL_FILES)
    cold = {n: [] for n in names}
    warm = {n: [] for n in names}
    swaps = []
    with tempfile.TemporaryDirectory() as tmp:
        running = None
        for r in range(args.rounds):
            for name in names:  # alternate A, B, A, B... so noise hits both alike
                t0 = time.monotonic()
                if running:
                    running.stop()
                t1 = time.monotonic()
                server = LlamaServer(ENGINE, MODELS / MODEL_FILES[name],
                                     Path(tmp) / f"{name}-{r}.log").start()
                t2 = time.monotonic()
                cold[name].append(t2 - t1)
                if running:
                    swaps.append(t2 - t0)
                warm_request(server)  # first request pays one-off warm-up
                warm[name].extend(warm_request(server) for _ in range(3))
                running = server
                print(f"round {r + 1}: {name} cold start {t2 - t1:.2f}s", file=sys.stderr)
        running.stop()

    med = statistics.median
    warm_all = med([x for n in names for x in warm[n]])
    rows = [f"| {n} | {med(cold[n]):.2f} | {med(warm[n]) * 1000:.0f} |" for n in names]
    text = f"""# Engine cold start and model swap (bare llama-server)

Measured {datetime.date.today()} on this machine: {os.cpu_count()} CPU cores ({cpu_model()}),
no GPU; engine llama.cpp b{PINS['ENGINE_BUILD']} (CPU build), `-c 1024 -ngl 0 -fit off`.
Command: `make bench` (runs `bench/engine_start.py --rounds {args.rounds}`).
Timings on a shared 2-core machine are noisy; the ratios, measured side by side in
one run, are the result to compare.

| model | cold start, median (s) | warm 8-token completion, median (ms) |
|---|---|---|
{chr(10).join(rows)}

- Cold-start ratio gemma3-270m / smollm2-135m: **{med(cold['gemma3-270m']) / med(cold['smollm2-135m']):.2f}x**
- Median swap (stop one model, start the other, until healthy): **{med(swaps):.2f} s** over {len(swaps)} swaps
- One swap costs **{med(swaps) / warm_all:.0f}x** a warm 8-token completion

This is the floor for a swap: tiny models whose files sit in the page cache, on the
CPU. On a GPU a swap also creates a CUDA context and uploads the weights, which is
where the 8 to 18 s switches users report come from. Keeping decider and verifier
resident together (tandem serve) avoids the swap altogether.
"""
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
