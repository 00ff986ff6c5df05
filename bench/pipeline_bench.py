#!/usr/bin/env python3
"""Benchmark: what a decide-then-verify pipeline costs in tandem.

Measured side by side in one run on this machine, with the pinned llama-server
and the two fixture decision models (smollm2-decider decides, gemma3-decider
verifies), every bare engine started with the argv tandem gives its
own child, on a TCP port:

 1. pipeline overhead (both models resident): the same pipeline request N
    times through `tandem serve` (POST /v1/pipelines/ops), interleaved with the
    same two stages sent by the client itself straight to the engines, in
    sequence (decide, then verify the decider's pick with the same rendered
    question): to tandem's own children, and to a bare pair of llama-servers;
 2. a burst on a budget that holds one model at a time: R concurrent pipeline
    requests through tandem (loads and wall time), against the same R requests
    sent one at a time (the stages run naively: every request swaps twice).

Usage:
  build/venv/bin/python bench/pipeline_bench.py --tandem build/tandem \\
      --out docs/benchmarks.md [--quick]
The tables replace the "pipelines" section of --out (bench/mdsection.py), so
serve_bench.py's sections stay.
"""
import argparse
import datetime
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from mdsection import replace_section  # noqa: E402
from serve_bench import (A, B, FIXTURES, Cleanup, Conn, Engine, child_argv,  # noqa: E402
                         cpu_model, engine_version, log, med, pct, start_serve, status_models)

GOAL = 1.03  # pipeline median over the two direct calls in sequence
STATE = ("The build server is at 97% memory and swapping. Eight compile jobs run in "
         "parallel; two are nightly documentation builds nobody waits for.")
CANDIDATES = {"reduce": "Reduce build concurrency from eight jobs to four.",
              "stop": "Stop the non-critical documentation builds.",
              "nothing": "Change nothing and wait."}
INSTRUCTIONS = "Which response should the operator take now?"
VERIFY = "The operator proposes: {}. Is it consistent with the situation?"


def config(budget):
    return f"""budget:
  ram: {budget}
limits:
  request_timeout: 300s
  queue_depth: 256
models:
  {A}:
    path: {FIXTURES / (A + '.gguf')}
    ctx: 2048
    keep_alive: forever
  {B}:
    path: {FIXTURES / (B + '.gguf')}
    ctx: 2048
    keep_alive: forever
pipelines:
  ops:
    decide:
      model: {A}
      instructions: {INSTRUCTIONS}
    verify:
      - model: {B}
        questions:
          consistent:
            type: noul
            instructions: "{VERIFY.format('{{candidates[decide.choice]}}')}"
    verdict:
      thresholds:
        consistent: ">= 0"
"""


REQUEST = {"state": STATE, "candidates": CANDIDATES}


def decide_body():
    return {"model": A, "state": STATE,
            "questions": {"choice": {"type": "choice", "instructions": INSTRUCTIONS,
                                     "criteria": CANDIDATES}}}


def verify_body(choice):
    return {"model": B, "state": STATE,
            "questions": {"consistent": {"type": "noul",
                                         "instructions": VERIFY.format(CANDIDATES[choice])}}}


def direct(conn_a, conn_b):
    """The client's own pipeline: decide, then verify the pick. Returns
    (seconds, choice, noul) or raises on a non-200."""
    t = time.perf_counter()
    st, raw, _ = conn_a.request("POST", "/v1/systemone", decide_body())
    assert st == 200, (st, raw[:200])
    choice = json.loads(raw)["answers"]["choice"]["choice"]
    st, raw, _ = conn_b.request("POST", "/v1/systemone", verify_body(choice))
    assert st == 200, (st, raw[:200])
    noul = json.loads(raw)["answers"]["consistent"]["noul"]
    return time.perf_counter() - t, choice, noul


def via_tandem(conn):
    st, raw, dt = conn.request("POST", "/v1/pipelines/ops", REQUEST)
    assert st == 200, (st, raw[:300])
    a = json.loads(raw)
    return dt, a["choice"], a["attempts"][0]["verify"][0]["questions"]["consistent"]["answer"]["noul"]


def start(tandem_bin, tmp, name, budget, cleanup):
    return start_serve(tandem_bin, tmp, name, budget, cleanup, config(budget))


def bench_overhead(tandem_bin, tmp, n, cleanup):
    s, stop = start(tandem_bin, tmp, "resident", "2GiB", cleanup)
    via = Conn(s.url)
    via_tandem(via)  # loads both models
    models = status_models(s)
    kids = [Conn(f"unix:{models[m]['socket']}") for m in (A, B)]
    bare = []
    for m in (A, B):
        e = Engine(child_argv(s, m), tmp / f"bare-{m}.log")
        e.start()
        cleanup.add(e.kill)
        bare.append(e)
    bare_conns = [Conn(e.url) for e in bare]
    times = {"tandem": [], "children": [], "bare": []}
    answers = set()
    targets = [("tandem", lambda: via_tandem(via)), ("children", lambda: direct(*kids)),
               ("bare", lambda: direct(*bare_conns))]
    for _ in range(2):  # warm every path
        for _, fn in targets:
            fn()
    for i in range(n):
        order = targets[i % 3:] + targets[:i % 3]  # rotate who goes first
        for name, fn in order:
            dt, choice, noul = fn()
            times[name].append(dt)
            answers.add((choice, noul))
    loads = {m: models[m]["loads"] for m in (A, B)}
    loads_after = {m: v["loads"] for m, v in status_models(s).items()}
    stop()
    for e in bare:
        e.stop()
    return times, answers, loads, loads_after


def burst(url, r):
    out = []

    def one():
        c = Conn(url, timeout=600)
        t = time.perf_counter()
        st, _, _ = c.request("POST", "/v1/pipelines/ops", REQUEST)
        out.append((st, time.perf_counter() - t))
        c.close()

    threads = [threading.Thread(target=one) for _ in range(r)]
    t = time.perf_counter()
    [x.start() for x in threads]
    [x.join() for x in threads]
    return time.perf_counter() - t, out


def sequential(url, r):
    c = Conn(url, timeout=600)
    out = []
    t = time.perf_counter()
    for _ in range(r):
        st, _, dt = c.request("POST", "/v1/pipelines/ops", REQUEST)
        out.append((st, dt))
    c.close()
    return time.perf_counter() - t, out


def bench_rotating(tandem_bin, tmp, r, cleanup):
    rows = []
    for name, fn in (("burst", burst), ("one at a time", sequential)):
        s, stop = start(tandem_bin, tmp, name.replace(" ", "-"), "400MiB", cleanup)
        wall, out = fn(s.url, r)
        loads = sum(m["loads"] for m in status_models(s).values())
        rows.append((name, wall, loads, sum(st == 200 for st, _ in out),
                     [dt for _, dt in out]))
        stop()
    return rows


def render(args, took, overhead, rotating):
    times, answers, loads, loads_after = overhead
    t_med = {k: med(v) * 1000 for k, v in times.items()}
    t_p90 = {k: pct(v, 90) * 1000 for k, v in times.items()}
    ratio_children = t_med["tandem"] / t_med["children"]
    ratio_bare = t_med["tandem"] / t_med["bare"]
    L = [f"Generated by `build/venv/bin/python bench/pipeline_bench.py --tandem build/tandem "
         f"--out {args.out}{' --quick' if args.quick else ''}` on "
         f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC ({took / 60:.1f} min); "
         f"{cpu_model()}, no GPU; engine {engine_version()}.",
         "",
         "### 1. Pipeline overhead (both models resident)",
         "",
         f"The pipeline `ops` (SmolLM2 decides among 3 candidates, Gemma-3 answers one noul "
         f"about the pick) through `tandem serve` (`ram: 2GiB`), against a client doing the "
         f"same two calls itself, in sequence, with the same rendered question: to tandem's "
         f"own two engines directly, and to a bare pair of llama-servers started with the "
         f"children's argv. N={args.n} rounds, the three interleaved and rotating, one "
         f"keep-alive connection per engine.",
         "",
         "| path | median (ms) | p90 (ms) |",
         "|---|---|---|",
         f"| via tandem (`POST /v1/pipelines/ops`) | {t_med['tandem']:.1f} | {t_p90['tandem']:.1f} |",
         f"| direct to tandem's children, in sequence | {t_med['children']:.1f} | {t_p90['children']:.1f} |",
         f"| direct to a bare pair, in sequence | {t_med['bare']:.1f} | {t_p90['bare']:.1f} |",
         "",
         f"- via tandem / children direct: **{ratio_children:.3f}** "
         f"({t_med['tandem'] - t_med['children']:+.2f} ms at the median); goal ≤ {GOAL}: "
         f"**{'met' if ratio_children <= GOAL else 'not met'}**.",
         f"- via tandem / bare pair: **{ratio_bare:.3f}** "
         f"({t_med['tandem'] - t_med['bare']:+.2f} ms).",
         f"- Distinct (choice, noul) answers over all {3 * args.n} pipelines: {len(answers)} "
         f"(1 = every path gave the same answer, bit for bit).",
         f"- tandem loads: {loads} after warm-up, {loads_after} at the end (0 added).",
         "",
         f"### 2. A burst of {args.r} on a budget that holds one model",
         "",
         f"`ram: 400MiB`: one fixture model at a time. The same {args.r} pipeline requests, "
         f"all at once (the scheduler groups each stage: the decider answers every queued "
         f"decide, then the verifier every verify) and one at a time (every request loads the "
         f"decider, then the verifier: the naive way).",
         "",
         "| requests | wall time (s) | loads | ok | request latency median / max (s) |",
         "|---|---|---|---|---|"]
    for name, wall, nloads, ok, lat in rotating:
        L.append(f"| {args.r} {name} | {wall:.1f} | {nloads} | {ok}/{args.r} | "
                 f"{med(lat):.1f} / {max(lat):.1f} |")
    b, s = rotating
    L += ["", f"- burst / one at a time: **{b[1] / s[1]:.2f}x** the wall time, "
              f"{b[2]} loads instead of {s[2]}.", ""]
    return "\n".join(L)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tandem", default=str(ROOT / "build" / "tandem"))
    ap.add_argument("--out", default="docs/benchmarks.md")
    ap.add_argument("--quick", action="store_true", help="N=10, R=6: a smoke run")
    args = ap.parse_args()
    args.n, args.r = (10, 6) if args.quick else (100, 20)
    cleanup = Cleanup()
    t0 = time.time()
    try:
        with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as tmp:
            tmp = Path(tmp)
            log(f"1. overhead, N={args.n}")
            overhead = bench_overhead(Path(args.tandem), tmp, args.n, cleanup)
            log(f"2. rotating, R={args.r}")
            rotating = bench_rotating(Path(args.tandem), tmp, args.r, cleanup)
    finally:
        cleanup.run()
    text = render(args, time.time() - t0, overhead, rotating)
    replace_section(Path(args.out), "pipelines", "## Pipelines", text)
    print(text)


if __name__ == "__main__":
    main()
