#!/usr/bin/env python3
"""Benchmark: are answers byte-stable under concurrency, and what do more slots buy?

Measured side by side in one run, on one decision model (by default the
smollm2-decider fixture) and a subset of tests/data/eval/decisions.jsonl
(POST /v1/systemone with each case's "state" and "questions"), for each
arrangement of engines:

  tandem      `tandem serve` with a one-model config (ctx 2048, flash_attn off:
              its defaults; one slot); requests go through tandem
  bare-1      a bare llama-server with the argv tandem gives its child, on TCP
              (read back from /proc/<pid>/cmdline of tandem's child; without
              tandem, the same flags written out here)
  np4-kvu     bare-1 with -c 8192 -np 4 --kv-unified (2048 cells per slot)
  np4-perslot bare-1 with -c 8192 -np 4 --no-kv-unified
  two-engines two bare-1 engines with the CPU threads split between them
              (-t/-tb --split-threads each, default nproc/2); each request goes
              to the next engine in turn (round robin, one counter per pass)
  default     a bare llama-server with only -m, --host and --port (its defaults:
              4 slots, unified KV, flash attention auto)

Every arrangement is started and warmed up (one fixed request that is not a
case) first, and stays up; then four passes, interleaved across arrangements
(each pass of every arrangement before the next pass, alternating the order):
  1. a sequential pass: one client sends the cases in order (throughput at 1);
  2. the same cases split among 2 clients (case i to client i mod 2), then 4;
  3. a repeat pass: one client sends each case twice back to back.
Before each pass it waits (--quiet-wait, --quiet-budget) until others use little
CPU, and it runs a throughput pass again (--retries) when others used more than
--busy-share of the CPUs during it: on a 2-core machine a request that shares the
cores with someone else's work takes seconds instead of a third of one.
Identical answers compare the exact bytes of each response's "answers" value:
the 4-client pass against the sequential pass, and the second send of each
repeated pair against the sequential pass. Throughput is cases / wall seconds of
the pass; the ratio is to bare-1 with one client.

Usage:
  build/venv/bin/python bench/determinism_bench.py --tandem build/tandem \\
      --out docs/benchmarks.md [--cases N] [--engine PATH --ngl 99]
The table replaces the "determinism" section of --out (bench/mdsection.py) and
is printed. Standard library only, so it also runs with a bare python3 (the GPU
runner, bench/gpu_determinism.sh).
"""
import argparse
import datetime
import http.client
import json
import os
import platform
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from mdsection import replace_section  # noqa: E402
from procs import (cmdline, cpu_snapshot, descendants, foreign_engines, foreign_share,  # noqa: E402
                   tcp_argv)

REQUEST_TIMEOUT = 120
MODEL = "smollm2-decider"
WARMUP = {"state": "The build server is at 97% memory and swapping.",
          "questions": {"act": {"type": "choice",
                                "instructions": "What should the operator do?",
                                "criteria": {"reduce": "reduce concurrency",
                                             "stop": "stop non-critical jobs",
                                             "nothing": "change nothing"}}}}
ARRANGEMENTS = ("tandem", "bare-1", "np4-kvu", "np4-perslot", "two-engines", "default")
LABELS = {"tandem": "tandem default (`tandem serve`, 1 slot)",
          "bare-1": "bare, tandem's flags (1 slot)",
          "np4-kvu": "parallel 4, unified KV",
          "np4-perslot": "parallel 4, per-slot KV",
          "two-engines": "two engines, one slot each",
          "default": "bare default llama-server"}
CLIENTS = (1, 2, 4)


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def cache_root():
    if os.environ.get("TANDEM_CACHE"):
        return Path(os.environ["TANDEM_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tandem"


def engine_build():
    for line in (ROOT / "scripts" / "pins.env").read_text().splitlines():
        if line.startswith("ENGINE_BUILD="):
            return line.split("=", 1)[1].strip()
    return "11434"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- HTTP ------------------------------------------------------------------------------

class Conn:
    """One keep-alive connection; post() returns (status, body bytes); status is
    "error: ..." when the connection failed (after one reconnect)."""

    def __init__(self, url):
        host, port = url.split("//", 1)[1].rsplit(":", 1)
        self.host, self.port, self.c = host, int(port), None

    def post(self, path, body):
        data = json.dumps(body).encode()
        for attempt in (0, 1):
            try:
                if self.c is None:
                    self.c = http.client.HTTPConnection(self.host, self.port,
                                                        timeout=REQUEST_TIMEOUT)
                    self.c.connect()
                    self.c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.c.request("POST", path, data, {"Content-Type": "application/json"})
                r = self.c.getresponse()
                raw = r.read()
                if r.getheader("Connection", "").lower() == "close":
                    self.close()
                return r.status, raw
            except (http.client.HTTPException, OSError) as e:
                self.close()
                if attempt == 1:
                    return f"error: {e!r}", b""

    def close(self):
        if self.c is not None:
            self.c.close()
        self.c = None


def healthy(url):
    try:
        host, port = url.split("//", 1)[1].rsplit(":", 1)
        c = http.client.HTTPConnection(host, int(port), timeout=1)
        c.request("GET", "/health")
        ok = c.getresponse().status == 200
        c.close()
        return ok
    except OSError:
        return False


def answers_bytes(raw):
    """The exact bytes of the response's top-level "answers" value, or None."""
    try:
        text = raw.decode()
        obj = json.loads(text)
        if not isinstance(obj, dict) or "answers" not in obj:
            return None
        dec = json.JSONDecoder()
        i = 0
        while True:  # the top-level key (a nested "answers" key would come later)
            i = text.index('"answers"', i)
            j = i + len('"answers"')
            while text[j] in " \t\r\n":
                j += 1
            if text[j] == ":":
                j += 1
                while text[j] in " \t\r\n":
                    j += 1
                val, end = dec.raw_decode(text, j)
                if val == obj["answers"]:
                    return text[j:end].encode()
            i = j
    except (ValueError, IndexError, UnicodeDecodeError):
        return None


# --- processes -------------------------------------------------------------------------

def wait_healthy(url, proc, what, log_path, timeout=REQUEST_TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited {proc.returncode}; see {log_path}")
        if healthy(url):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} not healthy after {timeout} s; see {log_path}")


class Engine:
    """A bare llama-server from an argv with "{port}" for its port."""

    def __init__(self, template, log_path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [a.replace("{port}", str(self.port)) for a in template]
        self.template = template
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        wait_healthy(self.url, self.proc, "llama-server", log_path)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


class Tandem:
    """`tandem serve` on a one-model config; the model is loaded by the warm-up."""

    def __init__(self, binary, engine, fixture, ngl, d):
        d.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        gpu = f"    device: gpu\n    ngl: {ngl}\n" if ngl is not None else ""
        self.config = (f"listen: 127.0.0.1:{self.port}\nlogs:\n  dir: {d / 'logs'}\n"
                       f"engine:\n  path: {engine}\n"
                       f"limits:\n  request_timeout: {REQUEST_TIMEOUT}s\n  queue_depth: 256\n"
                       f"models:\n  {MODEL}:\n    path: {fixture}\n    ctx: 2048\n"
                       f"    keep_alive: forever\n{gpu}")
        (d / "tandem.yaml").write_text(self.config)
        self.log_path = d / "serve.stderr"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([str(binary), "serve", "--config", str(d / "tandem.yaml"),
                                      "--drain-delay", "0"], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=self._log)
        try:
            wait_healthy(self.url, self.proc, "tandem serve", self.log_path, 60)
        except RuntimeError:
            self.stop()
            raise

    def child_argv(self):
        """The resident child's argv, on TCP at {port} (procs.tcp_argv)."""
        for pid in descendants(self.proc.pid):
            try:
                argv = cmdline(pid)
            except OSError:
                continue
            if argv and argv[0].endswith("llama-server"):
                return tcp_argv(argv)
        raise RuntimeError("tandem serve has no llama-server child after the warm-up")

    def stop(self):
        kids = descendants(self.proc.pid)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for p in kids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._log.close()


# --- argv ------------------------------------------------------------------------------

def tandem_flags(engine, fixture, ngl):
    """What engine_child_argv gives a one-model config (ctx 2048, flash_attn off, one
    slot), for runs without a tandem binary. Threads: tandem's split for one engine,
    which is every core."""
    argv = [str(engine), "-m", str(fixture), "--host", "127.0.0.1", "--port", "{port}",
            "-c", "2048", "-ngl", str(ngl if ngl is not None else 0), "-fit", "off",
            "-np", "1", "-ctk", "f16", "-ctv", "f16", "-fa", "off", "-b", "2048", "-ub", "512"]
    if ngl is None:
        argv += ["--no-repack", "--device", "none"]
    n = str(os.cpu_count())
    return argv + ["-t", n, "-tb", n, "--no-warmup", "--alias", MODEL, "-lv", "4",
                   "--no-log-timestamps", "--no-log-prefix"]


def with_flag(argv, flag, value, aliases=()):
    """argv with the option flag (which takes a value) set to value: in place where
    present (under any of its aliases), else appended."""
    out, i, done = [], 0, False
    while i < len(argv):
        if argv[i] in (flag,) + tuple(aliases):
            if not done:
                out += [flag, str(value)]
                done = True
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out if done else out + [flag, str(value)]


def without_switch(argv, *switches):
    return [a for a in argv if a not in switches]


def arrangement_argvs(base, split_threads):
    kvu = ("--kv-unified", "-kvu", "--no-kv-unified", "-no-kvu")
    np4 = with_flag(with_flag(base, "-np", 4, ("--parallel",)), "-c", 8192, ("--ctx-size",))
    two = with_flag(with_flag(base, "-t", split_threads, ("--threads",)), "-tb", split_threads,
                    ("--threads-batch",))
    return {
        "bare-1": [base],
        "np4-kvu": [without_switch(np4, *kvu) + ["--kv-unified"]],
        "np4-perslot": [without_switch(np4, *kvu) + ["--no-kv-unified"]],
        "two-engines": [two, two],
    }


def show_argv(argv, engine, fixture):
    return " ".join(shlex.quote(a) for a in argv).replace(str(engine), "llama-server") \
        .replace(str(fixture), Path(fixture).name)


def threads_of(argv, log_path):
    """The -t/-tb an engine ran with: from its argv, else from its log's system_info."""
    if "-t" in argv:
        t = argv[argv.index("-t") + 1]
        tb = argv[argv.index("-tb") + 1] if "-tb" in argv else t
        return f"-t {t} -tb {tb}"
    try:
        for line in Path(log_path).read_text(errors="replace").splitlines():
            if "n_threads =" in line:
                part = line.split("n_threads =", 1)[1]
                t = part.split()[0]
                tb = part.split("n_threads_batch =", 1)[1].split(")")[0].strip() \
                    if "n_threads_batch =" in part else t
                return f"default ({t}, batch {tb})"
    except OSError:
        pass
    return "default"


# --- CPU share of others ---------------------------------------------------------------

def wait_quiet(max_wait, limit=0.15):
    """Waits at most max_wait s until others use under limit of the CPUs (over 1 s);
    returns the seconds waited beyond the first check. (An idle llama-server of
    someone else's does not count: one at work shows in the share.)"""
    t = time.monotonic()
    while True:
        a = cpu_snapshot()
        time.sleep(1.0)
        if foreign_share(a, cpu_snapshot()) < limit:
            break
        if time.monotonic() - t >= max_wait:
            break
    return max(0.0, time.monotonic() - t - 1.0)


# --- passes ----------------------------------------------------------------------------

class Target:
    """Where requests go: one or more URLs, taken in turn (one counter per pass)."""

    def __init__(self, urls):
        self.urls = urls
        self.lock = threading.Lock()
        self.n = 0

    def reset(self):
        self.n = 0

    def next(self):
        with self.lock:
            u = self.urls[self.n % len(self.urls)]
            self.n += 1
            return u


def run_pass(target, bodies, clients, repeat=False):
    """Sends bodies (each twice in a row with repeat) from `clients` threads, case i
    by client i mod clients. Returns (wall seconds, results): results[i] is a list of
    (status, answers bytes) per send of case i."""
    target.reset()
    results = [None] * len(bodies)
    start = threading.Barrier(clients + 1)

    def client(k):
        conns = {u: Conn(u) for u in target.urls}
        start.wait()
        for i in range(k, len(bodies), clients):
            sends = []
            for _ in range(2 if repeat else 1):
                st, raw = conns[target.next()].post("/v1/systemone", bodies[i])
                sends.append((st, answers_bytes(raw) if st == 200 else raw[:300]))
            results[i] = sends
        for c in conns.values():
            c.close()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, results


def identical(a, b, ia=0, ib=0):
    """(identical, compared) over the cases both passes answered with 200."""
    same = n = 0
    for x, y in zip(a, b):
        if x[ia][0] == 200 and y[ib][0] == 200 and x[ia][1] is not None and y[ib][1] is not None:
            n += 1
            same += x[ia][1] == y[ib][1]
    return same, n


def errors(res):
    return [s for r in res for s in r if s[0] != 200 or s[1] is None]


PHASES = (("c1", 1, False), ("c2", 2, False), ("c4", 4, False), ("repeat", 1, True))


def summarize(passes, n):
    """One arrangement's numbers from its four passes {phase: (wall, results, share,
    foreign)}."""
    out = {"throughput": {}, "errors": [], "others_cpu": [], "foreign": 0}
    for name, clients, repeat in PHASES:
        wall, res, share, foreign = passes[name]
        if not repeat:
            out["throughput"][clients] = n / wall
        out["errors"] += [f"{name}: {e[0]} {e[1]!r}"[:300] for e in errors(res)]
        out["others_cpu"].append(share)
        out["foreign"] += foreign
    seq, rep = passes["c1"][1], passes["repeat"][1]
    out["conc4"] = identical(seq, passes["c4"][1])
    out["conc2"] = identical(seq, passes["c2"][1])
    out["repeat"] = identical(seq, rep, 0, 1)
    out["repeat_pair"] = identical(rep, rep, 0, 1)  # second send vs first send of the pair
    # what a repeated pair costs against two fresh requests (1.0: the repeat costs as much)
    out["repeat_cost"] = passes["repeat"][0] / (2 * passes["c1"][0])
    out["seq_answers"] = [r[0][1].decode() if r[0][0] == 200 and r[0][1] else None
                          for r in seq]
    return out


# --- rendering -------------------------------------------------------------------------

def pct(pair):
    same, n = pair
    return f"{100 * same / n:.0f}% ({same}/{n})" if n else "n/a"


def gpu_name():
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=10)
        return p.stdout.strip().replace("\n", ", ") or None
    except (OSError, subprocess.SubprocessError):
        return None


def cpu_model():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def engine_version(engine):
    try:
        p = subprocess.run([str(engine), "--version"], capture_output=True, text=True,
                           timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return f"unknown ({e})"
    for line in (p.stdout + p.stderr).splitlines():
        if line.startswith("version:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def same_values(a, b):
    """(equal, compared) of two sequential passes' answers, as parsed JSON values
    (tandem may write the same numbers in other bytes than the engine)."""
    same = n = 0
    for x, y in zip(a, b):
        if x is not None and y is not None:
            n += 1
            same += json.loads(x) == json.loads(y)
    return same, n


def render(args, res, started, took):
    base = res.get("bare-1", {}).get("throughput", {}).get(1)
    base_seq = res.get("bare-1", {}).get("seq_answers")
    where = (f"GPU ({gpu_name() or 'nvidia-smi: none'}), `-ngl {args.ngl}`"
             if args.ngl is not None else "CPU")
    L = []
    add = L.append
    add(f"Run {started:%Y-%m-%d %H:%M} UTC, {took:.0f} s, on {os.cpu_count()} CPUs "
        f"({cpu_model()}), {where}; engine `{engine_version(args.engine)}`; model "
        f"`{Path(args.fixture).name}`; the first {args.cases} cases of "
        f"`{args.cases_file}`. Command:")
    add("")
    add("```")
    add(args.command)
    add("```")
    add("")
    add("Every arrangement is started and warmed up (one request that is not a case) "
        "first; then each runs four passes: a sequential pass (one client, cases in "
        "order), the cases split among 2 and then 4 concurrent clients (case i to client "
        "i mod n), and a repeat pass (each case sent twice back to back by one client). "
        "The passes interleave: the sequential pass of every arrangement, then the "
        "2-client pass of every arrangement in the reverse order, and so on; before each "
        f"pass the script waits (at most {args.quiet_wait:.0f} s, {args.quiet_budget:.0f} s "
        f"in all; {res.get('_waited', 0):.0f} s this run) until others use under 15% of "
        "the CPUs, and a throughput pass during which "
        f"others used more than {args.busy_share:.0%} of the CPUs is run again (at most "
        f"{args.retries} times; the last one is kept, and listed below the table). "
        "In *two engines* every request goes to "
        "the next engine in turn (one counter per pass), so the two sends of a repeated "
        "pair land on different engines. "
        "*Concurrent = sequential*: the exact bytes of `answers` from the 4-client pass "
        "equal those of the sequential pass. *Repeat = first*: the second send of each "
        "repeated pair equals the sequential pass. Throughput: cases / wall seconds of "
        "one pass; ×: over bare-1 (tandem's flags) with 1 client. *Sequential = bare-1*: "
        "the sequential pass's answers equal bare-1's as JSON values. *Others' CPU*: "
        "the share of the machine's CPUs used by processes outside this benchmark "
        "during each of the arrangement's passes (1, 2, 4 clients, repeat), and how many "
        "of them saw a llama-server this benchmark did not start.")
    add("")
    add("| arrangement | engines × slots, KV, flash attn, threads | concurrent = sequential | "
        "repeat = first | req/s, 1 client | 2 clients | 4 clients | sequential = bare-1 | "
        "errors | others' CPU |")
    add("|---|---|---|---|---|---|---|---|---|---|")
    for key in ARRANGEMENTS:
        r = res.get(key)
        if not r:
            continue

        def tp(c):
            v = r["throughput"].get(c)
            if v is None:
                return "n/a"
            return f"{v:.2f} ({v / base:.2f}×)" if base else f"{v:.2f}"
        seq_eq = pct(same_values(r["seq_answers"], base_seq)) if base_seq else "n/a"
        add(f"| {LABELS[key]} | {r['shape']} | {pct(r['conc4'])} | {pct(r['repeat'])} | "
            f"{tp(1)} | {tp(2)} | {tp(4)} | {seq_eq} | {len(r['errors'])} | "
            + " / ".join(f"{x:.0%}" for x in r["others_cpu"])
            + (f", foreign engine in {r['foreign']} of 4" if r["foreign"] else "") + " |")
    add("")
    add("Also measured: the 2-client pass against the sequential pass, the second send "
        "of each repeated pair against the first send, and the repeat pass's wall time over "
        "twice the sequential pass's (1.00: a repeat costs what a fresh request costs; "
        "lower: the engine's prompt cache answered the repeat for less):")
    add("")
    add("| arrangement | 2 clients = sequential | repeat = its pair's first send | "
        "repeat pass / 2 × sequential |")
    add("|---|---|---|---|")
    for key in ARRANGEMENTS:
        r = res.get(key)
        if r:
            add(f"| {LABELS[key]} | {pct(r['conc2'])} | {pct(r['repeat_pair'])} | "
                f"{r['repeat_cost']:.2f} |")
    add("")
    add("The engines' command lines (`{port}` a free port; the model is "
        f"`{Path(args.fixture).name}`; bare-1's is "
        + ("read from tandem's child" if res.get("tandem") else
           "tandem's flags written out by the script (no tandem in this run)") + "):")
    add("")
    add("```")
    for key in ARRANGEMENTS:
        r = res.get(key)
        if r:
            for a in r["argvs"]:
                add(f"{key}: {a}")
    add("```")
    add("")
    if res.get("tandem"):
        add("tandem's config (`listen` and `logs` aside):")
        add("")
        add("```yaml")
        add(res["tandem"]["config"].rstrip())
        add("```")
        add("")
    for key in ARRANGEMENTS:
        r = res.get(key)
        for e in (r or {}).get("errors", [])[:3]:
            add(f"- {LABELS[key]} error: `{e}`")
    for key, drops in res.get("_dropped", {}).items():
        add(f"- {LABELS[key]}: run again after others used the CPUs: "
            + ", ".join(f"{name} pass ({wall:.1f} s, others {share:.0%})"
                        for name, wall, share in drops) + ".")
    for n in res.get("_notes", []):
        add(f"- {n}")
    return "\n".join(L) + "\n"


# --- main ------------------------------------------------------------------------------

def start_all(args, only, tmpdir, running, notes):
    """Starts every arrangement and warms each engine up with one request; returns
    {key: (Target, shape, argvs, config or None)}."""
    started, base = {}, None
    for key in only:
        log(f"{key}: starting")
        if key == "tandem":
            # a tandem that does not come up leaves its row out, not the run (on a lent
            # GPU machine the rest is still worth its time)
            t = None
            try:
                t = Tandem(args.tandem, args.engine, args.fixture, args.ngl, tmpdir / "tandem")
                running.append(t)
                st, raw = Conn(t.url).post("/v1/systemone", WARMUP)
                if st != 200:
                    raise RuntimeError(f"tandem warm-up: {st} {raw[:300]!r}")
                base = t.child_argv()
            except (RuntimeError, OSError) as e:
                log_path = tmpdir / "tandem" / "serve.stderr"
                if t is not None:
                    t.stop()
                    running.remove(t)
                tail = " / ".join(log_path.read_text(errors="replace").splitlines()[-3:]) \
                    if log_path.exists() else ""
                notes.append(f"tandem left out: {e}" + (f"; its log ended: `{tail}`" if tail
                                                         else ""))
                log(notes[-1])
                continue
            config = "\n".join(line for line in t.config.splitlines()
                               if not line.startswith(("listen:", "logs:", "  dir:")))
            started[key] = (Target([t.url]), f"1 × 1, -fa off, {threads_of(base, '')} "
                            "(tandem's child)", [show_argv(base, args.engine, args.fixture)],
                            config)
            continue
        if base is None:
            base = tandem_flags(args.engine, args.fixture, args.ngl)
            notes.append("bare-1's flags were written out by the script, not read from a "
                         "tandem child.")
        if key == "default":
            templates = [[str(args.engine), "-m", str(args.fixture), "--host", "127.0.0.1",
                          "--port", "{port}"]]
        else:
            templates = arrangement_argvs(base, args.split_threads)[key]
        engines = []
        for i, tpl in enumerate(templates):
            engines.append(Engine(tpl, tmpdir / f"{key}-{i}.log"))
            running.append(engines[-1])
        for e in engines:
            st, raw = Conn(e.url).post("/v1/systemone", WARMUP)
            if st != 200:
                raise RuntimeError(f"{key} warm-up: {st} {raw[:300]!r}; see {e.log_path}")
        thr = threads_of(engines[0].argv, engines[0].log_path)
        shape = {"bare-1": f"1 × 1, -fa off, {thr}",
                 "np4-kvu": f"1 × 4, unified, -fa off, {thr}",
                 "np4-perslot": f"1 × 4, per slot, -fa off, {thr}",
                 "two-engines": f"2 × 1, -fa off, {thr} each",
                 "default": f"1 × 4 (auto), unified, -fa auto, {thr}"}[key]
        started[key] = (Target([e.url for e in engines]), shape,
                        [show_argv(tpl, args.engine, args.fixture) for tpl in templates], None)
    return started


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tandem", default=str(ROOT / "build" / "tandem"),
                    help="the tandem binary; '' leaves the tandem arrangement out")
    ap.add_argument("--engine", default=str(cache_root() / "engine" / f"b{engine_build()}"
                                            / "bin" / "llama-server"),
                    help="llama-server (default: the pinned engine in the cache)")
    ap.add_argument("--fixture", default=str(cache_root() / "fixtures" / f"{MODEL}.gguf"))
    ap.add_argument("--ngl", type=int, help="GPU layers (default: none, CPU only)")
    ap.add_argument("--cases", type=int, default=20, help="first N cases (default 20)")
    ap.add_argument("--cases-file", default="tests/data/eval/decisions.jsonl")
    ap.add_argument("--split-threads", type=int, default=max(1, (os.cpu_count() or 2) // 2),
                    help="-t/-tb of each of the two engines (default nproc/2)")
    ap.add_argument("--only", default=",".join(ARRANGEMENTS))
    ap.add_argument("--quiet-wait", type=float, default=10.0,
                    help="before each pass, wait at most this long until others use under "
                    "15%% of the CPUs (default 10; 0: do not wait)")
    ap.add_argument("--quiet-budget", type=float, default=180.0,
                    help="total seconds the run may spend waiting for quiet (default 180)")
    ap.add_argument("--busy-share", type=float, default=0.25,
                    help="a throughput pass during which others used more than this share "
                    "of the CPUs is run again (default 0.25)")
    ap.add_argument("--retries", type=int, default=2,
                    help="how often a throughput pass may be run again (default 2)")
    ap.add_argument("--out", default="docs/benchmarks.md")
    ap.add_argument("--raw", help="also write the measurements as JSON here")
    ap.add_argument("--keep-logs", action="store_true")
    args = ap.parse_args()
    args.command = "python3 bench/determinism_bench.py " + " ".join(
        shlex.quote(a) for a in sys.argv[1:])
    only = [a for a in ARRANGEMENTS if a in args.only.split(",")]
    if args.tandem and "tandem" in only:
        args.tandem = str(Path(args.tandem).resolve())
    else:
        args.tandem = ""
        only = [a for a in only if a != "tandem"]
    for p in filter(None, (args.engine, args.fixture, args.tandem)):
        if not Path(p).exists():
            sys.exit(f"determinism_bench: {p} is missing (make deps fixtures; make)")
    cases_path = Path(args.cases_file)
    if not cases_path.is_absolute():
        cases_path = ROOT / cases_path
    cases = [json.loads(line) for line in cases_path.read_text().splitlines() if line.strip()]
    bodies = [{"state": c["state"], "questions": c["questions"]} for c in cases[:args.cases]]
    args.cases = len(bodies)

    started_at = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.perf_counter()
    tmpdir = Path(tempfile.mkdtemp(prefix="determinism-bench-"))
    res = {"_notes": []}
    running = []
    waited = 0.0
    dropped = res["_dropped"] = {}
    try:
        arr = start_all(args, only, tmpdir, running, res["_notes"])
        only = [key for key in only if key in arr]
        passes = {key: {} for key in only}
        # every arrangement stays up; the passes interleave (one phase for all, in
        # alternating order), so a burst of someone else's work lands on several
        # arrangements' passes rather than on all of one arrangement's
        for k, (name, clients, repeat) in enumerate(PHASES):
            for key in (only if k % 2 == 0 else only[::-1]):
                for attempt in range(args.retries + 1):
                    if args.quiet_wait > 0 and waited < args.quiet_budget:
                        waited += wait_quiet(min(args.quiet_wait, args.quiet_budget - waited))
                    a = cpu_snapshot()
                    foreign = bool(foreign_engines())
                    wall, out = run_pass(arr[key][0], bodies, clients, repeat)
                    foreign = foreign or bool(foreign_engines())
                    share = foreign_share(a, cpu_snapshot())
                    log(f"{key} {name}: {len(bodies) * (2 if repeat else 1)} requests in "
                        f"{wall:.1f} s ({len(bodies) / wall:.2f} cases/s), others' CPU "
                        f"{share:.0%}")
                    # a throughput pass that shared the CPUs with someone else's work is
                    # run again (the repeat pass is not timed)
                    if repeat or share <= args.busy_share or attempt == args.retries:
                        break
                    dropped.setdefault(key, []).append((name, wall, share))
                    log(f"{key} {name}: others used {share:.0%} of the CPUs: run again")
                passes[key][name] = (wall, out, share, foreign)
        for key in only:
            target, shape, argvs, config = arr[key]
            r = summarize(passes[key], len(bodies))
            r.update(argvs=argvs, shape=shape)
            if config:
                r["config"] = config
            res[key] = r
            log(f"{key}: concurrent = sequential {pct(r['conc4'])}, "
                f"repeat = first {pct(r['repeat'])}")
    finally:
        while running:
            try:
                running.pop().stop()
            except Exception as e:  # noqa: BLE001 - cleanup goes on
                log(f"cleanup: {e!r}")
        if args.keep_logs:
            log(f"logs kept in {tmpdir}")
        else:
            subprocess.run(["rm", "-rf", str(tmpdir)])
    took = time.perf_counter() - t0
    res["_waited"] = waited
    if args.raw:
        Path(args.raw).write_text(json.dumps({"args": vars(args),
                                              "started": started_at.isoformat(),
                                              "took": took, "results": res},
                                             default=str, indent=1))
    text = render(args, res, started_at, took).replace(str(tmpdir), "$TMP")
    replace_section(Path(args.out), "determinism", "## Determinism and throughput", text)
    print("## Determinism and throughput\n\n" + text)


if __name__ == "__main__":
    main()
