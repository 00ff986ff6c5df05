#!/usr/bin/env python3
"""Benchmark: swap time of `tandem serve` against a kill-and-start script, by model and page cache.

Two pairs of models that do not fit together: the SmolLM2 and Gemma-3 decider fixtures,
and the full-size kev-4b-shape and laya-shape stand-ins (sparse files with the published
tensor shapes: zero weights, real compute). For each pair, side by side in one run:

 - tandem: `tandem serve` with a budget that holds one model of the pair at a time
   (checked with `tandem plan --config`); the resident model has just answered a request
   and been idle 300 ms (past tandem's 150 ms grouping linger), then one request for the
   other model: tandem stops the resident engine, starts the other, answers;
 - script: what a user's script does for the same request: SIGTERM the running bare
   llama-server and wait for its exit, spawn the other one with the argv tandem
   gives its child (read back from /proc/<pid>/cmdline), poll /health every 50 ms, send
   the request;

with the target model's file in the page cache (warm) and dropped from it first (cold:
POSIX_FADV_DONTNEED on that one file, never the whole cache; nothing else maps it then).
Tandem and script swaps alternate, the order changing every time. The script's phases
(stop, spawn to healthy, first answer) and tandem's own (its audit log's queue_ms, load_ms,
run_ms) are printed too.

Usage:
  build/venv/bin/python bench/swap_bench.py --tandem build/tandem \\
      --out docs/benchmarks.md [--quick] [--rounds N] [--pairs deciders,shapes]
The table replaces the "swap" section of --out (bench/mdsection.py) and keeps every other
section.
"""
import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from mdsection import replace_section  # noqa: E402
from pipeline_bench import CANDIDATES, STATE  # noqa: E402
from serve_bench import (FIXTURES, FOREIGN_MAX, QUIET, REQUEST_TIMEOUT, Cleanup,  # noqa: E402
                         Conn, Engine, Sampler, child_argv, choice_body, cpu_model,
                         engine_version, load_seconds, log, med, pct, quiet_active,
                         start_serve, status_models, wait_quiet)

PAIRS = {"deciders": ("smollm2-decider", "gemma3-decider"),
         "shapes": ("kev-4b-shape", "laya-shape")}
ENCODERS = {"laya-shape"}  # run at their window: no ctx in the config
IDLE = 0.3  # seconds between the resident model's last answer and the swap request
SECTION = ("swap", "## 4. Swap time by model and page cache")


def model_path(name):
    return FIXTURES / f"{name}.gguf"


def other(pair, model):
    return pair[1] if model == pair[0] else pair[0]


# --- the page cache ------------------------------------------------------------------

def drop_from_cache(path):
    """Drops one file's pages from the page cache (those no process maps)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def cached_bytes(path):
    """How much of the file is in the page cache (util-linux fincore), or None."""
    try:
        p = subprocess.run(["fincore", "-b", "-n", "-o", "RES", str(path)],
                           capture_output=True, text=True, timeout=30)
        return int(p.stdout.split()[0])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def cold_read_rate(path):
    """MB/s of one sequential read of the file after dropping it from the cache."""
    drop_from_cache(path)
    t = time.perf_counter()
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(8 << 20)
            if not b:
                break
            n += len(b)
    return n / (time.perf_counter() - t) / 1e6


def allocated_bytes(path):
    return os.stat(path).st_blocks * 512


# --- configs -------------------------------------------------------------------------

def pair_config(pair, budget):
    lines = ["budget:", f"  ram: {budget}", "limits:", "  request_timeout: 300s",
             "models:"]
    for m in pair:
        lines += [f"  {m}:", f"    path: {model_path(m)}"]
        if m not in ENCODERS:
            lines += ["    ctx: 2048", "    flash_attn: false"]
    return "\n".join(lines) + "\n"


def plan(tandem_bin, tmp, pair, budget):
    cfg = tmp / f"plan-{pair[0]}-{budget}.yaml"
    cfg.write_text(pair_config(pair, budget))
    p = subprocess.run([tandem_bin, "plan", "--config", str(cfg), "--json"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"swap_bench: tandem plan --config {cfg} failed: {p.stderr.strip()}")
    return json.loads(p.stdout)


def one_fits_budget(tandem_bin, tmp, pair):
    """A RAM budget that holds either model of the pair alone but not both: the larger
    model's planned total plus half the smaller one's, checked with `tandem plan`."""
    j = plan(tandem_bin, tmp, pair, "64GiB")
    totals = sorted(m["total"] for m in j["models"])
    budget = f"{math.ceil((totals[1] + totals[0] / 2) / 2**20)}MiB"
    j = plan(tandem_bin, tmp, pair, budget)
    if j.get("verdict") != "rotate":
        sys.exit(f"swap_bench: with ram: {budget} the plan for {pair} says "
                 f"{j.get('verdict')}: {j.get('reason')} (want rotate: one at a time)")
    return budget, j


# --- the two sides -------------------------------------------------------------------

class TandemSide:
    name = "tandem"

    def __init__(self, serve, pair):
        self.s = serve
        self.pair = pair
        self.via = Conn(serve.url)
        self.h = {"X-Tandem-Timeout-Ms": str(REQUEST_TIMEOUT * 1000)}
        self.n = 0

    def request(self, model, state, rid=None):
        h = dict(self.h, **({"x-typesafe-request-id": rid} if rid else {}))
        st, raw, dt = self.via.request("POST", "/v1/systemone", choice_body(model, state), h)
        if st != 200:
            raise RuntimeError(f"tandem: {model}: {st} {raw[:300]!r}")
        return dt

    def resident(self):
        return [m for m, x in status_models(self.s).items() if x["state"] == "resident"]

    def holds(self, model):
        return model in self.resident()

    def ensure(self, model):
        if self.resident() != [model]:
            self.request(model, "restore")

    def audit(self, rid):
        for line in reversed(self.s.audit.read_text().splitlines()):
            rec = json.loads(line)
            if rec.get("request_id") == rid:
                return rec
        return {}

    def swap(self, target, state):
        self.n += 1
        rid = f"swapbench-{os.getpid()}-{self.n}"
        before = status_models(self.s)
        lsum = load_seconds(self.s, target)
        total = self.request(target, state, rid)
        after = status_models(self.s)
        a = self.audit(rid)
        return {"total": total, "loads": sum(after[m]["loads"] - before[m]["loads"]
                                            for m in self.pair),
                "load": load_seconds(self.s, target) - lsum,
                "queue_ms": a.get("queue_ms"), "load_ms": a.get("load_ms"),
                "run_ms": a.get("run_ms")}

    def close(self):
        self.via.close()


class ScriptSide:
    name = "script"

    def __init__(self, argv, tmp, cleanup):
        self.argv, self.tmp, self.cleanup = argv, tmp, cleanup
        self.cur, self.model, self.n = None, None, 0

    def holds(self, model):
        return self.model == model

    def _start(self, model):
        self.n += 1
        e = Engine(self.argv[model], self.tmp / f"script-{model}-{self.n}.log")
        self.cleanup.add(e.kill)
        load = e.start()
        self.cur, self.model = e, model
        return load

    def _stop(self):
        s = self.cur.stop() if self.cur else 0.0
        self.cur, self.model = None, None
        return s

    def request(self, model, state):
        c = Conn(self.cur.url)
        st, raw, dt = c.request("POST", "/v1/systemone", choice_body(model, state))
        c.close()
        if st != 200:
            raise RuntimeError(f"script: {model}: {st} {raw[:300]!r}")
        return dt

    def ensure(self, model):
        if self.model != model:
            self._stop()
            self._start(model)

    def swap(self, target, state):
        t0 = time.perf_counter()
        stop = self._stop()
        load = self._start(target)
        first = self.request(target, state)
        return {"total": time.perf_counter() - t0, "stop": stop, "load": load,
                "first": first}

    def close(self):
        self._stop()


# --- measuring -----------------------------------------------------------------------

def measure(side, peer, pair, target, cold, i, redo):
    """One swap of side to target, the resident model having answered IDLE s before.
    Cold: target's file is dropped from the page cache first (the peer is moved off
    target so that nothing maps it). Returns the sample, redone (at most redo["left"]
    times in all) when another engine or others' CPU use shared the machine."""
    prev = other(pair, target)
    while True:
        wait_quiet()
        side.ensure(prev)
        if cold and peer.holds(target):
            peer.ensure(prev)
        side.request(prev, f"previous {i}")
        time.sleep(IDLE)
        resid = None
        if cold:
            drop_from_cache(model_path(target))
            resid = cached_bytes(model_path(target))
        with Sampler() as smp:
            r = side.swap(target, f"case {i}: the queue grew by {i % 7 + 2} jobs")
        busy = smp.fraction() > 0 or smp.share > FOREIGN_MAX
        if busy and quiet_active() and redo["left"] > 0:
            redo["left"] -= 1
            redo["done"] += 1
            log(f"  redo {side.name} -> {target}: another engine ran {smp.fraction():.0%} "
                f"of the time, others used {smp.share:.0%} of the CPUs")
            continue
        r.update({"side": side.name, "model": target, "cache": "cold" if cold else "warm",
                  "cached_before": resid, "busy": busy})
        return r


def bench_pair(tandem_bin, tmp, key, rounds, cleanup, out):
    pair = PAIRS[key]
    budget, pj = one_fits_budget(tandem_bin, tmp, pair)
    totals = {m["name"]: m["total"] for m in pj["models"]}
    log(f"{key}: {pair[0]} and {pair[1]}, budget ram: {budget} (plan: {pj['verdict']}), "
        f"{rounds} rounds")
    s, stop_s = start_serve(tandem_bin, tmp, f"serve-{key}", None, cleanup,
                            config=pair_config(pair, budget))
    t = TandemSide(s, pair)
    argv = {}
    for m in (pair[1], pair[0]):  # loads both once (warms the page cache), ends on pair[0]
        t.request(m, "warm")
        argv[m] = [a for a in child_argv(s, m) if a != "--no-warmup"]  # a user's flags
    sc = ScriptSide(argv, tmp, cleanup)
    cleanup.add(sc.close)
    sc.ensure(pair[0])
    sc.request(pair[0], "warm")
    samples, redo, i = [], {"left": 4 * rounds, "done": 0}, 0
    for r in range(rounds):
        for cold in (False, True):
            for target in (pair[1], pair[0]):
                sides = (t, sc) if i % 2 == 0 else (sc, t)
                for side in sides:
                    peer = sc if side is t else t
                    x = measure(side, peer, pair, target, cold, i, redo)
                    samples.append(x)
                    if side is t and x["loads"] != 1:
                        out.setdefault("notes", []).append(
                            f"{key}: a tandem swap to {target} loaded {x['loads']} models")
                i += 1
        last = [x for x in samples[-8:]]
        log(f"  round {r + 1}/{rounds}: " + ", ".join(
            f"{x['side']} {x['model']} {x['cache']} {x['total']:.2f} s" for x in last))
    t.close()
    sc.close()
    stop_s()
    out["pairs"][key] = {"pair": pair, "budget": budget, "verdict": pj["verdict"],
                         "planned": totals, "argv": {m: a[1:] for m, a in argv.items()},
                         "samples": samples, "redone": redo["done"]}


# --- a decide-then-verify pipeline on the rotating budget ------------------------------

PIPE_STATE = "Request {i}: " + STATE
VERIFY = "Is the proposal \"{c}\" a sensible step?"


def pipeline_config(pair, budget):
    return pair_config(pair, budget) + f"""pipelines:
  ops:
    decide:
      model: {pair[0]}
      instructions: Which response should the operator take now?
    verify:
      - model: {pair[1]}
        questions:
          sensible:
            type: noul
            instructions: Is the proposal "{{{{candidates[decide.choice]}}}}" a sensible step?
    verdict:
      thresholds:
        sensible: ">= 0"
"""


def tandem_pipeline(serve, i):
    c = Conn(serve.url, timeout=REQUEST_TIMEOUT)
    body = {"state": PIPE_STATE.format(i=i), "candidates": CANDIDATES}
    st, raw, dt = c.request("POST", "/v1/pipelines/ops", body)
    c.close()
    if st != 200:
        raise RuntimeError(f"tandem pipeline: {st} {raw[:300]!r}")
    return dt


def script_pipeline(sc, pair, i):
    """What a script does for one decide-then-verify request on a budget that holds one
    model: start the decider, ask it, stop it, start the verifier, ask it."""
    t0 = time.perf_counter()
    sc.ensure(pair[0])
    body = {"model": pair[0], "state": PIPE_STATE.format(i=i),
            "questions": {"choice": {"type": "choice", "instructions": "Which response should "
                                     "the operator take now?", "criteria": CANDIDATES}}}
    c = Conn(sc.cur.url)
    st, raw, _ = c.request("POST", "/v1/systemone", body)
    c.close()
    if st != 200:
        raise RuntimeError(f"script decide: {st} {raw[:300]!r}")
    probs = json.loads(raw)["answers"]["choice"]["probabilities"]
    pick = max(probs, key=probs.get)
    sc.ensure(pair[1])
    body = {"model": pair[1], "state": PIPE_STATE.format(i=i),
            "questions": {"sensible": {"type": "noul",
                                       "instructions": VERIFY.format(c=CANDIDATES[pick])}}}
    c = Conn(sc.cur.url)
    st, raw, _ = c.request("POST", "/v1/systemone", body)
    c.close()
    if st != 200:
        raise RuntimeError(f"script verify: {st} {raw[:300]!r}")
    return time.perf_counter() - t0


def bench_pipelines(tandem_bin, tmp, n, cleanup, out):
    """n pipeline requests one at a time through tandem and through a script, then a
    burst of n at once through tandem, on the deciders' rotating budget."""
    pair = PAIRS["deciders"]
    budget, _ = one_fits_budget(tandem_bin, tmp, pair)
    s, stop_s = start_serve(tandem_bin, tmp, "serve-pipelines", None, cleanup,
                            config=pipeline_config(pair, budget))
    side = TandemSide(s, pair)
    argv = {}
    for m in pair:  # each engine once: its argv, and a warm page cache
        side.request(m, "warm")
        argv[m] = [a for a in child_argv(s, m) if a != "--no-warmup"]
    side.close()
    sc = ScriptSide(argv, tmp, cleanup)
    cleanup.add(sc.close)
    res = {"tandem": [], "script": []}
    loads0 = sum(m["loads"] for m in status_models(s).values())
    for i in range(n):
        wait_quiet()
        for side in (("tandem", "script") if i % 2 == 0 else ("script", "tandem")):
            res[side].append(tandem_pipeline(s, i) if side == "tandem"
                             else script_pipeline(sc, pair, i))
    loads = sum(m["loads"] for m in status_models(s).values()) - loads0
    sc.close()
    wait_quiet()
    burst, errors = [], []
    t0 = time.perf_counter()

    def one(i):
        try:
            burst.append(tandem_pipeline(s, 1000 + i))
        except RuntimeError as e:
            errors.append(str(e))
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    burst_wall = time.perf_counter() - t0
    counts = {m: {"prefetches": x["prefetches"], "lookaheads": x["lookaheads"]}
              for m, x in status_models(s).items()}
    stop_s()
    out["pipelines"] = {"n": n, "budget": budget, "tandem": res["tandem"],
                        "script": res["script"], "loads": loads, "burst_wall": burst_wall,
                        "burst_ok": len(burst), "errors": errors[:3], "counts": counts}
    log(f"pipelines: tandem {sum(res['tandem']):.1f} s, script {sum(res['script']):.1f} s, "
        f"burst {burst_wall:.1f} s")


def render_pipelines(pl):
    t, sc = sum(pl["tandem"]), sum(pl["script"])
    counts = "; ".join(f"`{m}` {c['prefetches']} read-aheads, {c['lookaheads']} lookaheads"
                       for m, c in pl["counts"].items())
    return [
        "", "### Decide-then-verify on the rotating budget",
        "",
        f"The deciders' pair as a pipeline (SmolLM2 decides among three candidates, Gemma-3 "
        f"verifies the pick with one noul question) on `ram: {pl['budget']}`: {pl['n']} "
        "requests one at a time (one agent), through tandem and through a script that starts "
        "the decider, asks it, stops it, starts the verifier and asks it (the same flags as "
        f"above), alternating; then the {pl['n']} at once through tandem (a script cannot "
        "group them).", "",
        "| | total (s) | per request median (s) | loads |",
        "|---|---|---|---|",
        f"| script, one at a time | {sc:.1f} | {med(pl['script']):.2f} | {2 * pl['n']} |",
        f"| tandem, one at a time | {t:.1f} | {med(pl['tandem']):.2f} | {pl['loads']} |",
        f"| tandem, {pl['n']} at once | {pl['burst_wall']:.1f} | | |",
        "",
        f"- tandem / script, one at a time: **{t / sc:.2f}x** the total (goal: at most 0.7x); "
        f"{pl['n']} at once: **{pl['burst_wall'] / sc:.2f}x** ({pl['burst_ok']}/{pl['n']} "
        "answered).",
        f"- Swap work tandem did ahead of time: {counts}.",
    ]


# --- the report ----------------------------------------------------------------------

def f3(x):
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def mib(b):
    return f"{b / 2**20:.0f}"


def render(args, out, started, took):
    tv = subprocess.run([args.tandem, "--version"], capture_output=True, text=True).stdout
    tv = tv.splitlines()[0] if tv else "unknown"
    cmd = "build/venv/bin/python bench/swap_bench.py --tandem build/tandem --out " + args.out
    cmd += " --quick" if args.quick else f" --rounds {args.rounds}"
    L = []
    add = L.append
    add(f"Generated by `{cmd}` on {started:%Y-%m-%d %H:%M} UTC ({took / 60:.1f} min), "
        f"{args.rounds} round(s): per round and pair, every model is swapped to once warm and "
        f"once cold, by tandem and by the script. Machine: {os.cpu_count()} CPU cores "
        f"({cpu_model()}), no GPU; engine {engine_version()}; {tv}.")
    add("")
    add("A swap is one request for the model that is not resident, its pair partner having "
        f"answered the previous request {IDLE * 1000:.0f} ms before (past tandem's 150 ms "
        "grouping linger). **tandem**: `tandem serve` with a `ram:` budget that holds one "
        "model of the pair at a time (`tandem plan --config` says `rotate`); it stops the "
        "resident engine, starts the other and answers. **script**: SIGTERM the running bare "
        "llama-server and wait for its exit, spawn the other one with the argv tandem gives "
        "its child (from `/proc/<pid>/cmdline`) less `--no-warmup` (the engine's warm-up, "
        "which a user's script keeps; tandem drops it on CPU engines, where it only delays "
        "readiness: docs/placement.md), poll `/health` every 50 ms, "
        "send the request. Times are client-side, from sending the request (tandem) or the "
        "SIGTERM (script) to the last byte of the answer. **Cold**: the target model's file "
        "was dropped from the page cache just before (`POSIX_FADV_DONTNEED` on that file "
        "alone, with no process mapping it); warm: it was in the cache. Tandem and script "
        "swaps alternate, the order changing every time.")
    add("")
    add("| model | cache | swaps (tandem / script) | script median (s) | tandem median (s) | "
        "tandem / script, ratio of medians | median of paired ratios | tandem p90 / script "
        "p90 (s) |")
    add("|---|---|---|---|---|---|---|---|")
    phase_rows, ratios = [], []
    for key, pr in out["pairs"].items():
        for model in pr["pair"]:
            for cache in ("warm", "cold"):
                xs = [x for x in pr["samples"] if x["model"] == model and x["cache"] == cache]
                tt = [x for x in xs if x["side"] == "tandem"]
                ss = [x for x in xs if x["side"] == "script"]
                if not tt or not ss:
                    continue
                tm, sm = med([x["total"] for x in tt]), med([x["total"] for x in ss])
                paired = [a["total"] / b["total"] for a, b in zip(tt, ss)]
                ratios.append((model, cache, tm / sm))
                add(f"| `{model}` | {cache} | {len(tt)} / {len(ss)} | {sm:.3f} | {tm:.3f} | "
                    f"**{tm / sm:.2f}x** | {med(paired):.2f}x | "
                    f"{pct([x['total'] for x in tt], 90):.3f} / "
                    f"{pct([x['total'] for x in ss], 90):.3f} |")
                phase_rows.append((model, cache, tt, ss))
    add("")
    add("Where the time goes (medians, s). Script: its own phases (stopping the other "
        "model's engine, spawning this one until `/health` says 200, the first answer). "
        "Tandem: its audit log's `queue_ms` (which holds the wait for the other engine's "
        "exit), `load_ms` and `run_ms` for the same request, and "
        "`tandem_model_load_seconds` (spawn to healthy) from `/metrics`. "
        "\"Resident before\" is how much of the file `fincore` found in the page cache just "
        "before a cold swap.")
    add("")
    add("| model | cache | script: stop the other | script: spawn to healthy | script: first answer | "
        "tandem: queue | tandem: load | tandem: run | tandem: spawn to healthy | resident "
        "before, cold (MiB) |")
    add("|---|---|---|---|---|---|---|---|---|---|")
    for model, cache, tt, ss in phase_rows:
        def m_(xs, k, scale=1.0):
            v = [x[k] * scale for x in xs if x.get(k) is not None]
            return med(v) if v else None
        res = [x["cached_before"] for x in tt + ss if x.get("cached_before") is not None]
        add(f"| `{model}` | {cache} | {f3(m_(ss, 'stop'))} | {f3(m_(ss, 'load'))} | "
            f"{f3(m_(ss, 'first'))} | {f3(m_(tt, 'queue_ms', 1e-3))} | "
            f"{f3(m_(tt, 'load_ms', 1e-3))} | {f3(m_(tt, 'run_ms', 1e-3))} | "
            f"{f3(m_(tt, 'load'))} | {mib(max(res)) if res else ''} |")
    add("")
    for key, pr in out["pairs"].items():
        planned = ", ".join(f"`{m}` {mib(v)} MiB" for m, v in pr["planned"].items())
        add(f"- {pr['pair'][0]} / {pr['pair'][1]}: `budget: {{ram: {pr['budget']}}}`, plan "
            f"verdict `{pr['verdict']}` (planned {planned}); swaps measured again because "
            f"another engine or others' CPU use shared the machine: {pr['redone']}.")
    rates = out.get("read_rate") or {}
    if rates:
        add("- The shape stand-ins are sparse files (" + ", ".join(
            f"`{m}`: {allocated_bytes(model_path(m)) / 2**20:.1f} MiB on disk of "
            f"{model_path(m).stat().st_size / 2**20:.0f} MiB" for m in PAIRS["shapes"]
            if model_path(m).exists())
            + "), so their cold swaps refill the page cache with zero pages and read almost "
            "nothing from the disk; the real files would be read. One cold sequential read of "
            "a real file here: " + ", ".join(f"`{m}` {v:.0f} MB/s" for m, v in rates.items())
            + ".")
    for n in out.get("notes", []):
        add(f"- Note: {n}")
    add("")
    if out.get("pipelines"):
        L.extend(render_pipelines(out["pipelines"]))
        add("")
    add("Argv of each bare engine (tandem's child less `--no-warmup`, `{port}` for its port):")
    add("")
    add("```")
    for key, pr in out["pairs"].items():
        for m, a in pr["argv"].items():
            add(" ".join(a))
    add("```")
    return "\n".join(L) + "\n", ratios


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tandem", default=str(ROOT / "build" / "tandem"))
    ap.add_argument("--out", default="docs/benchmarks.md")
    ap.add_argument("--quick", action="store_true", help="one round, no waiting for quiet")
    ap.add_argument("--rounds", type=int, help="rounds (default 5; quick 1)")
    ap.add_argument("--pairs", default="deciders,shapes", help="deciders, shapes or both")
    ap.add_argument("--quiet-wait", type=float,
                    help="before each swap, wait at most this long for llama-servers this "
                    "benchmark did not start (default 90; quick 0: do not wait)")
    ap.add_argument("--quiet-budget", type=float, default=1800.0)
    ap.add_argument("--raw", help="also write the raw measurements as JSON to this file")
    ap.add_argument("--keep-logs", action="store_true", help="keep the temporary folder")
    args = ap.parse_args()
    args.rounds = args.rounds or (1 if args.quick else 5)
    args.tandem = str(Path(args.tandem).resolve())
    keys = [k.strip() for k in args.pairs.split(",") if k.strip()]
    for k in keys:
        if k not in PAIRS:
            sys.exit(f"swap_bench: unknown pair {k!r} (deciders, shapes)")
        for m in PAIRS[k]:
            if not model_path(m).exists():
                sys.exit(f"swap_bench: {model_path(m)} is missing: run `make fixtures`")
    if not Path(args.tandem).exists():
        sys.exit(f"swap_bench: {args.tandem} is missing: run `make`")
    if args.quiet_wait is None:
        args.quiet_wait = 0.0 if args.quick else 90.0
    QUIET["max_wait"], QUIET["budget"] = args.quiet_wait, args.quiet_budget
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.perf_counter()
    out = {"pairs": {}}
    cleanup = Cleanup()
    tmpdir = tempfile.mkdtemp(prefix="swap-bench-")
    tmp = Path(tmpdir)
    try:
        for k in keys:
            bench_pair(args.tandem, tmp, k, args.rounds, cleanup, out)
        if "deciders" in keys:
            bench_pipelines(args.tandem, tmp, 5 if args.quick else 20, cleanup, out)
        out["read_rate"] = {m: cold_read_rate(model_path(m)) for m in PAIRS["deciders"]
                            if model_path(m).exists()}
    finally:
        cleanup.finish(tmpdir, args.keep_logs)
    took = time.perf_counter() - t0
    if args.raw:
        Path(args.raw).write_text(json.dumps({"args": vars(args), "started": started.isoformat(),
                                              "took": took, "out": out}))
    text, ratios = render(args, out, started, took)
    text = text.replace(tmpdir, "$TMP")
    replace_section(Path(args.out), SECTION[0], SECTION[1], text)
    print(SECTION[1] + "\n\n" + text)


if __name__ == "__main__":
    main()
