#!/usr/bin/env python3
"""Benchmark: what `tandem serve` costs and saves, against the bare engine and its router.

Measured side by side in one run on this machine, with the pinned llama-server and
the two fixture decision models (smollm2-decider, gemma3-decider), every engine
started with the argv tandem gives its own child, on a TCP port (read back from
/proc/<pid>/cmdline of tandem's child):

 1. proxy overhead: one identical POST /v1/systemone (and a 1-token chat
    completion) sent N times, interleaved, straight to a bare llama-server and
    through `tandem serve` with the model resident (both models fit);
 2. swap time: with a budget that fits one model, alternating single requests
    A, B, A, B... through tandem (each one forces a swap), against a bare
    "stop the other llama-server, start this one, send the request", interleaved;
 3. an alternating two-model workload (two client threads, one per model, M
    requests each) against tandem (one-fits budget), llama-server's router mode
    (--models-max 1, same models and flags) and a kill-and-start script.

Usage:
  build/venv/bin/python bench/serve_bench.py --tandem build/tandem \\
      --out docs/benchmarks.md [--quick] [--keep-logs] [--raw FILE.json]
  build/venv/bin/python bench/serve_bench.py --out docs/benchmarks.md --render-from FILE.json

Before each measurement it waits (--quiet-wait, --quiet-budget) until no one else's
llama-server runs and other processes use little CPU: on a 2-core machine, llama.cpp
requests that share the cores with another engine take seconds instead of milliseconds.
"""
import argparse
import datetime
import http.client
import json
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from conftest import ENGINE, FIXTURES, PINS, Serve, free_port  # noqa: E402
from procs import (cmdline, cpu_snapshot, descendants, foreign_engines, foreign_share,  # noqa: E402
                   tcp_argv)

A, B = "smollm2-decider", "gemma3-decider"
MODELS = (A, B)
BOTH_FIT, ONE_FITS = "2GiB", "400MiB"
REQUEST_TIMEOUT = 120  # seconds, per request, everywhere: longer counts as a hang
GOALS = {"ratio": 1.02, "added_ms": 1.0, "swap": 1.2}


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- statistics ----------------------------------------------------------------------

def pct(xs, q):
    """Percentile with linear interpolation (q in 0..100)."""
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def med(xs):
    return statistics.median(xs) if xs else float("nan")


# --- requests ------------------------------------------------------------------------

def choice_body(model, state):
    return {"model": model, "state": state,
            "questions": {"act": {"type": "choice",
                                  "instructions": "What should the operator do?",
                                  "criteria": {"reduce": "reduce concurrency",
                                               "stop": "stop non-critical jobs",
                                               "nothing": "change nothing"}}}}


def chat_body(model):
    return {"model": model, "max_tokens": 1, "temperature": 0,
            "messages": [{"role": "user", "content": "Say yes."}]}


class Conn:
    """One keep-alive HTTP/1.1 connection, as an SDK client holds one. request()
    returns (status, body bytes, seconds); status is "timeout" past the timeout
    and "error: ..." when the connection failed."""

    def __init__(self, url, timeout=REQUEST_TIMEOUT):
        # url: "http://host:port", or "unix:PATH" for an engine's socket in tandem's run folder
        self.unix = url[len("unix:"):] if url.startswith("unix:") else None
        host, port = ("localhost", "0") if self.unix else url.split("//", 1)[1].rsplit(":", 1)
        self.host, self.port, self.timeout = host, int(port), timeout
        self.c = None
        self.reconnects = 0

    def _connect(self):
        self.c = http.client.HTTPConnection(self.host, self.port or None, timeout=self.timeout)
        if self.unix:
            self.c.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.c.sock.settimeout(self.timeout)
            self.c.sock.connect(self.unix)
            return
        self.c.connect()
        self.c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def request(self, method, path, body=None, headers=None):
        data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        for attempt in (0, 1):
            if self.c is None:
                self._connect()
            t = time.perf_counter()
            try:
                self.c.request(method, path, data, hdrs)
                r = self.c.getresponse()
                raw = r.read()
                dt = time.perf_counter() - t
                if r.getheader("Connection", "").lower() == "close":
                    self.close()
                return r.status, raw, dt
            except socket.timeout:
                dt = time.perf_counter() - t
                self.close()
                return "timeout", b"", dt
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                    http.client.CannotSendRequest, http.client.BadStatusLine) as e:
                # a keep-alive connection the server had closed: reconnect once
                self.close()
                if attempt == 1:
                    return f"error: {e!r}", b"", time.perf_counter() - t
                self.reconnects += 1
            except OSError as e:
                self.close()
                return f"error: {e!r}", b"", time.perf_counter() - t

    def close(self):
        if self.c is not None:
            try:
                self.c.close()
            except OSError:
                pass
        self.c = None


def get_json(url, path, timeout=10):
    c = Conn(url, timeout)
    try:
        st, raw, _ = c.request("GET", path)
    finally:
        c.close()
    return st, (json.loads(raw) if st == 200 else raw)


def get_text(url, path, timeout=10):
    c = Conn(url, timeout)
    try:
        st, raw, _ = c.request("GET", path)
    finally:
        c.close()
    return raw.decode(errors="replace") if st == 200 else ""


# --- processes -----------------------------------------------------------------------

def kill_pids(pids):
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Engine:
    """A bare llama-server from an argv template ("{port}" is replaced by a free
    port), as a user's script runs it. start() returns spawn-to-healthy seconds,
    polling /health every 50 ms as tandem does; stop() SIGTERMs and waits."""

    def __init__(self, argv_template, log_path):
        self.template = argv_template
        self.log_path = log_path
        self.proc = None

    def start(self, timeout=REQUEST_TIMEOUT):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [a.replace("{port}", str(self.port)) for a in self.template]
        self._log = open(self.log_path, "ab")
        t = time.perf_counter()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = t + timeout
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited {self.proc.returncode}; see {self.log_path}")
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
                c.request("GET", "/health")
                ok = c.getresponse().status == 200
                c.close()
                if ok:
                    return time.perf_counter() - t
            except OSError:
                pass
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"llama-server not healthy after {timeout}s; see {self.log_path}")

    def stop(self, grace=15):
        t = time.perf_counter()
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()
        return time.perf_counter() - t

    def kill(self):
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()


class Cleanup:
    """Everything started, stopped in reverse order in a finally."""

    def __init__(self):
        self.items = []

    def add(self, fn):
        self.items.append(fn)

    def finish(self, tmpdir, keep_logs):
        """Runs the cleanups, then removes tmpdir unless the logs are to be kept."""
        self.run()
        if keep_logs:
            log(f"logs kept in {tmpdir}")
        else:
            subprocess.run(["rm", "-rf", tmpdir])

    def run(self):
        while self.items:
            fn = self.items.pop()
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - cleanup must go on
                log(f"cleanup: {e!r}")


def tandem_config(budget):
    return f"""budget:
  ram: {budget}
defaults:
  model: {A}
limits:
  request_timeout: 120s
models:
  {A}:
    path: {FIXTURES / (A + '.gguf')}
    ctx: 2048
    flash_attn: false
  {B}:
    path: {FIXTURES / (B + '.gguf')}
    ctx: 2048
    flash_attn: false
"""


def start_serve(tandem_bin, tmp, name, budget, cleanup, config=None):
    """`tandem serve` on config (default: tandem_config(budget)) in tmp/name;
    returns it and a stop function that also kills any child left behind."""
    d = tmp / name
    d.mkdir()
    s = Serve(tandem_bin, d, config or tandem_config(budget))

    def stop():
        kids = descendants(s.proc.pid)
        s.stop()
        kill_pids([p for p in kids if Path(f"/proc/{p}").exists()])
    cleanup.add(stop)
    return s, stop


def load_seconds(serve, model):
    """tandem_model_load_seconds_sum for one model, from /metrics."""
    for line in get_text(serve.url, "/metrics").splitlines():
        if line.startswith("tandem_model_load_seconds_sum") and f'"{model}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def status_models(serve):
    st, body = get_json(serve.url, "/v1/status")
    return {m["name"]: m for m in body["models"]}


def child_argv(serve, model):
    """The argv tandem's resident child for model runs with, on TCP at {port} (tcp_argv)."""
    return tcp_argv(cmdline(status_models(serve)[model]["pid"]))


# --- 1. proxy overhead ---------------------------------------------------------------

def loadavg():
    return os.getloadavg()[0]


QUIET = {"max_wait": 90.0, "budget": 1800.0, "waits": 0, "waited": 0.0, "busy": 0, "checks": 0, "dropped": 0}


FOREIGN_MAX = 0.15  # share of the machine's CPU others may use during a kept measurement


class Sampler:
    """Over a with-block: the share of the CPUs others used, and how often (sampled
    every 0.5 s) a llama-server this benchmark did not start was running."""

    def __enter__(self):
        self.n = self.hits = 0
        self.done = threading.Event()
        self.th = threading.Thread(target=self._run, daemon=True)
        self.a = cpu_snapshot()
        self.th.start()
        return self

    def _run(self):
        while not self.done.wait(0.5):
            self.n += 1
            self.hits += bool(foreign_engines())

    def __exit__(self, *exc):
        self.done.set()
        self.th.join()
        self.share = foreign_share(self.a, cpu_snapshot())

    def fraction(self):
        return self.hits / self.n if self.n else 0.0


def quiet_active():
    return QUIET["max_wait"] > 0 and QUIET["waited"] < QUIET["budget"]


def wait_quiet():
    """Waits (at most QUIET["max_wait"] s) until no other llama-server runs here and
    others use under FOREIGN_MAX of the CPUs (over 1 s), so that a measurement does
    not share the 2 cores with someone else's work."""
    QUIET["checks"] += 1
    if QUIET["max_wait"] <= 0 or QUIET["waited"] >= QUIET["budget"]:
        QUIET["busy"] += bool(foreign_engines())
        return
    t = time.perf_counter()
    waited = False
    while True:
        a = cpu_snapshot()
        time.sleep(1.0)
        if not foreign_engines() and foreign_share(a, cpu_snapshot()) < FOREIGN_MAX:
            break
        if (time.perf_counter() - t >= QUIET["max_wait"]
                or QUIET["waited"] + time.perf_counter() - t >= QUIET["budget"]):
            QUIET["busy"] += 1
            break
        waited = True
    if waited:
        QUIET["waits"] += 1
        QUIET["waited"] += time.perf_counter() - t


def engine_times(log_path, n):
    """The last n completions' `total time` (seconds) from an engine log."""
    text = Path(log_path).read_text(errors="replace")
    return [float(x) / 1e3 for x in re.findall(r"\|\s+total time =\s+([\d.]+) ms", text)][-n:]


TARGETS = ("bare", "child", "tandem")  # a bare llama-server; tandem's own child, straight to
# its port; the same child through tandem


def bench_proxy(tandem_bin, tmp, n, cleanup, out):
    log(f"proxy overhead: tandem serve ({BOTH_FIT}) and a bare llama-server, {n} rounds")
    s, stop_s = start_serve(tandem_bin, tmp, "proxy", BOTH_FIT, cleanup)
    via = Conn(s.url)
    st, raw, _ = via.request("POST", "/v1/systemone", choice_body(A, "warm"))
    assert st == 200, raw
    argv = {A: child_argv(s, A)}
    out["argv"] = argv
    child = status_models(s)[A]
    bare = Engine(argv[A], tmp / "proxy-bare.log")
    cleanup.add(bare.kill)
    bare.start()
    conns = {"bare": Conn(bare.url), "child": Conn(f"unix:{child['socket']}"),
             "tandem": via}
    logs = {"bare": bare.log_path, "child": Path(child["log"]), "tandem": Path(child["log"])}
    tandem_h = {"X-Tandem-Timeout-Ms": str(REQUEST_TIMEOUT * 1000)}
    cases = {"systemone": ("/v1/systemone", choice_body(A, "The build farm is at 97% memory "
                                                          "and the queue keeps growing."), n),
             "chat, 1 token": ("/v1/chat/completions", chat_body(A), max(n // 2, 10))}
    # one round: bare, child, bare, tandem (or bare, tandem, bare, child): every request
    # follows one to another engine process, so none finds its CPU caches warm from the
    # request before (a request right after one to the same process runs measurably
    # faster here), and child and tandem each take the first slot equally often
    rounds = [("bare", "child", "bare", "tandem"), ("bare", "tandem", "bare", "child")]
    res = {}
    for case, (path, body, count) in cases.items():
        data = json.dumps(body).encode()
        for _ in range(5):  # warm-up: the first requests pay one-off costs on each
            for who in TARGETS:
                st, raw, _ = conns[who].request("POST", path, data,
                                                tandem_h if who == "tandem" else None)
                assert st == 200, (who, st, raw)
        t = {who: [] for who in TARGETS}
        paired = {"child": [], "tandem": []}  # minus the bare request just before
        sent = {"bare": [], "child": []}  # which target each engine request came from, in order
        mismatches, bad = 0, []
        i = redone = 0
        quiet_due = True
        while i < count:
            if quiet_due or i % 10 == 0:
                wait_quiet()
                quiet_due = False
            got, rows = {}, []
            for who in rounds[i % 2]:
                st, raw, dt = conns[who].request("POST", path, data,
                                                 tandem_h if who == "tandem" else None)
                got[who] = raw
                rows.append((who, st, raw, dt))
            if quiet_active() and foreign_engines() and redone < count:
                # someone else's engine started meanwhile: the round may have shared the
                # CPUs with it, so it is dropped and run again once the machine is quiet
                redone += 1
                quiet_due = True
                for who, *_ in rows:
                    sent["bare" if who == "bare" else "child"].append((who, None))
                continue
            prev_bare = None
            for who, st, raw, dt in rows:
                if st != 200:
                    bad.append(f"{who} {st}: {raw[:200]!r}")
                t[who].append(dt)
                if who == "bare":
                    prev_bare = len(t["bare"]) - 1
                else:
                    paired[who].append(prev_bare)
                sent["bare" if who == "bare" else "child"].append((who, len(t[who]) - 1))
            if case == "systemone":
                try:
                    ans = [json.loads(got[w]).get("answers") for w in TARGETS]
                    if not ans[0] == ans[1] == ans[2]:
                        mismatches += 1
                except ValueError:
                    mismatches += 1
            i += 1
        QUIET["dropped"] += redone
        r = {"n": count, **t, "paired": paired, "redone": redone,
             "mismatches": mismatches if case == "systemone" else None, "bad": bad}
        if path == "/v1/chat/completions":
            # the engine logs its own compute time per completion: the client's latency
            # minus it is the HTTP path alone (engine's server + tandem), free of the
            # engine's compute noise
            eng = {w: [None] * len(t[w]) for w in TARGETS}
            for engine, labels in sent.items():
                times = engine_times(logs[engine], len(labels))
                if len(times) != len(labels):
                    break
                for (who, k), e in zip(labels, times):
                    if k is not None:
                        eng[who][k] = e
            else:
                r["engine"] = eng
                r["outside"] = {w: [a - b for a, b in zip(t[w], eng[w])] for w in TARGETS}
        res[case] = r
        log(f"  {case}: " + ", ".join(f"{w} {med(t[w]) * 1e3:.2f} ms" for w in TARGETS)
            + f" (median), {len(bad)} non-200")
    res["reconnects"] = {w: c.reconnects for w, c in conns.items()}
    for c in conns.values():
        c.close()
    bare.stop()
    stop_s()
    out["proxy"] = res


# --- 2. swap time --------------------------------------------------------------------

def bench_swap(tandem_bin, tmp, rounds, cleanup, out):
    log(f"swap: tandem serve ({ONE_FITS}) against stop+start+request, {rounds} rounds")
    s, stop_s = start_serve(tandem_bin, tmp, "swap", ONE_FITS, cleanup)
    via = Conn(s.url)
    h = {"X-Tandem-Timeout-Ms": str(REQUEST_TIMEOUT * 1000)}
    st, raw, _ = via.request("POST", "/v1/systemone", choice_body(A, "warm"), h)
    assert st == 200, raw
    argv = out["argv"]
    if A in argv and child_argv(s, A) != argv[A]:
        out.setdefault("notes", []).append(
            f"tandem's child for {A} ran with a different argv at {ONE_FITS} than at {BOTH_FIT}")
    bare = {"cur": None, "model": None}

    def bare_swap(model, i):
        if bare["cur"]:  # the previous request, as for tandem (untimed)
            c = Conn(bare["cur"].url)
            c.request("POST", "/v1/systemone", choice_body(bare["model"], f"prev {i}"))
            c.close()
        t0 = time.perf_counter()
        stop = bare["cur"].stop() if bare["cur"] else 0.0
        e = Engine(argv[model], tmp / f"swap-bare-{model}-{i}.log")
        cleanup.add(e.kill)
        load = e.start()
        c = Conn(e.url)
        st, raw, req = c.request("POST", "/v1/systemone", choice_body(model, f"case {i}"))
        c.close()
        total = time.perf_counter() - t0
        bare["cur"], bare["model"] = e, model
        return {"model": model, "stop": stop, "load": load, "request": req, "total": total,
                "status": st}

    def tandem_swap(model, i, gap):
        other = B if model == A else A
        before = status_models(s)
        lsum = load_seconds(s, model)
        # the same client's previous request, to the resident model, just answered:
        # the timed request follows it at once (back to back) or after gap seconds
        pst, praw, _ = via.request("POST", "/v1/systemone", choice_body(other, f"prev {i}"), h)
        if pst != 200:
            out.setdefault("notes", []).append(f"swap: priming request to {other}: {pst} {praw[:200]!r}")
        if gap:
            time.sleep(gap)
        st, raw, dt = via.request("POST", "/v1/systemone", choice_body(model, f"case {i}"), h)
        after = status_models(s)
        loads = sum(after[m]["loads"] - before[m]["loads"] for m in MODELS)
        return {"model": model, "total": dt, "status": st, "loads": loads,
                "load": load_seconds(s, model) - lsum, "gap": gap,
                "body": raw[:300] if st != 200 else b""}

    # need B's argv too: let tandem load it once (this also warms the page cache)
    st, raw, _ = via.request("POST", "/v1/systemone", choice_body(B, "warm"), h)
    assert st == 200, raw
    argv.setdefault(B, child_argv(s, B))
    # start both sides from the same state: A resident
    st, raw, _ = via.request("POST", "/v1/systemone", choice_body(A, "warm"), h)
    assert st == 200, raw
    bare_swap(A, -1)
    tl, bl = [], []
    i = redone = 0
    for r in range(rounds):
        for gap in (0.0, 0.3):  # back to back, and after the client has been idle 300 ms
            for model in (B, A):  # each request wants the model that is not resident
                while True:
                    wait_quiet()
                    snap = cpu_snapshot()
                    if i % 2 == 0:
                        pair = (tandem_swap(model, i, gap), bare_swap(model, i))
                    else:
                        pair = tuple(reversed((bare_swap(model, i), tandem_swap(model, i, gap))))
                    i += 1
                    busy = foreign_engines() or foreign_share(snap, cpu_snapshot()) > FOREIGN_MAX
                    if not (quiet_active() and busy and redone < 4 * rounds):
                        break
                    # someone else's engine started meanwhile: drop the pair, put the other
                    # model back on both sides (untimed), and measure this swap again
                    redone += 1
                    other = A if model == B else B
                    wait_quiet()
                    via.request("POST", "/v1/systemone", choice_body(other, "restore"), h)
                    bare_swap(other, -2)
                tl.append(pair[0])
                bl.append(pair[1])
        log(f"  round {r + 1}/{rounds}: tandem {tl[-1]['total']:.2f} s, "
            f"bare {bl[-1]['total']:.2f} s (last swap)")
    via.close()
    if bare["cur"]:
        bare["cur"].stop()
    stop_s()
    QUIET["dropped"] += redone
    out["swap"] = {"tandem": tl, "bare": bl, "redone": redone}


# --- 3. alternating workload ---------------------------------------------------------

def run_clients(url, m, headers=None):
    """Two threads, one per model, each sending m requests back to back."""
    results = {A: [], B: []}

    def client(model):
        c = Conn(url)
        for i in range(m):
            st, raw, dt = c.request("POST", "/v1/systemone",
                                    choice_body(model, f"case {i}: disk at {50 + i}%"), headers)
            results[model].append((st, dt, raw[:300] if st != 200 else b""))
        c.close()

    t = time.perf_counter()
    threads = [threading.Thread(target=client, args=(mm,), daemon=True) for mm in MODELS]
    [th.start() for th in threads]
    [th.join(m * REQUEST_TIMEOUT * 2 + 60) for th in threads]
    wall = time.perf_counter() - t
    stuck = sum(th.is_alive() for th in threads)
    return results, wall, stuck


def summarize(results, wall, loads, stuck):
    all_r = [r for model in MODELS for r in results[model]]
    return {"wall": wall, "loads": loads, "n": len(all_r),
            "ok": sum(r[0] == 200 for r in all_r),
            "failed": [f"{r[0]} {r[2]!r}" for r in all_r if r[0] != 200 and r[0] != "timeout"],
            "hangs": sum(r[0] == "timeout" for r in all_r) + stuck,
            "lat": [r[1] for r in all_r if r[0] == 200]}


def write_preset(tmp, argv):
    """The router's INI: one section per model, the same flags as tandem's child.
    The router sets host, port and alias (the section name) itself."""
    lines = ["version = 1", ""]
    for model in MODELS:
        a = argv[model][1:]
        lines.append(f"[{model}]")
        i = 0
        while i < len(a):
            flag = a[i]
            has_value = i + 1 < len(a) and not a[i + 1].startswith("-")
            value = a[i + 1] if has_value else "true"
            i += 2 if has_value else 1
            if flag in ("--host", "--port", "--alias"):
                continue
            key = "model" if flag == "-m" else flag.lstrip("-")
            lines.append(f"{key} = {value}")
        lines.append("")
    path = tmp / "router-preset.ini"
    path.write_text("\n".join(lines))
    return path


def bench_router(tmp, m, rep, cleanup, out):
    ini = write_preset(tmp, out["argv"])
    port = free_port()
    argv = [str(ENGINE), "--models-preset", str(ini), "--models-max", "1",
            "--host", "127.0.0.1", "--port", str(port)]
    out["router_argv"] = [str(a) for a in argv]
    out["router_ini"] = ini.read_text()
    cache = tmp / f"llama-cache-{rep}"
    cache.mkdir()
    env = {**os.environ, "LLAMA_CACHE": str(cache), "HF_HOME": str(cache),
           "HF_HUB_CACHE": str(cache)}  # no cached models besides the preset's two
    log_path = tmp / f"router-{rep}.log"
    logf = open(log_path, "wb")
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                            env=env, start_new_session=True)

    def stop():
        kids = descendants(proc.pid)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        kill_pids([p for p in kids if Path(f"/proc/{p}").exists()])
        logf.close()
    cleanup.add(stop)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"router exited {proc.returncode}; see {log_path}")
        try:
            if get_json(url, "/health", 2)[0] == 200:
                break
        except OSError:
            pass
        if time.time() > deadline:
            raise RuntimeError(f"router not healthy; see {log_path}")
        time.sleep(0.05)
    st, models = get_json(url, "/models")
    ids = sorted(d["id"] for d in models["data"])
    assert ids == sorted(MODELS), f"router lists {ids}"
    results, wall, stuck = run_clients(url, m)
    text = log_path.read_text(errors="replace")
    spawns = re.findall(r"spawning server instance with name=(\S+)", text)
    st, models = get_json(url, "/models")
    out["router_child_args"] = {d["id"]: d["status"].get("args") for d in models["data"]
                                if d.get("status", {}).get("args")}
    res = summarize(results, wall, len(spawns), stuck)
    res["log_errors"] = [ln.strip() for ln in text.splitlines()
                         if re.search(r"model limit reached|not running|failed to load|"
                                      r"did not go through|force-killing", ln)][:8]
    stop()
    return res


def bench_tandem_workload(tandem_bin, tmp, m, rep, cleanup):
    s, stop_s = start_serve(tandem_bin, tmp, f"workload-{rep}", ONE_FITS, cleanup)
    h = {"X-Tandem-Timeout-Ms": str(REQUEST_TIMEOUT * 1000)}
    results, wall, stuck = run_clients(s.url, m, h)
    st = status_models(s)
    res = summarize(results, wall, sum(st[mm]["loads"] for mm in MODELS), stuck)
    res["evictions"] = sum(st[mm]["evictions"] for mm in MODELS)
    res["crashes"] = sum(st[mm]["crashes"] for mm in MODELS)
    stop_s()
    return res


def bench_script(tmp, m, rep, argv, cleanup):
    """The users' script: one llama-server at a time, requests in arrival order
    (A, B, A, B...), kill and start on every switch."""
    t = time.perf_counter()
    cur, cur_model, loads = None, None, 0
    results = {A: [], B: []}
    for i in range(m):
        for model in MODELS:
            t_req = time.perf_counter()
            if model != cur_model:
                if cur:
                    cur.stop()
                cur = Engine(argv[model], tmp / f"script-{rep}-{model}-{i}.log")
                cleanup.add(cur.kill)
                cur.start()
                cur_model, loads = model, loads + 1
            c = Conn(cur.url)
            st, raw, _ = c.request("POST", "/v1/systemone",
                                   choice_body(model, f"case {i}: disk at {50 + i}%"))
            c.close()
            dt = time.perf_counter() - t_req  # the switch is part of what this request waits
            results[model].append((st, dt, raw[:300] if st != 200 else b""))
    if cur:
        cur.stop()
    return summarize(results, time.perf_counter() - t, loads, 0)


def bench_workload(tandem_bin, tmp, m, reps, script, cleanup, out):
    runs = {"tandem": [], "router": [], "script": []}
    for rep in range(reps):
        order = ["tandem", "router", "script"] if rep % 2 == 0 else ["script", "router", "tandem"]
        for what in order:
            if what == "script" and not script:
                continue
            for attempt in (0, 1):
                wait_quiet()
                log(f"workload rep {rep + 1}/{reps}: {what}, 2 clients x {m} requests")
                tag = f"{rep}-{attempt}"
                with Sampler() as smp:
                    if what == "tandem":
                        r = bench_tandem_workload(tandem_bin, tmp, m, tag, cleanup)
                    elif what == "router":
                        r = bench_router(tmp, m, tag, cleanup, out)
                    else:
                        r = bench_script(tmp, m, tag, out["argv"], cleanup)
                r["contended"], r["share"] = smp.fraction(), smp.share
                log(f"  {what}: {r['wall']:.1f} s, {r['loads']} loads, {r['ok']}/{r['n']} ok, "
                    f"{r['hangs']} hangs; another engine ran {r['contended']:.0%} of the time, "
                    f"others used {r['share']:.0%} of the CPUs")
                if (attempt == 1 or not quiet_active()
                        or (r["contended"] <= 0.1 and r["share"] <= FOREIGN_MAX)):
                    break
                QUIET["dropped"] += 1  # shared the CPUs with someone else's engine: once more
                r["dropped"] = True
                runs.setdefault("dropped", []).append((what, r["wall"], r["contended"],
                                                       r["share"]))
            runs[what].append(r)
    out["workload"] = runs


# --- the report ----------------------------------------------------------------------

def engine_version():
    p = subprocess.run([str(ENGINE), "--version"], capture_output=True, text=True)
    for line in (p.stdout + p.stderr).splitlines():
        if line.startswith("version:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def cpu_model():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def pair_diffs(x, r, base):
    """tandem minus base, round by round: against the child of the same round, or
    against the bare request sent just before the tandem one."""
    if base == "child":
        return [a - b for a, b in zip(x["tandem"], x["child"])]
    return [a - x["bare"][j] for a, j in zip(x["tandem"], r["paired"]["tandem"])]


def yes(ok):
    return "**met**" if ok else "**not met**"


def ms(x):
    return f"{x * 1e3:.2f}"


def render(args, out, started, took):
    tv = subprocess.run([args.tandem, "--version"], capture_output=True, text=True).stdout
    tv = tv.splitlines()[0] if tv else "unknown"
    cmd = ("build/venv/bin/python bench/serve_bench.py --tandem build/tandem --out "
           + getattr(args, "measured_out", args.out))
    cmd += " --quick" if args.quick else ""
    L = []
    add = L.append
    add("# tandem serve: proxy overhead, swap time, alternating workload")
    add("")
    add(f"Generated by `{cmd}` on {started:%Y-%m-%d %H:%M} UTC ({took / 60:.1f} min), "
        f"N={args.n}, swap rounds={args.rounds}, M={args.m}, workload reps={args.reps}.")
    add("")
    add(f"- Machine: {os.cpu_count()} CPU cores ({cpu_model()}), no GPU, "
        f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.1f} GiB RAM; "
        f"{platform.system()} {platform.release()}.")
    add(f"- Engine: llama.cpp b{PINS['ENGINE_BUILD']} `llama-server` ({engine_version()}), CPU build.")
    add(f"- tandem: {tv}.")
    add(f"- Models: `{A}` and `{B}` fixtures (`make fixtures`), ctx 2048, `flash_attn: false`.")
    add("")
    add("The machine is a shared 2-core box (other people's end-to-end tests start "
        "llama-servers on it at any time), so absolute numbers are noisy. Every "
        "comparison is measured side by side in the same run, and requests and swaps are "
        "interleaved (baseline, tandem, baseline, tandem..., the order alternating) so that "
        "noise hits both sides alike: the ratios and paired differences are the result. "
        "Medians and p90 are over all samples; a \"median of paired ratios/differences\" "
        "compares each tandem sample with the baseline sample taken next to it.")
    add("")
    if out.get("phases"):
        add("| phase | took (min) | 1-min load average at start / end |")
        add("|---|---|---|")
        for name, secs, l0, l1 in out["phases"]:
            add(f"| {name} | {secs / 60:.1f} | {l0:.1f} / {l1:.1f} |")
        add("")
    if args.quiet_wait > 0:
        pr = out.get("proxy", {})
        d_proxy = sum(pr[c]["redone"] for c in ("systemone", "chat, 1 token") if c in pr)
        d_swap = out.get("swap", {}).get("redone", 0)
        d_work = len(out.get("workload", {}).get("dropped", []))
        add(f"Contention control: llama.cpp's threads degrade badly when they share the two "
            f"cores with other work (15 ms requests took seconds), so before each measurement "
            f"(every 10 proxy rounds, every swap pair, every workload run) the script waits up "
            f"to {args.quiet_wait:.0f} s (at most {args.quiet_budget:.0f} s in all) until no llama-server it did not start runs and "
            f"processes outside its own tree use under {FOREIGN_MAX:.0%} of the CPUs (over 1 s, "
            f"from /proc/stat minus its tree's CPU time). It waited {QUIET['waits']} of "
            f"{QUIET['checks']} times, {QUIET['waited'] / 60:.1f} min in all; "
            f"{QUIET['busy']} measurements started before it was quiet. A proxy round during "
            f"which a foreign engine appeared, a swap pair during which one appeared or others "
            f"used over {FOREIGN_MAX:.0%} of the CPUs, and a workload run with a foreign engine "
            f"over 10% of its time or others over {FOREIGN_MAX:.0%} of the CPUs were dropped "
            f"and measured again ({d_proxy} proxy rounds, {d_swap} swap pairs, {d_work} "
            f"workload runs); the workload table shows how much each kept run still shared.")
    else:
        add(f"This run did not wait for quiet (`--quiet-wait 0`): {QUIET['busy']} of "
            f"{QUIET['checks']} measurements started while a llama-server this benchmark did "
            "not start was running.")
    add("")
    add("Every bare engine (the direct baseline, the swap baseline, the script and the "
        "router's children) runs with the argv tandem gives its own child, read back "
        "from `/proc/<pid>/cmdline` of tandem's child, except where it listens: on a TCP "
        "port, where tandem's child has a unix socket and a slot folder in tandem's private "
        "run folder (`procs.tcp_argv`):")
    add("")
    add("```")
    for model, a in out["argv"].items():
        add(" ".join(a[1:]))
    add("```")
    add("")
    goals = []

    # 1
    p = out.get("proxy")
    if p:
        names = {"bare": "bare llama-server", "child": "tandem's child, direct",
                 "tandem": "via tandem"}
        add("## 1. Proxy overhead (model resident)")
        add("")
        add(f"The same request, N rounds, to three targets in one loop, each round `bare, child, "
            "bare, tandem` or `bare, tandem, bare, child` in turn, so that every request follows "
            "one to another engine process (a request right after one to the same process finds "
            "warm CPU caches and runs measurably faster here) and the bare baseline gets 2N "
            "requests: a **bare llama-server** (its own process, started "
            "with the child's argv: the baseline a user would otherwise run), **tandem's "
            "child, direct** (the very engine process tandem routes to, addressed on its own "
            "port, so engine compute differences between two processes drop out), and "
            f"**via tandem** (`tandem serve`, budget `ram: {BOTH_FIT}`, model resident). One "
            "keep-alive connection per target, as an SDK client holds one; latency is "
            "client-side, from sending the request to the last byte of the answer.")
        add("")
        add("| request | N | " + " | ".join(f"{names[w]} median / p90 (ms)" for w in TARGETS)
            + " |")
        add("|---|---|---|---|---|")
        for case in ("systemone", "chat, 1 token"):
            r = p[case]
            add(f"| `{case}` | {r['n']} | " + " | ".join(
                f"{ms(med(r[w]))} / {ms(pct(r[w], 90))}" for w in TARGETS) + " |")
        add("")
        add("| request | via tandem against | median ratio | added median (ms) | median of "
            "paired differences (ms): same round, or the bare request just before |")
        add("|---|---|---|---|---|")
        for case in ("systemone", "chat, 1 token"):
            r = p[case]
            for base in ("bare", "child"):
                ratio = med(r["tandem"]) / med(r[base])
                added = med(r["tandem"]) - med(r[base])
                paired = med(pair_diffs(r, r, base))
                add(f"| `{case}` | {names[base]} | {ratio:.3f} | {added * 1e3:+.2f} | "
                    f"{paired * 1e3:+.2f} |")
                if case == "systemone":
                    goals.append((f"proxy, systemone: median ratio to {names[base]}",
                                  f"≤ {GOALS['ratio']}", f"{ratio:.3f}", ratio <= GOALS["ratio"]))
                    goals.append((f"proxy, systemone: added median latency over {names[base]}",
                                  f"< {GOALS['added_ms']:.0f} ms", f"{added * 1e3:+.2f} ms",
                                  added * 1e3 < GOALS["added_ms"]))
        r = p["chat, 1 token"]
        if r.get("outside"):
            o, e = r["outside"], r["engine"]
            add("")
            add("For chat completions the engine logs its own compute time per request "
                "(`total time` in its log), so the HTTP path can be separated from the "
                "engine's compute, whose run-to-run noise (several ms here) dwarfs a proxy's "
                "cost. \"Latency minus compute\" is the engine's HTTP server, tokenizer and "
                "template, plus tandem for the last column:")
            add("")
            add("| chat, 1 token, medians (ms) | " + " | ".join(names[w] for w in TARGETS) + " |")
            add("|---|---|---|---|")
            add("| engine compute | " + " | ".join(ms(med(e[w])) for w in TARGETS) + " |")
            add("| latency minus compute | " + " | ".join(ms(med(o[w])) for w in TARGETS) + " |")
            add("| latency minus compute, p90 | "
                + " | ".join(ms(pct(o[w], 90)) for w in TARGETS) + " |")
            add("")
            d_child = med(pair_diffs(o, r, "child"))
            d_bare = med(pair_diffs(o, r, "bare"))
            add(f"tandem's own cost on the chat path, latency minus compute, median of paired "
                f"differences: **{d_child * 1e3:+.2f} ms** against its child direct, "
                f"**{d_bare * 1e3:+.2f} ms** against the bare llama-server.")
            add("")
            dc = med(e["child"]) - med(e["bare"])
            dh = med(o["child"]) - med(o["bare"])
            add(f"Two engine processes with the same argv differ in compute: the median engine "
                f"compute of tandem's child minus that of the bare process is {dc * 1e3:+.2f} ms "
                f"for the same completion, while their HTTP paths (latency minus compute) differ "
                f"by {dh * 1e3:+.2f} ms. Which process is faster changes from run to run on this "
                "machine, so the comparison against the bare llama-server carries that "
                "process-to-process difference; the comparison against tandem's child, direct "
                "(same process) and the latency-minus-compute rows are tandem's own cost.")
            goals.append(("proxy, chat: added latency minus engine compute, vs child direct "
                          "(paired)", f"< {GOALS['added_ms']:.0f} ms", f"{d_child * 1e3:+.2f} ms",
                          d_child * 1e3 < GOALS["added_ms"]))
        r = p["systemone"]
        add("")
        add(f"Answers: in {r['n'] - r['mismatches']} of {r['n']} rounds the three systemone "
            "answers were identical (probabilities bit for bit). Non-200 answers: "
            f"{sum(len(p[c]['bad']) for c in ('systemone', 'chat, 1 token'))}. Keep-alive "
            "connections the server had closed (llama-server's HTTP server closes one after "
            "100 requests or 5 s idle), reopened and the request resent, the failed attempt "
            "untimed: " + ", ".join(f"{names[w]} {p['reconnects'][w]}" for w in TARGETS) + ".")
        for c in ("systemone", "chat, 1 token"):
            for b in p[c]["bad"][:3]:
                add(f"- `{c}`: {b}")
        add("")

    # 2
    sw = out.get("swap")
    if sw:
        tl, bl = sw["tandem"], sw["bare"]
        b2b = [x for x in tl if x["gap"] == 0 and x["status"] == 200]
        idle = [x for x in tl if x["gap"] > 0 and x["status"] == 200]
        bad_t = [x for x in tl if x["status"] != 200]
        not_one = [x for x in tl if x["loads"] != 1]
        add("## 2. Swap time (one model fits)")
        add("")
        add(f"Budget `ram: {ONE_FITS}`: one model at a time. Single requests alternate A, B, "
            "A, B..., so every request wants the model that is not resident and waits for a "
            "swap: stop the other engine (SIGTERM, wait for its exit), start this one, wait "
            "for `/health`, answer. The baseline is what a user's script does for the same "
            "request: SIGTERM the other bare llama-server and wait for its exit, spawn this "
            "one, poll `/health` every 50 ms until 200, send the request. Tandem and baseline "
            "swaps alternate. \"Back to back\" sends the next request as soon as the previous "
            "answer is in, so tandem first holds the resident engine for its grouping linger "
            "(150 ms, for the same client's next request); \"after 300 ms idle\" waits out the "
            "linger first, which isolates the swap itself. \"Load only\" is spawn to healthy: "
            "tandem's own `tandem_model_load_seconds` (from `/metrics`) and the baseline's "
            "spawn-to-200 time.")
        add("")
        add("| what | swaps | median (s) | p90 (s) | ratio of medians to bare | median of "
            "paired ratios |")
        add("|---|---|---|---|---|---|")
        pairs = list(zip(tl, bl))  # swap i of tandem and swap i of the baseline: same model,
        # adjacent in time
        bt = [x["total"] for x in bl]
        bload = [x["load"] for x in bl]
        def paired(sel, key_t, key_b):
            return [t[key_t] / b[key_b] for t, b in pairs
                    if sel(t) and t["status"] == 200 and b[key_b] > 0]
        rows = [
            ("bare: stop + start + request", bt, None, None),
            ("tandem: swap + request, back to back", [x["total"] for x in b2b], bt,
             paired(lambda t: t["gap"] == 0, "total", "total")),
            ("tandem: swap + request, after 300 ms idle", [x["total"] for x in idle], bt,
             paired(lambda t: t["gap"] > 0, "total", "total")),
            ("bare: load only (spawn to healthy)", bload, None, None),
            ("tandem: load only (spawn to healthy)", [x["load"] for x in tl if x["loads"] == 1],
             bload, paired(lambda t: t["loads"] == 1, "load", "load")),
            ("bare: stop only (SIGTERM to exit)", [x["stop"] for x in bl], None, None),
            ("bare: the request after the start", [x["request"] for x in bl], None, None),
        ]
        ratios, pratios = {}, {}
        for label, xs, base, pr in rows:
            ratio = med(xs) / med(base) if base else None
            ratios[label] = ratio
            pratios[label] = med(pr) if pr else None
            add(f"| {label} | {len(xs)} | {med(xs):.3f} | {pct(xs, 90):.3f} | "
                f"{'' if ratio is None else f'{ratio:.2f}x'} | "
                f"{f'{med(pr):.2f}x' if pr else ''} |")
        add("")
        for model in MODELS:
            bm = [x["total"] for x in bl if x["model"] == model]
            tm = [x["total"] for x in idle if x["model"] == model]
            t2 = [x["total"] for x in b2b if x["model"] == model]
            bl_ = [x["load"] for x in bl if x["model"] == model]
            tl_ = [x["load"] for x in tl if x["model"] == model and x["loads"] == 1]
            add(f"- Swaps to `{model}` (medians): stop + start + request: bare {med(bm):.3f} s, "
                f"tandem back to back {med(t2):.3f} s, tandem after idle {med(tm):.3f} s; load "
                f"only: bare {med(bl_):.3f} s, tandem {med(tl_):.3f} s.")
        extra = med([x["total"] for x in b2b]) - med([x["total"] for x in idle])
        add(f"- Back to back costs {extra * 1e3:+.0f} ms (median) over after-idle: tandem's "
            "150 ms grouping linger, held for the same client's next request. It is what lets "
            "two alternating clients share one model without a swap per request (section 3); "
            "a single client that strictly alternates models pays it on every swap.")
        add(f"- Tandem requests that did not load exactly one model: {len(not_one)} of "
            f"{len(tl)}; non-200: {len(bad_t)}.")
        for x in bad_t[:3]:
            add(f"  - {x['model']}: {x['status']} {x['body']!r}")
        add("")
        for label, goal in (("tandem: swap + request, after 300 ms idle",
                             "swap + request after 300 ms idle vs bare stop + start + request"),
                            ("tandem: swap + request, back to back",
                             "swap + request back to back (150 ms linger included) vs bare "
                             "stop + start + request"),
                            ("tandem: load only (spawn to healthy)",
                             "load only (spawn to healthy) vs bare")):
            k, kp = ratios[label], pratios[label]
            worst = max(k, kp)
            goals.append((goal + " (ratio of medians / median of paired ratios)",
                          f"≤ {GOALS['swap']}x", f"{k:.2f}x / {kp:.2f}x", worst <= GOALS["swap"]))

    # 3
    w = out.get("workload")
    if w:
        add("## 3. Alternating two-model workload")
        add("")
        add(f"Two client threads, one per model, each sending M={args.m} systemone requests, "
            "the next as soon as the previous answer is in; per-request timeout "
            f"{REQUEST_TIMEOUT} s (longer counts as a hang). Every setup starts with no model "
            f"loaded and may hold one model at a time: (a) `tandem serve` with `ram: {ONE_FITS}`; "
            "(b) llama-server's router mode with `--models-max 1` and the same two models and "
            "flags; (c) the users' script: one llama-server, requests in arrival order A, B, "
            "A, B..., kill and start on every switch. Loads: tandem's `/v1/status` `loads`; the "
            "router's `spawning server instance with name=` log lines (one per child spawn, "
            "`server_models::load`); the script counts its own. Runs alternate order "
            "(a, b, c then c, b, a).")
        add("")
        add("| setup | runs | wall time, median (s) | wall time per run (s) | loads per run | "
            "requests ok | failed (non-200) | hangs | request latency median / p90 / max (s) | "
            "foreign engine running / others' CPU share, each run |")
        add("|---|---|---|---|---|---|---|---|---|---|")
        names = {"tandem": "(a) tandem serve", "router": "(b) llama-server router",
                 "script": "(c) kill + start script"}
        for key in ("tandem", "router", "script"):
            rs = w.get(key) or []
            if not rs:
                continue
            lat = [x for r in rs for x in r["lat"]]
            walls = ", ".join(f"{r['wall']:.1f}" for r in rs)
            add(f"| {names[key]} | {len(rs)} | {med([r['wall'] for r in rs]):.1f} | {walls} | "
                f"{', '.join(str(r['loads']) for r in rs)} | "
                f"{sum(r['ok'] for r in rs)}/{sum(r['n'] for r in rs)} | "
                f"{sum(len(r['failed']) for r in rs)} | {sum(r['hangs'] for r in rs)} | "
                f"{med(lat):.2f} / {pct(lat, 90):.2f} / {max(lat) if lat else float('nan'):.2f} | "
                + ", ".join(f"{r.get('contended', 0):.0%} / {r.get('share', 0):.0%}" for r in rs)
                + " |")
        add("")
        for what, wall, frac, share in w.get("dropped", []):
            add(f"- Dropped and run again: {names[what]}, {wall:.1f} s with a foreign engine "
                f"running {frac:.0%} of the time and others using {share:.0%} of the CPUs.")
        if w.get("tandem") and w.get("router"):
            tw = med([r["wall"] for r in w["tandem"]])
            rw = med([r["wall"] for r in w["router"]])
            add(f"- tandem / router wall time: **{tw / rw:.2f}x**.")
        if w.get("tandem") and w.get("script"):
            sw_ = med([r["wall"] for r in w["script"]])
            add(f"- tandem / script wall time: **{tw / sw_:.2f}x**.")
        for key in ("tandem", "router", "script"):
            for r in w.get(key) or []:
                for f in r["failed"][:3]:
                    add(f"- {names[key]} failure: `{f[:300]}`")
                for e in r.get("log_errors", [])[:5]:
                    add(f"- {names[key]} log: `{e[:200]}`")
        if w.get("tandem"):
            add(f"- tandem evictions per run: {', '.join(str(r['evictions']) for r in w['tandem'])}; "
                f"engine crashes: {sum(r['crashes'] for r in w['tandem'])}.")
        add("")
        if out.get("router_argv"):
            add("Router mode was started as (`LLAMA_CACHE`, `HF_HOME` and `HF_HUB_CACHE` point "
                "at an empty temporary folder so that only the preset's two models exist):")
            add("")
            add("```")
            add(" ".join(out["router_argv"]).replace(str(ENGINE), "llama-server"))
            add("```")
            add("")
            add("with this preset INI (`--models-preset`; keys are the child's flags without "
                "dashes; the router sets `--host`, `--port` and `--alias` to the section name "
                "itself):")
            add("")
            add("```ini")
            add(out["router_ini"].rstrip())
            add("```")
            add("")
            if out.get("router_child_args"):
                add("The router's `GET /models` reported this child argv:")
                add("")
                add("```")
                for model, a in out["router_child_args"].items():
                    add(" ".join(a))
                add("```")
                add("")

    add("## Goals")
    add("")
    add("| goal | threshold | measured | |")
    add("|---|---|---|---|")
    for g, thr, got, ok in goals:
        add(f"| {g} | {thr} | {got} | {yes(ok)} |")
    add("")
    if p:
        add("The proxy rows against the bare llama-server also carry the compute difference "
            "between two engine processes (section 1); the rows against tandem's child, "
            "direct, and the latency-minus-compute row isolate what tandem adds. The "
            "back-to-back swap row includes tandem's deliberate 150 ms grouping linger "
            "(section 2).")
        add("")
    for n in out.get("notes", []):
        add(f"- Note: {n}")
    return "\n".join(L) + "\n"


def write_doc(path, text):
    """Writes this benchmark's part of the file, first, and keeps every section other
    benchmarks own there (`<!-- bench:NAME -->` ... `<!-- /bench:NAME -->`, see
    bench/mdsection.py) after it, so a rerun never erases their results."""
    path = Path(path)
    old = path.read_text() if path.exists() else ""
    blocks = [m.group(0).rstrip("\n") for m in
              re.finditer(r"<!-- bench:([\w.-]+) -->.*?<!-- /bench:\1 -->", old, re.S)]
    path.write_text(text.rstrip("\n") + "\n" + "".join(f"\n{b}\n" for b in blocks))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tandem", default=str(ROOT / "build" / "tandem"))
    ap.add_argument("--out", default="docs/benchmarks.md")
    ap.add_argument("--quick", action="store_true", help="a smoke run (< 2 minutes)")
    ap.add_argument("--n", type=int, help="proxy pairs (default 200; quick 20)")
    ap.add_argument("--rounds", type=int, help="swap rounds, 4 tandem + 4 bare swaps each "
                    "(default 10; quick 1)")
    ap.add_argument("--m", type=int, help="workload requests per client (default 20; quick 4)")
    ap.add_argument("--reps", type=int, help="workload repetitions (default 3; quick 1)")
    ap.add_argument("--no-script", action="store_true", help="skip the kill+start script column")
    ap.add_argument("--only", default="proxy,swap,workload")
    ap.add_argument("--quiet-wait", type=float,
                    help="before each measurement, wait at most this long for llama-servers "
                    "this benchmark did not start to exit (default 90; quick 0: do not wait)")
    ap.add_argument("--quiet-budget", type=float, default=1800.0,
                    help="total seconds the run may spend waiting for quiet (default 1800)")
    ap.add_argument("--raw", help="also write the raw measurements as JSON to this file")
    ap.add_argument("--render-from", help="render --out from a --raw file; measure nothing")
    ap.add_argument("--keep-logs", action="store_true", help="keep the temporary folder")
    args = ap.parse_args()
    q = args.quick
    args.n = args.n or (20 if q else 200)
    args.rounds = args.rounds or (1 if q else 10)
    args.m = args.m or (4 if q else 20)
    args.reps = args.reps or (1 if q else 3)
    args.tandem = str(Path(args.tandem).resolve())
    for p in (ENGINE, FIXTURES / f"{A}.gguf", FIXTURES / f"{B}.gguf", Path(args.tandem)):
        if not p.exists():
            sys.exit(f"serve_bench: {p} is missing: run `make deps fixtures` and `make`")
    if args.render_from:
        raw = json.loads(Path(args.render_from).read_text())
        QUIET.update(raw["quiet"])
        for k, v in raw["args"].items():
            if k not in ("out", "render_from", "raw"):
                setattr(args, k, v)
        args.measured_out = raw["args"]["out"]
        started = datetime.datetime.fromisoformat(raw["started"])
        write_doc(args.out, render(args, raw["out"], started, raw["took"])
                  .replace(raw["tmpdir"], "$TMP"))
        return
    only = set(args.only.split(","))
    if args.quiet_wait is None:
        args.quiet_wait = 0.0 if q else 90.0
    QUIET["max_wait"] = args.quiet_wait
    QUIET["budget"] = args.quiet_budget
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.perf_counter()
    out = {}
    cleanup = Cleanup()
    tmpdir = tempfile.mkdtemp(prefix="serve-bench-")
    tmp = Path(tmpdir)
    try:
        def phase(name, fn, *a):
            l0, t = loadavg(), time.perf_counter()
            fn(*a)
            out.setdefault("phases", []).append((name, time.perf_counter() - t, l0, loadavg()))

        if "proxy" in only:
            phase("1. proxy overhead", bench_proxy, args.tandem, tmp, args.n, cleanup, out)
        else:  # the argv is needed by the others: read it from a short-lived tandem
            s, stop_s = start_serve(args.tandem, tmp, "argv", BOTH_FIT, cleanup)
            out["argv"] = {}
            for model in MODELS:
                c = Conn(s.url)
                assert c.request("POST", "/v1/systemone", choice_body(model, "x"))[0] == 200
                c.close()
                out["argv"][model] = child_argv(s, model)
            stop_s()
        if "swap" in only:
            phase("2. swap time", bench_swap, args.tandem, tmp, args.rounds, cleanup, out)
        if "workload" in only:
            if B not in out["argv"]:
                s, stop_s = start_serve(args.tandem, tmp, "argv-b", BOTH_FIT, cleanup)
                c = Conn(s.url)
                assert c.request("POST", "/v1/systemone", choice_body(B, "x"))[0] == 200
                c.close()
                out["argv"][B] = child_argv(s, B)
                stop_s()
            phase("3. alternating workload", bench_workload, args.tandem, tmp, args.m, args.reps,
                  not args.no_script, cleanup, out)
    finally:
        cleanup.finish(tmpdir, args.keep_logs)
    took = time.perf_counter() - t0
    if args.raw:
        Path(args.raw).write_text(json.dumps(
            {"args": vars(args), "quiet": QUIET, "started": started.isoformat(), "took": took,
             "tmpdir": tmpdir, "out": out}, default=lambda b: b.decode(errors="replace")))
    text = render(args, out, started, took).replace(tmpdir, "$TMP")
    write_doc(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
