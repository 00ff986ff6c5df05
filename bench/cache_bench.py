#!/usr/bin/env python3
"""Benchmark: the decision cache (issue 42): exact repeats from memory, and what the
lookup costs everything else.

Measured side by side in one run on this machine, with the pinned llama-server and
the smollm2-decider fixture, every engine on one CPU thread (`threads: 1` in tandem's
config, `-t 1 -tb 1` for the bare engine) so that a client and a daemon keep a core:

 1. a repeated-request workload: four client threads, each on its own keep-alive
    connection, send the same System One decision (a state of three sentences, three
    questions) back to back for --seconds (default 30) to (a) `tandem serve` with the
    cache on (its defaults: `cache.max_bytes` 64MiB), (b) `tandem serve` with
    `cache: false` on the model, (c) a bare llama-server started with the model and its
    defaults (4 slots, its prompt cache; plus -t 1 -tb 1). The four start together
    after a warm-up request with another state, so (a)'s first four requests find an
    empty cache and one evaluation in flight (coalescing). Every answer's bytes are
    kept: (a)'s hits must be the first answer with `"cached":true,` spliced in, and
    the `answers` bytes of every answer of (a) and (b) must equal the first one's;
 2. a hit's latency: after one warm-up request (a miss), N sequential identical
    requests from one client on a keep-alive connection, interleaved with as many
    `GET /livez` on the same connection (the floor of an HTTP round trip through tandem);
 3. mixed traffic: one client sends a sequence in which every tenth request repeats an
    earlier one (chosen at random, seeded) and the others are distinct (an order
    number and a day count vary in the state), each request to the cache-on daemon
    and to the cache-off daemon in turn (the order alternating), for at most
    --mixed-seconds: the first sends' (misses') latency on / off, and throughput.

Before each measurement it waits (--quiet-wait, --quiet-budget; serve_bench's
wait_quiet) until no one else's llama-server runs and others use little CPU; a
workload of part 1 that shared the CPUs with someone else's engine anyway is run
once more, and the run that shared them least is kept. The reply's `x-tandem-cache`
header is counted for every request.

Usage:
  build/venv/bin/python bench/cache_bench.py --tandem build/tandem \\
      --out docs/benchmarks.md [--quick] [--seconds S] [--keep-logs]
The tables replace the "decision-cache" section of --out (bench/mdsection.py).
--quick: 8 s workloads, N=50, 20 s of mixed traffic, no waiting for quiet (a smoke run).
"""
import argparse
import datetime
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import serve_bench  # noqa: E402
from determinism_bench import answers_bytes  # noqa: E402
from mdsection import replace_section  # noqa: E402
from procs import cmdline, cpu_seconds, descendants  # noqa: E402
from serve_bench import (ENGINE, FIXTURES, FOREIGN_MAX, QUIET, Cleanup, Conn, Engine,  # noqa: E402
                         Sampler, cpu_model, engine_version, get_json, get_text, log, med, pct,
                         start_serve, status_models, wait_quiet)
from test_deciders import MIXED  # noqa: E402  (tests/e2e: on the path through serve_bench)

MODEL = "smollm2-decider"
CLIENTS = 4
GOALS = {"uncached": 50.0, "bare": 1.0, "hit_ms": 1.0, "miss_band": 0.05}
MARK = b'{"cached":true,'

STATE = ("The customer writes: 'My package never arrived and it has been three weeks. "
         "I asked twice already and nobody answered.' The order shipped on March 3 and its "
         "tracking number stopped updating in Lyon.")
QUESTIONS = MIXED["questions"]  # a choice, a score and a noul (tests/e2e/test_deciders.py)


def body(state=STATE):
    return {"model": MODEL, "state": state, "questions": QUESTIONS}


def mixed_state(i):
    """The i-th distinct state of part 3: the same story, another order and day count."""
    return (f"The customer writes: 'My package never arrived and it has been {3 + i % 40} days. "
            f"I asked twice already and nobody answered.' Order #{48213 + 7 * i} shipped on "
            "March 3 and its tracking number stopped updating in Lyon.")


def mixed_sequence(n, seed=42):
    """n (state, first) pairs: every tenth repeats a distinct state sent before it, chosen
    at random (seeded); the others are new. first: this is the state's first send."""
    rng = random.Random(seed)
    seq, distinct = [], []
    for i in range(n):
        if i % 10 == 9:
            seq.append((rng.choice(distinct), False))
        else:
            distinct.append(mixed_state(len(distinct)))
            seq.append((distinct[-1], True))
    return seq


class HConn(Conn):
    """serve_bench's Conn that keeps the last response, for its headers."""

    def _connect(self):
        super()._connect()
        get = self.c.getresponse

        def getresponse():
            self.last = get()
            return self.last
        self.c.getresponse = getresponse

    def header(self, name):
        return self.last.getheader(name) if getattr(self, "last", None) else None


class Target:
    """One server of the comparison: a tandem daemon (serve set) or a bare engine."""

    def __init__(self, key, label, url, serve=None, engine=None):
        self.key, self.label, self.url, self.serve, self.engine = key, label, url, serve, engine

    def pids(self):
        """(front pids, engine pids): tandem and its children, or the bare engine."""
        if self.serve:
            return [self.serve.proc.pid], descendants(self.serve.proc.pid)
        return [], [self.engine.proc.pid] + descendants(self.engine.proc.pid)

    def cache(self):
        return get_json(self.url, "/v1/status")[1]["cache"] if self.serve else None


# --- 1. repeated requests ---------------------------------------------------------------

def hammer(target, data, seconds, clients=CLIENTS):
    """clients threads send data back to back for seconds, starting together. Returns the
    answers per second and everything seen (bodies and cache outcomes counted)."""
    barrier = threading.Barrier(clients + 1)
    deadline = [0.0]
    per = [None] * clients

    def client(k):
        c = HConn(target.url)
        c._connect()  # connected before the start, so the first requests arrive together
        bodies, outcomes, lat, bad = Counter(), Counter(), [], []
        first = None
        barrier.wait()
        while time.perf_counter() < deadline[0]:
            st, raw, dt = c.request("POST", "/v1/systemone", data)
            if st != 200:
                bad.append(f"{st}: {raw[:200]!r}")
                if not isinstance(st, int):
                    break
                continue
            if first is None:
                first = (time.perf_counter(), raw)
            bodies[raw] += 1
            outcomes[c.header("x-tandem-cache")] += 1
            lat.append(dt)
        c.close()
        per[k] = {"bodies": bodies, "outcomes": outcomes, "lat": lat, "bad": bad,
                  "first": first, "reconnects": c.reconnects}

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(clients)]
    [t.start() for t in threads]
    front, engines = target.pids()
    cpu0 = (cpu_seconds([os.getpid()]), cpu_seconds(front), cpu_seconds(engines))
    before = target.cache()
    with Sampler() as smp:
        deadline[0] = time.perf_counter() + seconds
        t0 = time.perf_counter()
        barrier.wait()
        [t.join() for t in threads]
        wall = time.perf_counter() - t0
    cpu1 = (cpu_seconds([os.getpid()]), cpu_seconds(front), cpu_seconds(engines))
    after = target.cache()
    bodies, outcomes, lat, bad = Counter(), Counter(), [], []
    for p in per:
        bodies.update(p["bodies"])
        outcomes.update(p["outcomes"])
        lat += p["lat"]
        bad += p["bad"]
    firsts = sorted(p["first"] for p in per if p["first"])
    n = sum(bodies.values())
    return {"n": n, "wall": wall, "rate": n / wall, "lat": lat, "bad": bad,
            "bodies": bodies, "outcomes": dict(outcomes),
            "first": firsts[0][1] if firsts else None,
            "cpu": [(b - a) / wall for a, b in zip(cpu0, cpu1)],
            "cache": ({k: after[k] - before[k] for k in ("hits", "misses", "coalesced",
                                                         "bypasses", "evictions")}
                      if before else None),
            "contended": smp.fraction(), "share": smp.share,
            "reconnects": sum(p["reconnects"] for p in per)}


def check_bytes(r):
    """Are every answer's bytes the first answer's (a hit: with the mark spliced in)?
    Returns (answers whose `answers` bytes equal the first's, answers whose whole body
    is the first or its marked copy, distinct `answers` values)."""
    first = r["first"]
    if first is None:
        return 0, 0, 0
    hit = MARK + first[1:] if first.startswith(b'{"') else None
    fa = answers_bytes(first)
    same_answers = same_body = 0
    distinct = set()
    for raw, k in r["bodies"].items():
        a = answers_bytes(raw)
        distinct.add(a)
        same_answers += k * (a is not None and a == fa)
        same_body += k * (raw == first or raw == hit)
    return same_answers, same_body, len(distinct)


def bench_repeated(targets, seconds, out):
    data = json.dumps(body()).encode()
    res = {}
    for t in targets:
        runs = []
        for attempt in (0, 1):
            wait_quiet()
            log(f"1. {t.label}: {CLIENTS} clients x {seconds:g} s, the same decision")
            runs.append(hammer(t, data, seconds))
            r = runs[-1]
            log(f"   {r['n']} answers in {r['wall']:.1f} s = {r['rate']:.1f}/s, outcomes "
                f"{r['outcomes']}, others' CPU {r['share']:.0%}")
            if (attempt == 1 or not serve_bench.quiet_active()
                    or (r["contended"] <= 0.1 and r["share"] <= FOREIGN_MAX)):
                break
            if t.serve:  # empty the cache again, so that the rerun starts as the first did
                c = Conn(t.url)
                c.request("POST", "/admin/cache/clear")
                c.close()
        # the run that shared the CPUs least is kept
        r = min(runs, key=lambda x: (x["share"], x["contended"]))
        for x in runs:
            if len(runs) > 1:
                out.setdefault("redone", []).append((t.label, x["contended"], x["share"],
                                                     x is r))
        r["same_answers"], r["same_body"], r["distinct"] = check_bytes(r)
        r["first_answers"] = answers_bytes(r["first"]) if r["first"] else None
        res[t.key] = r
        if t.key == "on":  # /metrics against /v1/status
            st = t.cache()
            series = {}
            for line in get_text(t.url, "/metrics").splitlines():
                if line.startswith("tandem_cache_") and f'model="{MODEL}"' in line:
                    series[line.split("{", 1)[0]] = float(line.rsplit(" ", 1)[1])
            out["metrics"] = {k: (series.get(f"tandem_cache_{k}_total"), st[k])
                              for k in ("hits", "misses", "coalesced", "bypasses")}
            out["metrics"]["entries"] = (series.get("tandem_cache_entries"), st["entries"])
    out["repeated"] = res


# --- 2. a hit's latency ------------------------------------------------------------------

def bench_latency(target, n, out):
    wait_quiet()
    log(f"2. a hit's latency: 1 warm-up, then {n} hits and {n} GET /livez, interleaved")
    data = json.dumps(body(STATE + " (Latency probe.)")).encode()
    c = HConn(target.url)
    st, warm, _ = c.request("POST", "/v1/systemone", data)
    assert st == 200, warm
    warm_outcome = c.header("x-tandem-cache")
    hit_body = MARK + warm[1:]
    hits, livez, wrong = [], [], []
    with Sampler() as smp:
        for i in range(n):
            for what in (("hit", "livez") if i % 2 == 0 else ("livez", "hit")):
                if what == "hit":
                    st, raw, dt = c.request("POST", "/v1/systemone", data)
                    hits.append(dt)
                    if st != 200 or c.header("x-tandem-cache") != "hit" or raw != hit_body:
                        wrong.append(f"{st} {c.header('x-tandem-cache')}: {raw[:120]!r}")
                else:
                    st, raw, dt = c.request("GET", "/livez")
                    livez.append(dt)
                    if st != 200:
                        wrong.append(f"livez {st}")
    c.close()
    out["latency"] = {"n": n, "hit": hits, "livez": livez, "wrong": wrong, "bytes": len(hit_body),
                      "warm_outcome": warm_outcome, "share": smp.share,
                      "contended": smp.fraction(), "reconnects": c.reconnects}
    log(f"   hit median {med(hits) * 1e3:.3f} ms, /livez median {med(livez) * 1e3:.3f} ms")


# --- 3. mixed traffic ----------------------------------------------------------------------

def set_cache(target, on):
    """Turns the cache of target's model on or off by its config and a SIGHUP (applied in
    place: the engine keeps running), and waits until /v1/status says so. Returns the
    engine's (pid, loads) after."""
    text = target.serve.config.read_text().replace("    cache: false\n", "")
    target.serve.config.write_text(text + ("" if on else "    cache: false\n"))
    target.serve.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    while True:
        m = status_models(target.serve)[MODEL]
        if m["cache"]["enabled"] == on:
            return m["pid"], m["loads"]
        if time.monotonic() > deadline:
            raise RuntimeError(f"{target.label}: the SIGHUP did not set cache {on}")
        time.sleep(0.05)


def mixed_half(roles, seq, seconds, rows):
    """Sends seq, each request to roles["on"] and roles["off"] (the order alternating),
    until seconds were spent in requests."""
    conns = {who: HConn(t.url) for who, t in roles.items()}
    spent = 0.0  # seconds in requests (the waits for quiet left out)
    for i, (state, first) in enumerate(seq):
        if spent >= seconds:
            break
        if i % 10 == 0:
            wait_quiet()
        data = json.dumps(body(state)).encode()
        row = {"first": first, "on_daemon": roles["on"].key}
        for who in (("on", "off") if i % 2 == 0 else ("off", "on")):
            st, raw, dt = conns[who].request("POST", "/v1/systemone", data)
            row[who] = {"status": st, "dt": dt, "cache": conns[who].header("x-tandem-cache"),
                        "answers": answers_bytes(raw) if st == 200 else None,
                        "err": raw[:200] if st != 200 else b""}
            spent += dt
        rows.append(row)
    for c in conns.values():
        c.close()
    return spent


def bench_mixed(one, two, seconds, out):
    """Half the time with daemon one's cache on and two's off, then (a SIGHUP each) the
    other way round: every engine process serves both roles equally, so a compute
    difference between the two processes drops out of the on / off ratio."""
    log(f"3. mixed traffic, 10% repeats, cache on and off interleaved, 2 x {seconds / 2:g} s")
    rows, halves = [], []
    before = {t.key: (status_models(t.serve)[MODEL]["pid"], status_models(t.serve)[MODEL]["loads"])
              for t in (one, two)}
    with Sampler() as smp:
        for h, (on, off) in enumerate(((one, two), (two, one))):
            if h == 1:
                after = {off.key: set_cache(off, False), on.key: set_cache(on, True)}
            # each half its own states: the other daemon's cache starts empty
            seq = [(st.replace("Order #", f"Order #{h + 1}-"), first)
                   for st, first in mixed_sequence(2000)]
            n0 = len(rows)
            with Sampler() as hs:
                spent = mixed_half({"on": on, "off": off}, seq, seconds / 2, rows)
            halves.append({"on": on.key, "off": off.key, "rows": (n0, len(rows)),
                           "spent": spent, "cache": on.cache(), "share": hs.share})
            log(f"   half {h + 1}: {len(rows) - n0} requests to each, the cache on in {on.key!r}")
    out["mixed"] = {"rows": rows, "halves": halves, "wall": sum(x["spent"] for x in halves),
                    "share": smp.share, "contended": smp.fraction(),
                    "engines_kept": after == before, "before": before, "after": after}


# --- setup ---------------------------------------------------------------------------------

def config(threads, cache):
    return f"""limits:
  request_timeout: 120s
  queue_depth: 256
models:
  {MODEL}:
    path: {FIXTURES / (MODEL + '.gguf')}
    ctx: 2048
    threads: {threads}
    keep_alive: forever
""" + ("" if cache else "    cache: false\n")


def bare_argv(threads):
    """A bare llama-server with the model and its defaults, on one thread like the rest."""
    return [str(ENGINE), "-m", str(FIXTURES / (MODEL + ".gguf")), "--host", "127.0.0.1",
            "--port", "{port}", "-t", str(threads), "-tb", str(threads)]


def warm(target):
    """One request with another state: the engine loads (tandem) and warms up, and the
    measured request stays out of the cache."""
    c = Conn(target.url)
    st, raw, _ = c.request("POST", "/v1/systemone", body("The build server is at 97% memory."))
    c.close()
    assert st == 200, (target.label, st, raw[:300])


# --- the report ----------------------------------------------------------------------------

def yes(ok):
    return "**PASS**" if ok else "**FAIL**"


def show_argv(argv):
    return " ".join(argv).replace(str(ENGINE), "llama-server").replace(str(FIXTURES) + "/", "")


def render(args, out, started, took):
    L = []
    add = L.append
    cmd = ("build/venv/bin/python bench/cache_bench.py --tandem build/tandem "
           f"--out {args.out_shown}" + (" --quick" if args.quick else "")
           + (f" --seconds {args.seconds:g}" if args.seconds_given else ""))
    add(f"Generated by `{cmd}` on {started:%Y-%m-%d %H:%M} UTC ({took / 60:.1f} min); "
        f"{cpu_model()} ({os.cpu_count()} cores), no GPU; engine `llama-server` "
        f"{engine_version()} (the binary tandem runs: "
        f"{'yes' if out.get('same_engine') else 'NO: ' + str(out.get('child_engine'))}); "
        f"model `{MODEL}.gguf` (fixture).")
    add("")
    add(f"Three servers, all up for the whole run: (a) `tandem serve` with the decision cache "
        f"on (its default, `cache.max_bytes` 64MiB), (b) `tandem serve` with `cache: false` on "
        f"the model, (c) a bare llama-server with the model and its own defaults (4 slots, a "
        f"unified KV pool, its prompt cache and host-RAM cache). Every engine runs on one CPU "
        f"thread (tandem: `threads: {args.threads}`, so its child gets `-t {args.threads} -tb "
        f"{args.threads}`; the bare one: `-t {args.threads} -tb {args.threads}`), so that on "
        "this 2-core machine the client and the daemon keep the other core. The decision: a "
        "state of three sentences and three questions (a 4-way choice, a 4-level score, a "
        "noul), the same bytes to every server. Latency is client-side, from sending the "
        "request to its answer's last byte, one keep-alive HTTP/1.1 connection per client "
        "thread (Python `http.client`).")
    add("")
    # 1
    rep = out["repeated"]
    add(f"### 1. The same decision, {CLIENTS} clients, {args.seconds:g} s each")
    add("")
    add(f"{CLIENTS} client threads send the same request back to back for {args.seconds:g} s, "
        "starting together after a warm-up request with another state (so the cache holds "
        "nothing of this one when they start). Answers per second: answers / (start to the "
        "last answer). CPU: cores used during the run by the client process, by tandem itself "
        "and by the engine processes. *Same `answers`*: the exact bytes of the response's "
        "`answers` equal the first answer's; *same body*: the whole body equals the first "
        "answer, or, for a hit, the first answer with `\"cached\":true,` spliced in first.")
    add("")
    add("| server | answers | answers/s | latency median / p90 (ms) | `x-tandem-cache` | "
        "same `answers` | same body | distinct `answers` | CPU: client / tandem / engine "
        "(cores) | others' CPU |")
    add("|---|---|---|---|---|---|---|---|---|---|")
    labels = {"on": "(a) tandem, cache on", "off": "(b) tandem, `cache: false`",
              "bare": "(c) bare llama-server, defaults"}
    for key in ("on", "off", "bare"):
        r = rep.get(key)
        if not r:
            continue
        oc = ", ".join(f"{k} {v}" for k, v in sorted(r["outcomes"].items(), key=str)
                       if k is not None) or "none"
        cpu = r["cpu"]
        add(f"| {labels[key]} | {r['n']} | {r['rate']:.1f} | {med(r['lat']) * 1e3:.2f} / "
            f"{pct(r['lat'], 90) * 1e3:.2f} | {oc} | {r['same_answers']}/{r['n']} | "
            f"{r['same_body']}/{r['n']} | {r['distinct']} | "
            f"{cpu[0]:.2f} / {'' if key == 'bare' else f'{cpu[1]:.2f}'} / {cpu[2]:.2f} | "
            f"{r['share']:.0%} |")
    add("")
    on, off, bare = rep["on"], rep["off"], rep["bare"]
    r_unc = on["rate"] / off["rate"] if off["rate"] else float("inf")
    r_bare = on["rate"] / bare["rate"] if bare["rate"] else float("inf")
    add(f"- cached / uncached: **{r_unc:.0f}x** the answers per second (goal ≥ "
        f"{GOALS['uncached']:.0f}x: {yes(r_unc >= GOALS['uncached'])}); cached / bare "
        f"llama-server: **{r_bare:.1f}x** (goal > 1: {yes(r_bare > GOALS['bare'])}).")
    cc = on["cache"]
    if cc is not None:
        coal_ok = cc["misses"] == 1 and cc["coalesced"] == CLIENTS - 1
        add(f"- (a)'s cache counters over the run (`/v1/status` `cache`, after minus before): "
            f"{cc['misses']} miss, {cc['coalesced']} coalesced, {cc['hits']} hits, "
            f"{cc['bypasses']} bypasses, {cc['evictions']} evictions: the {CLIENTS} first "
            f"requests, sent together, made {cc['misses']} engine evaluation"
            f"{'' if cc['misses'] == 1 else 's'} "
            f"({'coalesced as designed' if coal_ok else 'NOT coalesced as designed'}).")
    if off.get("cache") is not None:
        no_header = set(off["outcomes"]) <= {None}
        add(f"- (b)'s cache counters over the run: {off['cache']['hits']} hits, "
            f"{off['cache']['misses']} misses, {off['cache']['coalesced']} coalesced; "
            f"its answers carried {'no' if no_header else 'an'} `x-tandem-cache` header "
            "(`cache: false`: the model is not cached).")
    same_ab = on["first_answers"] is not None and on["first_answers"] == off["first_answers"]
    same_bare = on["first_answers"] == bare["first_answers"]
    add("- The first answer's `answers` bytes, cache on = cache off: "
        f"{'yes' if same_ab else 'NO'}; the bare engine's equal them: {'yes' if same_bare else 'no'}"
        + ("" if same_bare else " (its defaults, 4 slots in a unified KV pool and flash "
           "attention on auto, compute otherwise than tandem's one slot with `-fa off`; "
           "`docs/serve.md`, Determinism)") + ".")
    mt = out.get("metrics", {})
    agree = all(a == b for a, b in mt.values())
    add("- (a)'s totals since it started, `/metrics` against `/v1/status`, after part 1: "
        + ", ".join(f"{k} {a if a is None else int(a)} / {b}" for k, (a, b) in mt.items())
        + f" ({'agree' if agree else 'DISAGREE'}).")
    bad = [(k, b) for k in ("on", "off", "bare") for b in rep[k]["bad"]]
    add(f"- Non-200 answers: {len(bad)}; keep-alive connections the server closed and the "
        f"client reopened: " + ", ".join(f"{labels[k]} {rep[k]['reconnects']}" for k in rep) + ".")
    for k, b in bad[:5]:
        add(f"  - {labels[k]}: `{b}`")
    redone = out.get("redone", [])
    if redone:
        add("- Run twice (the first run had someone else's llama-server running over 10% of "
            "its time or others using over 15% of the CPUs), the run that shared the CPUs "
            "least kept: " + "; ".join(
                f"{label}: foreign engine {frac:.0%} of the time, others {share:.0%} of the "
                f"CPUs{' (kept)' if kept else ''}" for label, frac, share, kept in redone) + ".")
    add("")
    # 2
    lt = out["latency"]
    add("### 2. A hit's latency")
    add("")
    add(f"One client, one keep-alive connection to (a): one warm-up request (a decision with "
        f"another state, answered `{lt['warm_outcome']}`), then {lt['n']} identical requests "
        f"(all hits) interleaved with {lt['n']} `GET /livez` (tandem's cheapest route: the "
        "floor of an HTTP round trip through tandem and this client).")
    add("")
    add("| request | N | median (ms) | p90 (ms) | p99 (ms) | max (ms) |")
    add("|---|---|---|---|---|---|")
    for name, xs in (("`POST /v1/systemone`, a hit", lt["hit"]), ("`GET /livez`", lt["livez"])):
        add(f"| {name} | {len(xs)} | {med(xs) * 1e3:.3f} | {pct(xs, 90) * 1e3:.3f} | "
            f"{pct(xs, 99) * 1e3:.3f} | {max(xs) * 1e3:.3f} |")
    add("")
    hm = med(lt["hit"]) * 1e3
    add(f"- A hit's median: **{hm:.3f} ms** (goal ≤ {GOALS['hit_ms']:g} ms: "
        f"{yes(hm <= GOALS['hit_ms'])}), {hm - med(lt['livez']) * 1e3:+.3f} ms over `/livez`'s "
        "(the request's parse, canonical text and SHA-256 key, the lookup, and a "
        f"{lt['bytes']}-byte answer instead of a few bytes).")
    add(f"- Hits that were not `x-tandem-cache: hit` with the first answer's bytes (marked): "
        f"{len(lt['wrong'])}; others' CPU during it: {lt['share']:.0%}.")
    for w in lt["wrong"][:3]:
        add(f"  - `{w}`")
    add("")
    # 3
    mx = out["mixed"]
    rows = [r for r in mx["rows"] if r["on"]["status"] == 200 and r["off"]["status"] == 200]
    firsts = [r for r in rows if r["first"]]
    repeats = [r for r in rows if not r["first"]]
    hv = mx["halves"]
    add("### 3. Mixed traffic, 10% repeats")
    add("")
    add(f"One client sends a sequence in which every tenth request repeats an earlier one "
        f"(chosen at random, seeded) and the others are new (an order number and a day count "
        f"vary in the state); each request goes to the daemon whose cache is on and to the one "
        f"whose cache is off, the order alternating (on, off then off, on). Two halves of "
        f"{args.mixed_seconds / 2:g} s of requests each: first (a) on and (b) off, then both "
        f"configs swapped by a SIGHUP ((a) `cache: false`, (b) on; applied in place: engines "
        f"kept, same pid and loads: {'yes' if mx['engines_kept'] else 'NO'}), each half with "
        f"its own states. So each engine process serves each role equally, and a compute "
        f"difference between the two processes (two engines with the same argv differ by a "
        f"few percent here) drops out of the on / off ratio: the geometric mean of the two "
        f"halves' ratios. {len(mx['rows'])} requests to each "
        f"role, {len(firsts)} first sends and {len(repeats)} repeats answered 200 by both. "
        f"Misses: the first sends (each a cache miss on the daemon whose cache is on, as its "
        f"header says). Throughput: requests / the sum of that role's latencies (one client, so "
        f"that is its share of the wall time, {mx['wall']:.0f} s for both).")
    add("")
    add("| role | first sends (misses) median / p90 (ms) | repeats median (ms) | "
        "`x-tandem-cache` | requests/s |")
    add("|---|---|---|---|---|")
    thr = {}
    for who, label in (("on", "cache on"), ("off", "cache off")):
        fl = [r[who]["dt"] for r in firsts]
        rl = [r[who]["dt"] for r in repeats]
        oc = Counter(r[who]["cache"] for r in rows)
        thr[who] = len(rows) / sum(r[who]["dt"] for r in rows) if rows else float("nan")
        add(f"| {label} | {med(fl) * 1e3:.1f} / {pct(fl, 90) * 1e3:.1f} | "
            f"{med(rl) * 1e3:.2f} | "
            + (", ".join(f"{k} {v}" for k, v in sorted(oc.items(), key=str) if k) or "none")
            + f" | {thr[who]:.2f} |")
    add("")
    # per half: on / off, paired; the two halves' geometric mean cancels the process difference
    per = []
    for h in hv:
        fr = [r for r in firsts if r["on_daemon"] == h["on"]]
        per.append({"paired": [r["on"]["dt"] / r["off"]["dt"] for r in fr],
                    "on": [r["on"]["dt"] for r in fr], "off": [r["off"]["dt"] for r in fr],
                    "diff": [(r["on"]["dt"] - r["off"]["dt"]) * 1e3 for r in fr]})
    add("| half | cache on in | misses | on / off, ratio of medians | median of paired ratios "
        "| median of paired differences (ms) | others' CPU |")
    add("|---|---|---|---|---|---|---|")
    for i, (h, p) in enumerate(zip(hv, per)):
        add(f"| {i + 1} | {labels[h['on']].split(',')[0]} | {len(p['paired'])} | "
            f"{med(p['on']) / med(p['off']):.3f} | {med(p['paired']):.3f} | "
            f"{med(p['diff']):+.2f} | {h['share']:.0%} |")
    add("")

    def combined(ps, stat):
        vals = [stat(p) for p in ps]
        return (vals[0] * vals[1]) ** 0.5 if len(vals) == 2 else vals[0]
    mratio = combined(per, lambda p: med(p["on"]) / med(p["off"]))
    pratio = combined(per, lambda p: med(p["paired"]))
    rng = random.Random(1)
    boots = sorted(combined([{"paired": [rng.choice(p["paired"]) for _ in p["paired"]]}
                             for p in per], lambda p: med(p["paired"])) for _ in range(2000))
    lo, hi = boots[50], boots[1949]
    band = GOALS["miss_band"]
    miss_ok = abs(mratio - 1) <= band and abs(pratio - 1) <= band
    add(f"- Misses, on / off, the two halves' geometric mean: **{mratio:.3f}** (ratio of "
        f"medians), **{pratio:.3f}** (median of paired ratios; 95% bootstrap interval "
        f"{lo:.3f} to {hi:.3f}). Goal ~1.0 within noise, taken as within 1 ± {band:g} for both: "
        f"{yes(miss_ok)}.")
    add(f"- A bound on the lookup's own cost: a hit's whole path over `/livez`'s (part 2) is "
        f"{(med(lt['hit']) - med(lt['livez'])) * 1e3:.3f} ms, "
        f"{(med(lt['hit']) - med(lt['livez'])) / med([r['off']['dt'] for r in firsts]):.5%} of "
        "a miss's median here; a miss does the same canonical text, key and lookup, plus a "
        "copy of its answer.")
    if len(per) == 2:
        proc = (med(per[0]["paired"]) / med(per[1]["paired"])) ** 0.5
        add(f"- The two processes' own difference, (a)'s engine over (b)'s on the same misses "
            f"(the square root of half 1's paired median over half 2's): {proc:.3f}.")
    add(f"- Throughput, on / off: **{thr['on'] / thr['off']:.2f}x** (every tenth request a "
        "repeat: ~1.11x if a hit costs nothing and a miss costs the same).")
    miss_hdr = sum(r["on"]["cache"] == "miss" for r in firsts)
    hit_hdr = sum(r["on"]["cache"] == "hit" for r in repeats)
    same = sum(r["on"]["answers"] is not None and r["on"]["answers"] == r["off"]["answers"]
               for r in rows)
    add(f"- First sends answered `miss` where the cache is on: {miss_hdr}/{len(firsts)}; "
        f"repeats answered `hit`: {hit_hdr}/{len(repeats)}; `answers` bytes equal on and off: "
        f"{same}/{len(rows)} (hits included).")
    nbad = sum(r[w]["status"] != 200 for r in mx["rows"] for w in ("on", "off"))
    add(f"- Non-200 answers: {nbad}; others' CPU during it: {mx['share']:.0%}; the cache at "
        f"the end of each half: "
        + "; ".join(f"{h['cache']['entries']} entries, {h['cache']['bytes']} bytes" for h in hv)
        + ".")
    shown = 0
    for r in mx["rows"]:
        for w in ("on", "off"):
            if r[w]["status"] != 200 and shown < 3:
                add(f"  - {w}: {r[w]['status']} `{r[w]['err']!r}`")
                shown += 1
    add("")
    # goals
    all_same = on["same_body"] == on["n"] and on["same_answers"] == on["n"] and not lt["wrong"]
    add("### Goals (issue 42)")
    add("")
    add("| goal | threshold | measured | |")
    add("|---|---|---|---|")
    add(f"| cached / uncached answers per second, same request, {CLIENTS} clients | "
        f"≥ {GOALS['uncached']:.0f}x | {r_unc:.0f}x | {yes(r_unc >= GOALS['uncached'])} |")
    add(f"| cached / bare llama-server (defaults, prompt cache on) | > 1x | {r_bare:.1f}x | "
        f"{yes(r_bare > GOALS['bare'])} |")
    add(f"| a hit's median latency | ≤ {GOALS['hit_ms']:g} ms | {hm:.3f} ms | "
        f"{yes(hm <= GOALS['hit_ms'])} |")
    add(f"| misses' median latency, cache on / off | 1 ± {band:g} | {mratio:.3f} "
        f"(paired {pratio:.3f}) | {yes(miss_ok)} |")
    add(f"| every cached answer the first answer's bytes | all | "
        f"{on['same_body']}/{on['n']} (part 1), {lt['n'] - len(lt['wrong'])}/{lt['n']} "
        f"(part 2) | {yes(all_same)} |")
    add("")
    cpu_on = rep["on"]["cpu"]
    add(f"The cached rate is what this Python client could send ({CLIENTS} threads sharing one "
        f"interpreter lock): during (a)'s run the client used {cpu_on[0]:.2f} cores and tandem "
        f"{cpu_on[1]:.2f}"
        + (", so the client, not tandem, is the limit, and the rate is a lower bound of what "
           "tandem serves from its cache." if cpu_on[0] > cpu_on[1] else "."))
    add("")
    add("tandem's configs (`listen` and `logs` aside; (b) adds `cache: false` to the model) "
        "and the bare engine's command line (`{port}` a free port):")
    add("")
    add("```yaml")
    add(out["config_on"].rstrip())
    add("```")
    add("")
    add("```")
    add(show_argv(out["bare_argv"]))
    add("```")
    add("")
    add(f"tandem's child ran: `{show_argv(out['child_argv'])}`.")
    if QUIET["max_wait"] > 0:
        add("")
        add(f"Before each measurement the script waited (at most {QUIET['max_wait']:g} s) until "
            f"no llama-server it did not start ran and others used under {FOREIGN_MAX:.0%} of "
            f"the CPUs: it waited {QUIET['waits']} of {QUIET['checks']} times, "
            f"{QUIET['waited']:.0f} s in all; {QUIET['busy']} measurements started before it "
            "was quiet.")
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tandem", default=str(ROOT / "build" / "tandem"))
    ap.add_argument("--out", default="docs/benchmarks.md")
    ap.add_argument("--quick", action="store_true", help="a smoke run (about a minute)")
    ap.add_argument("--seconds", type=float, help="part 1's duration per server (default 30; "
                    "quick 8)")
    ap.add_argument("--n", type=int, help="part 2's hits (default 200; quick 50)")
    ap.add_argument("--mixed-seconds", type=float, help="part 3's seconds of requests "
                    "(default 100; quick 20)")
    ap.add_argument("--threads", type=int, default=1, help="every engine's -t/-tb (default 1)")
    ap.add_argument("--quiet-wait", type=float, help="before each measurement, wait at most "
                    "this long for quiet (default 30; quick 0)")
    ap.add_argument("--quiet-budget", type=float, default=90.0,
                    help="total seconds the run may wait for quiet (default 90)")
    ap.add_argument("--keep-logs", action="store_true", help="keep the temporary folder")
    args = ap.parse_args()
    q = args.quick
    args.seconds_given = args.seconds is not None
    args.seconds = args.seconds or (8.0 if q else 30.0)
    args.n = args.n or (50 if q else 200)
    args.mixed_seconds = args.mixed_seconds or (20.0 if q else 100.0)
    QUIET["max_wait"] = args.quiet_wait if args.quiet_wait is not None else (0.0 if q else 30.0)
    QUIET["budget"] = args.quiet_budget
    args.out_shown = args.out
    tandem = Path(args.tandem).resolve()
    for p in (ENGINE, FIXTURES / f"{MODEL}.gguf", tandem):
        if not p.exists():
            sys.exit(f"cache_bench: {p} is missing: run `make deps fixtures` and `make`")
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.perf_counter()
    out = {"config_on": config(args.threads, True)}
    cleanup = Cleanup()
    tmpdir = tempfile.mkdtemp(prefix="cache-bench-")
    tmp = Path(tmpdir)
    try:
        s_on, _ = start_serve(tandem, tmp, "on", None, cleanup, config(args.threads, True))
        s_off, _ = start_serve(tandem, tmp, "off", None, cleanup, config(args.threads, False))
        out["bare_argv"] = bare_argv(args.threads)
        bare = Engine(out["bare_argv"], tmp / "bare.log")
        cleanup.add(bare.kill)
        bare.start()
        targets = [Target("on", "(a) tandem, cache on", s_on.url, serve=s_on),
                   Target("off", "(b) tandem, cache: false", s_off.url, serve=s_off),
                   Target("bare", "(c) bare llama-server", bare.url, engine=bare)]
        for t in targets:
            warm(t)
        child = cmdline(status_models(s_on)[MODEL]["pid"])
        out["child_argv"] = child
        out["child_engine"] = child[0]
        out["same_engine"] = Path(child[0]).resolve() == ENGINE.resolve()
        bench_repeated(targets, args.seconds, out)
        bare.stop()  # parts 2 and 3 are tandem's alone
        bench_latency(targets[0], args.n, out)
        bench_mixed(targets[0], targets[1], args.mixed_seconds, out)
    finally:
        cleanup.finish(tmpdir, args.keep_logs)
    took = time.perf_counter() - t0
    text = render(args, out, started, took).replace(tmpdir, "$TMP")
    replace_section(Path(args.out), "decision-cache", "## Decision cache", text)
    print(text)
    log(f"took {took:.0f} s")


if __name__ == "__main__":
    main()
