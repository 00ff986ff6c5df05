#!/usr/bin/env python3
"""Benchmark: the memory planner's bytes against what llama-server allocated.

For each case it starts the pinned llama-server (CPU) with the case's settings,
reads the buffer-size lines it logs at -lv 4 (model, KV, recurrent state,
compute, output; parsed here independently of tandem's own parser), stops it,
then asks `tandem plan --json --no-measured` for the same settings: the pure
model, never the footprint cache. Each measured run is also recorded into the
footprint cache with `tandem footprint record`, which is how serve and the
tests calibrate the planner. Writes a Markdown table. Usage:
  build/venv/bin/python bench/plan_accuracy.py --tandem build/tandem [--out docs/planner-accuracy.md]
"""
import argparse
import datetime
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from conftest import ENGINE, FIXTURES, MODELS, PINS, LlamaServer  # noqa: E402

MIB = 1024 * 1024
PARTS = ("weights", "kv", "recurrent", "compute", "output")
LINE = re.compile(r"(\S+)\s+(model|KV|RS|compute|output) buffer size\s*=\s*([0-9.]+) MiB")
PART_OF = {"model": "weights", "KV": "kv", "RS": "recurrent", "compute": "compute",
           "output": "output"}


def models():
    return {
        "smollm2-135m": MODELS / PINS["SMOLLM2_GGUF"],
        "gemma3-270m": MODELS / PINS["GEMMA3_GGUF"],
        "kev-4b-shape": FIXTURES / "kev-4b-shape.gguf",
        "kev-9b-shape": FIXTURES / "kev-9b-shape.gguf",
        "laya-shape": FIXTURES / "laya-shape.gguf",
    }


def cases():
    """(model, ctx, parallel, kv type, flash attention, extra engine args)."""
    out = []
    for name in ("smollm2-135m", "gemma3-270m", "kev-4b-shape", "kev-9b-shape"):
        for ctx in (2048, 8192, 32768):
            for par in (1, 4):
                out.append((name, ctx, par, "f16", "off"))
                out.append((name, ctx, par, "q8_0", "on"))  # quantized V needs flash attention
    for ctx in (512, 1024):  # an encoder: the whole window is one micro-batch
        for par in (1, 4):
            out.append(("laya-shape", ctx, par, "f16", "off"))
    return out


def engine_args(ctx, par, kv, fa, name):
    args = ["-np", str(par), "-ctk", kv, "-ctv", kv, "-fa", fa, "--no-repack"]
    if name.startswith("laya"):
        args += ["-b", str(ctx), "-ub", str(ctx)]
    return args


def measure(path, ctx, args, tmp):
    """Starts the engine until it has logged its buffers; returns MiB per part."""
    log = Path(tmp) / "engine.log"
    server = LlamaServer(ENGINE, path, log, extra_args=args, ctx=ctx, record=False)
    server.start(timeout=300)
    text = server.log_text()
    server.stop()
    got = {p: 0.0 for p in PARTS}
    for m in LINE.finditer(text):
        got[PART_OF[m.group(2)]] += float(m.group(3))
    return got, server.argv, text


def plan(tandem, path, ctx, par, kv, fa, name):
    argv = [tandem, "plan", str(path), "--ctx", str(ctx), "--parallel", str(par),
            "--cache-type-k", kv, "--cache-type-v", kv, "--flash-attn", fa, "--cpu",
            "--no-measured", "--json"]
    if name.startswith("laya"):
        argv += ["--batch", str(ctx), "--ubatch", str(ctx)]
    t = time.monotonic()
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    ms = (time.monotonic() - t) * 1000
    row = json.loads(out)["models"][0]
    return {p: row["host"][p] / MIB for p in PARTS}, ms


def record(tandem, path, log_text, argv, tmp):
    log = Path(tmp) / "record.log"
    log.write_text(log_text)
    subprocess.run([tandem, "footprint", "record", str(path), str(log), "--", *argv[1:]],
                   check=True, capture_output=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tandem", default="build/tandem")
    ap.add_argument("--out", default="docs/planner-accuracy.md")
    ap.add_argument("--only", help="run only cases whose model name contains this")
    args = ap.parse_args()
    paths = models()
    rows, worst, misses, plan_ms = [], 0.0, 0, []
    with tempfile.TemporaryDirectory() as tmp:
        for name, ctx, par, kv, fa in cases():
            if args.only and args.only not in name:
                continue
            eargs = engine_args(ctx, par, kv, fa, name)
            meas, argv, text = measure(paths[name], ctx, eargs, tmp)
            record(args.tandem, paths[name], text, argv, tmp)
            planned, ms = plan(args.tandem, paths[name], ctx, par, kv, fa, name)
            plan_ms.append(ms)
            mt, pt = sum(meas.values()), sum(planned.values())
            err = pt - mt
            limit = max(0.02 * mt, 32.0)
            ok = abs(err) <= limit
            misses += not ok
            worst = max(worst, abs(err) / mt * 100)
            cells = " | ".join(f"{planned[p]:.1f} / {meas[p]:.1f}" for p in PARTS)
            rows.append(f"| {name} | {ctx} | {par} | {kv} | {fa} | {cells} | {pt:.1f} / {mt:.1f}"
                        f" | {err:+.1f} ({err / mt * 100:+.2f}%) | {'yes' if ok else '**no**'} |")
            print(rows[-1], flush=True)
    write(args.out, rows, worst, misses, plan_ms)


def write(out, rows, worst, misses, plan_ms):
    head = ("| model | ctx | np | KV | FA | weights | KV | recurrent | compute | output"
            " | total | error | within max(2%, 32 MiB) |\n|" + "---|" * 13)
    plan_ms.sort()
    text = f"""# Planner accuracy: planned against measured bytes

Generated by `make bench-plan` (`bench/plan_accuracy.py`) on {datetime.date.today()},
llama.cpp b{PINS['ENGINE_BUILD']} (CPU build), this machine's CPU; nothing here is typed by hand.

Each cell is **planned / measured** MiB. Measured is the sum of the buffer-size lines the
pinned llama-server logged at `-lv 4` for that part (`model`, `KV`, `RS`, `compute`,
`output`), started with `-ngl 0 -fit off --no-repack -np N -ctk T -ctv T -fa F` (and
`-b N -ub N` for the Laya encoder). Planned is `tandem plan --cpu --no-measured --json` for the
same settings: the model alone, without the footprint cache. The target is a total within
max(2%, 32 MiB) of measured.

How to read it honestly: weights, KV, recurrent state and output are the engine's own rules
re-implemented (src/plan/plan.c names each source line), so they match to the rounding of the
log's two decimals. The compute buffer has no closed form; its formula (masks + the larger of
a layer's score matrix and FFN activations or the output head's logits) has four residual
multipliers that were fitted to CPU runs of these same models, so for compute this table
shows consistency, not an independent test. All of it is the CPU backend: CUDA compute
buffers and the per-process CUDA overhead were not measured on this machine (no GPU).

- Cases: {len(rows)}; outside the target: {misses}; worst total error: {worst:.2f}%.
- `tandem plan` took {plan_ms[len(plan_ms) // 2]:.1f} ms at the median and
  {plan_ms[-1]:.1f} ms at most per call (process start included; weights are never read).

{head}
""" + "\n".join(rows) + "\n"
    Path(out).write_text(text)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
