#!/usr/bin/env python3
"""A bounded chaos soak of `tandem serve`: load from real clients, seeded faults, and
invariants checked at the end (issue 20; `make soak`, and a 60 s run in `make e2e`).

The daemon serves two fixture decision models that rotate (kev-tiny decides and generates,
laya-tiny verifies; the budget holds one of them at a time) and a decide-then-verify
pipeline over both. K client threads speak every route a real client uses: System One
through the TypeSafe SDK (the default model, both models, and the pipeline as the model
`pipelines/ops`), the pipeline route with plain HTTP, the OpenAI passthrough through the
OpenAI SDK (chat, streamed chat, completions) and `/v1/models`. Every request carries its
own `x-request-id`, which the daemon echoes and writes to the audit log.

Faults come at times drawn from `random.Random(seed)` (stratified over the middle of the
run, so that every kind occurs at least once) and each is logged with its time:

  engine_kill      SIGKILL of a resident engine (at most KILL_CAP per model per 60 s, under
                   limits.max_restarts, so that no model is marked failed)
  engine_stop      SIGSTOP of a resident engine, SIGCONT 0.3 to 3 s later
  sighup           a config reload: a changed queue depth, `logs.bodies`, or a file that no
                   longer validates (the running config must stay)
  hangup_request   a client that sends a System One request (whole, or half of its body)
                   and hangs up before the answer
  hangup_stream    a streamed chat whose client hangs up after one to three chunks
  slowloris        connections that send their headers one byte at a time
  malformed        bodies and request framings from a malformed-input corpus
                   (tests/data/s1/cases.jsonl's contract errors and the cases below)
  bomb             compression bombs (zstd up to 256 MiB of zeros, gzip) and a body past
                   the HTTP layer's hard cap
  disk_full        the audit log's file system fills (a tmpfs mount, or RLIMIT_FSIZE through
                   prlimit where mounting is not permitted), and is freed again
  fd_flood         FLOOD connections at once against a daemon whose RLIMIT_NOFILE is NOFILE
                   and whose limits.max_connections is MAX_CONNECTIONS: past the limit the
                   daemon answers 503, past the descriptors it accepts late

The invariants (each names its bound; a violation makes the exit status 1 and is printed):

  one_response     every request got exactly one response, with its own x-request-id and a
                   status documented for it (docs/serve.md, Errors), or was hung up by its
                   own client; a stream cut short is allowed only by a kill of its engine
  no_kill_502      no 502 on a route tandem resends (System One, pipelines) unless the
                   engine failed on it twice or its short deadline left no time to reload;
                   a generation's 502 only after a kill of its engine
  audit            one audit line per answered request id, with the status the client saw,
                   none for a request that never arrived whole, nothing torn (after the disk
                   was freed and the daemon's pending lines were flushed), minus the lines
                   tandem_audit_dropped_total says were lost
  idle_resources   after the load, with the same models resident (none), the daemon's open
                   descriptors and threads are back to their idle count, and its RSS grew by
                   less than RSS_BOUND
  engines_reaped   after SIGTERM the daemon exits 0 within SHUTDOWN_BOUND and no engine it
                   ever started (seen through /proc, marked by this run's model paths) lives on
  health_recovery  /health is 200 within HEALTH_BOUND of the end of the last fault
  slowloris        a connection that has not sent its headers is closed within
                   limits.header_timeout (+ SLOW_SLACK)
  bombs            every bomb is answered within BOMB_BOUND and the daemon's peak RSS grows
                   by less than HWM_BOUND
  sanitizer        no AddressSanitizer/UBSan report on the daemon's stderr (make asan)

Usage:
  build/venv/bin/python tests/soak/soak.py --tandem build/tandem --seconds 300 \\
      --seed 1 --clients 4 --out docs/reliability.md
The summary replaces the `soak` section of --out (bench/mdsection.py); other sections stay.
"""
import argparse
import datetime
import gzip
import http.client
import json
import os
import random
import re
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
sys.path.insert(0, str(ROOT / "bench"))
from conftest import ENGINE, FIXTURES, SANITIZER_REPORT  # noqa: E402
from mdsection import replace_section  # noqa: E402
from serve_bench import cpu_model, engine_version  # noqa: E402

import openai  # noqa: E402
from backports import zstd  # noqa: E402
from typesafe_sdk import RetryPolicy, TypeSafeAPIError, TypeSafeClient  # noqa: E402

DECIDE, VERIFY = "kev-tiny", "laya-tiny"   # the rotating pair; kev-tiny also generates
PIPELINE = "ops"
MODELS = (DECIDE, VERIFY)

# Limits of the soak's daemon.
MAX_CONNECTIONS = 32
NOFILE = 128                 # the daemon's RLIMIT_NOFILE (its engines inherit it)
FLOOD = NOFILE + 16          # connections one fd_flood opens at once
HEADER_TIMEOUT_S = 2
MAX_BODY = 256 << 10
CACHE_BYTES = 4 << 20        # cache.max_bytes: well under RSS_BOUND, so the cache fits it
REQUEST_TIMEOUT_S = 60
ENGINE_GRACE_S = 5
TINYFS_BYTES = 16 << 20      # the audit log's file system
KILL_CAP = 3                 # engine kills per model per 60 s (limits.max_restarts is 5)

# Bounds of the invariants.
HEALTH_BOUND = 10.0          # s from the end of the last fault to /health 200
RSS_BOUND = 16 << 20         # RSS growth from idle before the load to idle after it
SHUTDOWN_BOUND = 20.0        # s from SIGTERM to the daemon's exit
SLOW_SLACK = 1.5             # s past limits.header_timeout for a slowloris connection to close
BOMB_BOUND = 2.0             # s to answer a bomb
HWM_BOUND = 64 << 20         # peak RSS growth over the whole run
CLIENT_TIMEOUT = 90.0        # s; a request without an answer by then is a hang
AUDIT_FLUSH = 10.0           # s to wait for the audit log to hold every answered request

FAULTS = {  # kind: faults per minute (every kind at least once per run)
    "engine_kill": 4, "engine_stop": 3, "sighup": 3, "hangup_request": 6, "hangup_stream": 4,
    "slowloris": 2, "malformed": 8, "bomb": 3, "disk_full": 1, "fd_flood": 1,
}
FAULT_WINDOW = (0.05, 0.85)  # faults start within this share of the run

SERVED = {200, 429, 502, 503, 504}   # a well-formed request under faults (docs/serve.md)
LISTED = {200, 503}                  # GET /v1/models: 503 only over max_connections
HUNG_UP = 499                        # the audit status of a request its client left
RESENT = {"s1", "pipeline", "pipeline_s1"}   # routes tandem resends after an engine failure
GENERATIONS = {"chat", "stream", "completion"}


def now():
    return time.monotonic()


# --- the record of requests and faults --------------------------------------------------

class Req:
    """One request: what was sent, when, and what came back."""

    def __init__(self, rid, kind, models, expect, audit, deadline_ms=None):
        self.rid, self.kind, self.models, self.expect = rid, kind, models, expect
        self.audit = audit          # "one", "at_most_one", "none" or None (not checked)
        self.deadline_ms = deadline_ms
        self.t0, self.t1 = now(), None
        self.status = None
        self.outcome = "pending"    # answered, hung_up, cut, transport_error, pending
        self.error_type = self.message = self.echoed = None
        self.sent_id = True         # the request carried rid as its x-request-id
        self.note = ""

    def answer(self, status, headers=None, body=None, outcome="answered"):
        self.t1 = now()
        self.status, self.outcome = status, outcome
        if headers is not None:
            self.echoed = headers.get("x-request-id")
        if isinstance(body, (bytes, str)):
            try:
                body = json.loads(body)
            except ValueError:
                body = None
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            self.error_type = body["error"].get("type")
            self.message = body["error"].get("message")

    def fail(self, outcome, note):
        self.t1 = now()
        self.outcome, self.note = outcome, note


class Fault:
    def __init__(self, kind, t):
        self.kind, self.t0, self.t1 = kind, t, None
        self.detail = {}


class Ledger:
    """Every request and fault of the run, and the run's log (stderr and a file)."""

    def __init__(self, log_path, t0):
        self.lock = threading.Lock()
        self.t0 = t0
        self.reqs = {}
        self.faults = []
        self.kills = defaultdict(list)   # model -> monotonic times of its engine kills
        self.log_file = open(log_path, "a", encoding="utf-8")
        self.n = 0

    def log(self, msg):
        line = f"[{now() - self.t0:8.3f}s] {msg}"
        with self.lock:
            self.log_file.write(line + "\n")
            self.log_file.flush()
        print(line, file=sys.stderr, flush=True)

    def rid(self, who):
        with self.lock:
            self.n += 1
            return f"soak-{who}-{self.n}"

    def begin(self, who, kind, models, expect, audit="one", deadline_ms=None, rid=None):
        r = Req(rid or self.rid(who), kind, models, expect, audit, deadline_ms)
        with self.lock:
            self.reqs[r.rid] = r
        return r

    def fault(self, kind, **detail):
        f = Fault(kind, now())
        f.detail.update(detail)
        with self.lock:
            self.faults.append(f)
        return f

    def end(self, f, **detail):
        f.t1 = now()
        f.detail.update(detail)
        shown = ", ".join(f"{k}={v}" for k, v in f.detail.items())
        self.log(f"fault {f.kind} ({f.t0 - self.t0:.3f}s to {f.t1 - self.t0:.3f}s): {shown}")

    def span(self, r):
        """The request's id, kind and time in the run, for messages."""
        end = f"{r.t1 - self.t0:.2f}" if r.t1 else "-"
        return f"{r.rid} ({r.kind}{' ' + r.note if r.note else ''}, {r.t0 - self.t0:.2f}s to {end}s)"

    def kills_between(self, models, t0, t1):
        return sum(1 for m in models for t in self.kills[m] if t0 <= t <= t1)


# --- raw HTTP -------------------------------------------------------------------------

def http_bytes(method, path, body=b"", headers=(), rid=None, length=True):
    """One HTTP/1.1 request as bytes, `Connection: close`, a body sent as JSON."""
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    if rid:
        lines.append(f"x-request-id: {rid}")
    lines += [f"{k}: {v}" for k, v in headers]
    if body:  # the API takes JSON bodies only (docs/serve.md, Hosts and origins)
        lines.append("Content-Type: application/json")
    if length and body is not None:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


class NoResponse(Exception):
    pass


def read_response(sock, deadline):
    """Reads one HTTP response; returns (status, headers dict (lower-case), body, extra),
    extra being any bytes that followed it before the server closed. Raises NoResponse."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = recv_until(sock, deadline)
        if not chunk:
            raise NoResponse(f"connection closed after {len(buf)} bytes of a response"
                             if buf else "connection closed without a response")
        buf += chunk
    head, body = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split(" ")[1])
    except (IndexError, ValueError):
        raise NoResponse(f"not an HTTP status line: {lines[0][:80]!r}")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    if "content-length" in headers:
        need = int(headers["content-length"])
        while len(body) < need:
            chunk = recv_until(sock, deadline)
            if not chunk:
                raise NoResponse(f"body cut at {len(body)} of {need} bytes")
            body += chunk
        extra, body = body[need:], body[:need]
    else:  # chunked or until close: everything up to the close is the body
        while True:
            chunk = recv_until(sock, deadline)
            if not chunk:
                break
            body += chunk
        extra = b""
    return status, headers, body, extra


def recv_until(sock, deadline):
    left = deadline - now()
    if left <= 0:
        raise NoResponse("no response before the client's deadline")
    sock.settimeout(left)
    try:
        return sock.recv(65536)
    except socket.timeout:
        raise NoResponse("no response before the client's deadline")
    except ConnectionResetError:
        return b""


def send_raw(port, data, timeout=15.0):
    """Sends data on a fresh connection and reads one response. A server that answers
    and closes before the whole body is sent (a 413) is read all the same."""
    deadline = now() + timeout
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the answer may already be waiting
        status, headers, body, extra = read_response(s, deadline)
        if not extra and "content-length" in headers:
            s.settimeout(0.2)
            try:
                extra = s.recv(4096)
            except (socket.timeout, ConnectionResetError):
                extra = b""
        return status, headers, body, extra


def control(url, method, path, body=None, timeout=10.0, tries=20):
    """The harness's own calls (status, metrics, admin); retried over a flood's 503s."""
    host, port = url.split("//")[1].split(":")
    last = None
    for _ in range(tries):
        c = http.client.HTTPConnection(host, int(port), timeout=timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            c.request(method, path, data, {"x-request-id": f"ctl-{path.strip('/').replace('/', '-')}",
                                           "Content-Type": "application/json"})
            r = c.getresponse()
            raw = r.read()
            if r.status != 503:
                return r.status, raw
            last = f"503 {raw[:100]!r}"
        except OSError as e:
            last = repr(e)
        finally:
            c.close()
        time.sleep(0.25)
    raise RuntimeError(f"{method} {path}: no answer: {last}")


def status_models(url):
    return {m["name"]: m for m in json.loads(control(url, "GET", "/v1/status")[1])["models"]}


def metrics(url):
    """{(name, frozenset(labels)): value} from /metrics."""
    from prometheus_client.parser import text_string_to_metric_families
    out = {}
    for fam in text_string_to_metric_families(control(url, "GET", "/metrics")[1].decode()):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def metric_sum(ms, name, **labels):
    found = [v for (n, ls), v in ms.items()
             if n == name and all((k, v2) in ls for k, v2 in labels.items())]
    return sum(found) if found else None


# --- the daemon ---------------------------------------------------------------------

class TinyFS:
    """The audit log's directory on a small file system that can be filled: a tmpfs mount
    where permitted, else the daemon's RLIMIT_FSIZE lowered through prlimit."""

    def __init__(self, path, ledger):
        self.path, self.ledger = path, ledger
        self.path.mkdir(parents=True)
        self.filler = self.path / "filler"
        self.pid = None
        self.saved = None
        try:
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TINYFS_BYTES},mode=0700",
                            "tandem-soak", str(self.path)], check=True, capture_output=True,
                           text=True, timeout=30)
            self.how = f"tmpfs of {TINYFS_BYTES >> 20} MiB, filled by a file"
            self.mounted = True
        except (subprocess.CalledProcessError, OSError) as e:
            err = e.stderr.strip() if isinstance(e, subprocess.CalledProcessError) else str(e)
            self.how = f"RLIMIT_FSIZE lowered through prlimit (mount refused: {err})"
            self.mounted = False

    def fill(self, audit):
        if self.mounted:
            fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                for size in (1 << 16, 4096, 512, 64, 1):  # down to the last byte
                    try:
                        while os.write(fd, b"\0" * size) == size:
                            pass
                    except OSError:
                        pass
            finally:
                os.close(fd)
            return self.filler.stat().st_size
        size = audit.stat().st_size if audit.exists() else 0
        self.saved = resource.prlimit(self.pid, resource.RLIMIT_FSIZE)
        resource.prlimit(self.pid, resource.RLIMIT_FSIZE, (size + 1, self.saved[1]))
        return size + 1

    def free(self):
        if self.mounted:
            self.filler.unlink(missing_ok=True)
        elif self.saved:
            resource.prlimit(self.pid, resource.RLIMIT_FSIZE, self.saved)
            self.saved = None

    def close(self):
        self.free()
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True, timeout=30)
            self.mounted = False


def preexec(tinyfs_mounted):
    def apply():
        resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))
        if not tinyfs_mounted:  # RLIMIT_FSIZE fails the write with EFBIG instead of killing
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    return apply


class Daemon:
    def __init__(self, tandem, work, audit, config_text):
        self.tandem, self.work, self.audit = tandem, work, audit
        self.config = work / "tandem.yaml"
        self.base_config = config_text
        self.write_config(config_text)
        self.stderr_path = work / "serve.stderr"
        self.proc = None
        self.port = int(re.search(r"listen: 127.0.0.1:(\d+)", config_text).group(1))
        self.url = f"http://127.0.0.1:{self.port}"

    def write_config(self, text):
        tmp = self.config.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(self.config)

    def start(self, tinyfs_mounted, t0, timeout=60):
        self.stderr = open(self.stderr_path, "w")
        self.proc = subprocess.Popen([str(self.tandem), "serve", "--config", str(self.config),
                                      "--drain-delay", "0"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, preexec_fn=preexec(tinyfs_mounted))
        self.tee = threading.Thread(target=self.copy_stderr, args=(t0,), daemon=True)
        self.tee.start()
        deadline = now() + timeout
        while now() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tandem serve exited {self.proc.returncode}:\n{self.log()[-3000:]}")
            if self.health(timeout=2)[0] == 200:
                return
            time.sleep(0.05)
        raise RuntimeError(f"tandem serve not healthy in {timeout}s:\n{self.log()[-3000:]}")

    def health(self, timeout=2.0):
        """(status or None, body) of GET /health."""
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
            c.request("GET", "/health")
            r = c.getresponse()
            out = r.status, r.read().decode(errors="replace")
            c.close()
            return out
        except OSError as e:
            return None, repr(e)

    def copy_stderr(self, t0):
        """The daemon's stderr to serve.stderr, each line prefixed with the run's time."""
        for line in self.proc.stderr:
            self.stderr.write(f"[{now() - t0:8.3f}s] {line.decode(errors='replace')}")
            self.stderr.flush()
        self.stderr.close()

    def log(self):
        return self.stderr_path.read_text(errors="replace")

    def alive(self):
        return self.proc.poll() is None

    def stats(self):
        """(open descriptors, threads, VmRSS bytes, VmHWM bytes) from /proc."""
        pid = self.proc.pid
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        st = {}
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            k, _, v = line.partition(":")
            st[k] = v.strip()
        return fds, int(st["Threads"]), int(st["VmRSS"].split()[0]) << 10, \
            int(st["VmHWM"].split()[0]) << 10

    def children(self):
        kids = set()
        try:
            tasks = list(Path(f"/proc/{self.proc.pid}/task").iterdir())
        except OSError:
            return kids
        for task in tasks:
            try:
                kids.update(int(p) for p in (task / "children").read_text().split())
            except OSError:
                pass
        return kids


def config_text(port, work, audit, budget, queue_depth=64, bodies=False):
    m = work / "models"
    return f"""listen: 127.0.0.1:{port}
budget:
  ram: {budget}B
cache:
  max_bytes: {CACHE_BYTES}B
defaults:
  model: {DECIDE}
limits:
  request_timeout: {REQUEST_TIMEOUT_S}s
  header_timeout: {HEADER_TIMEOUT_S}s
  max_body: {MAX_BODY >> 10}KiB
  max_connections: {MAX_CONNECTIONS}
  queue_depth: {queue_depth}
shutdown:
  engine_grace: {ENGINE_GRACE_S}s
logs:
  dir: {work / 'logs'}
  audit: {audit}
  bodies: {'true' if bodies else 'false'}
models:
  {DECIDE}:
    path: {m / (DECIDE + '.gguf')}
    ctx: 1024
  {VERIFY}:
    path: {m / (VERIFY + '.gguf')}
pipelines:
  {PIPELINE}:
    decide:
      model: {DECIDE}
      instructions: Which response should the operator take now?
    verify:
      - model: {VERIFY}
        questions:
          consistent:
            type: noul
            instructions: Is "{{{{candidates[decide.choice]}}}}" a sensible step?
    verdict:
      thresholds:
        consistent: ">= 0"
"""


def rotating_budget(tandem, work, port, audit):
    """A RAM budget that holds either model alone but not both: the larger model's plan
    plus half of the smaller's (checked with `tandem plan --config`)."""
    probe = work / "probe.yaml"
    probe.write_text(config_text(port, work, audit, 8 << 30))
    p = subprocess.run([str(tandem), "plan", "--config", str(probe), "--json"],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"tandem plan: {p.stderr}")
    sizes = sorted(m["total"] for m in json.loads(p.stdout)["models"])
    budget = sizes[1] + sizes[0] // 2 + CACHE_BYTES
    probe.write_text(config_text(port, work, audit, budget))
    p = subprocess.run([str(tandem), "plan", "--config", str(probe), "--json"],
                       capture_output=True, text=True, timeout=120)
    verdict = json.loads(p.stdout)["verdict"] if p.returncode == 0 else p.stderr
    if verdict != "rotate":
        raise RuntimeError(f"budget {budget} B: tandem plan says {verdict}, not rotate")
    probe.unlink()
    return budget


# --- clients -----------------------------------------------------------------------

STATES = ["The build farm is at 97% memory and the queue keeps growing.",
          "A customer writes: my package never arrived and I want my money back.",
          "Disk usage on the database host reached 91% overnight; backups still run.",
          "Two of eight web workers restart every few minutes with out-of-memory errors."]
QUESTIONS = [
    {"act": {"type": "choice", "instructions": "What should the operator do?",
             "criteria": {"reduce": "reduce concurrency", "stop": "stop jobs",
                          "nothing": "change nothing"}}},
    {"urgent": {"type": "noul", "instructions": "Is this urgent?"}},
    {"level": {"type": "score", "instructions": "How bad is it?",
               "criteria": ["fine", "bad", "awful"]}},
]
CANDIDATES = {"reduce": "Reduce build concurrency from eight jobs to four.",
              "stop": "Stop the non-critical documentation builds.",
              "nothing": "Change nothing and wait."}


def error_body(e):
    return e.body if isinstance(e.body, dict) else None


class Client(threading.Thread):
    """One client: a loop of seeded random requests over every route until told to stop."""

    OPS = (("s1", 30), ("pipeline", 10), ("pipeline_s1", 10), ("chat", 12), ("stream", 15),
           ("completion", 8), ("models", 15))

    def __init__(self, i, url, ledger, seed, stop):
        super().__init__(name=f"client-{i}", daemon=True)
        self.who, self.url, self.ledger, self.stop = f"c{i}", url, ledger, stop
        self.rng = random.Random(f"{seed}-client-{i}")
        self.ts = TypeSafeClient(api_key="soak", base_url=url, timeout=CLIENT_TIMEOUT,
                                 retry=RetryPolicy(max_retries=0))
        self.oa = openai.OpenAI(base_url=url + "/v1", api_key="soak", max_retries=0,
                                timeout=CLIENT_TIMEOUT)
        self.host_port = ("127.0.0.1", int(url.rsplit(":", 1)[1]))

    def run(self):
        ops, weights = zip(*self.OPS)
        while not self.stop.is_set():
            op = self.rng.choices(ops, weights)[0]
            getattr(self, op)()
            self.stop.wait(self.rng.uniform(0.05, 0.4))
        self.ts.close()
        self.oa.close()

    def state(self, long_ok=False):
        s = self.rng.choice(STATES)
        # now and then over 1 KiB, so that the SDK sends it zstd-compressed; only to
        # kev-tiny, whose window holds it (laya-tiny's 512 tokens do not)
        return s * 16 if long_ok and self.rng.random() < 0.3 else s

    def s1(self):
        model = self.rng.choice([DECIDE, VERIFY, None])  # None: jev-latest, the default
        deadline = self.rng.randint(2000, 6000) if self.rng.random() < 0.1 else None
        r = self.ledger.begin(self.who, "s1", (model or DECIDE,), SERVED, deadline_ms=deadline)
        headers = {"x-request-id": r.rid}
        if deadline:
            headers["X-Tandem-Timeout-Ms"] = str(deadline)
        self.sdk_call(r, lambda: self.ts.system_one(
            state=self.state(model != VERIFY), questions=self.rng.choice(QUESTIONS), model=model,
            extra_headers=headers))

    def pipeline_s1(self):
        r = self.ledger.begin(self.who, "pipeline_s1", MODELS, SERVED)
        q = {"act": {"type": "choice", "instructions": "What should the operator do now?",
                     "criteria": CANDIDATES}}
        self.sdk_call(r, lambda: self.ts.system_one(
            state=self.state(), questions=q, model=f"pipelines/{PIPELINE}",
            extra_headers={"x-request-id": r.rid}))

    def models(self):
        r = self.ledger.begin(self.who, "models", (), LISTED)
        self.sdk_call(r, lambda: self.ts.models.list(extra_headers={"x-request-id": r.rid}))

    def sdk_call(self, r, call):
        try:
            resp = call()
            r.answer(200)
            r.echoed = getattr(resp, "request_id", None)
        except TypeSafeAPIError as e:
            r.answer(e.status, e.headers, error_body(e))
        except Exception as e:  # a transport failure: no response
            r.fail("transport_error", f"{type(e).__name__}: {e}")

    def pipeline(self):
        r = self.ledger.begin(self.who, "pipeline", MODELS, SERVED)
        body = json.dumps({"state": self.state(), "candidates": CANDIDATES}).encode()
        c = http.client.HTTPConnection(*self.host_port, timeout=CLIENT_TIMEOUT)
        try:
            c.request("POST", f"/v1/pipelines/{PIPELINE}", body,
                      {"Content-Type": "application/json", "x-request-id": r.rid})
            resp = c.getresponse()
            r.answer(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
        except Exception as e:
            r.fail("transport_error", f"{type(e).__name__}: {e}")
        finally:
            c.close()

    def messages(self):
        return [{"role": "user", "content": self.rng.choice(STATES)}]

    def chat(self):
        r = self.ledger.begin(self.who, "chat", (DECIDE,), SERVED)
        self.openai_call(r, lambda: self.oa.chat.completions.with_raw_response.create(
            model=DECIDE, messages=self.messages(), max_tokens=8,
            extra_headers={"x-request-id": r.rid}))

    def completion(self):
        r = self.ledger.begin(self.who, "completion", (DECIDE,), SERVED)
        self.openai_call(r, lambda: self.oa.completions.with_raw_response.create(
            model=DECIDE, prompt=self.rng.choice(STATES), max_tokens=8,
            extra_headers={"x-request-id": r.rid}))

    def openai_call(self, r, call):
        try:
            raw = call()
            raw.parse()
            r.answer(raw.status_code, raw.headers)
        except openai.APIStatusError as e:
            r.answer(e.status_code, e.response.headers, e.response.content)
        except Exception as e:
            r.fail("transport_error", f"{type(e).__name__}: {e}")

    def stream(self, hang_up_after=None, who=None, ledger_kind="stream"):
        """A streamed chat; with hang_up_after, the client leaves after that many chunks."""
        r = self.ledger.begin(who or self.who, ledger_kind, (DECIDE,), SERVED,
                              audit="one" if hang_up_after is None else "at_most_one")
        chunks, finished = 0, False
        try:
            with self.oa.chat.completions.with_streaming_response.create(
                    model=DECIDE, messages=self.messages(), stream=True,
                    max_tokens=self.rng.randint(8, 32),
                    extra_headers={"x-request-id": r.rid}) as resp:
                r.answer(resp.status_code, resp.headers, outcome="answered")
                r.t1 = None
                for chunk in resp.parse():
                    chunks += 1
                    if chunk.choices and chunk.choices[0].finish_reason:
                        finished = True
                    if hang_up_after is not None and chunks >= hang_up_after:
                        break
            r.t1 = now()
            if hang_up_after is not None and not finished:
                r.outcome, r.note = "hung_up", f"after {chunks} chunk(s)"
            elif not finished:
                r.outcome, r.note = "cut", f"ended after {chunks} chunk(s) without finish_reason"
        except openai.APIStatusError as e:
            r.answer(e.status_code, e.response.headers, e.response.content)
        except Exception as e:
            if r.status is not None:
                r.t1 = now()
                r.outcome, r.note = "cut", f"after {chunks} chunk(s): {type(e).__name__}: {e}"
            else:
                r.fail("transport_error", f"{type(e).__name__}: {e}")
        return r


# --- the malformed-input corpus and the bombs --------------------------------------------

class Case:
    """One malformed request: its bytes (built with its request id), the statuses that may
    answer it, and whether tandem itself (not the HTTP layer) sees it, so that the audit
    log must hold it."""

    def __init__(self, name, build, expect, audit):
        self.name, self.build, self.expect, self.audit = name, build, expect, audit


def valid_s1(model=DECIDE):
    return json.dumps({"model": model, "state": STATES[0], "questions": QUESTIONS[1]}).encode()


def corpus():
    cases = []

    def app(name, expect, body=b"", method="POST", path="/v1/systemone", headers=()):
        cases.append(Case(name, lambda rid: http_bytes(method, path, body, headers, rid),
                          expect, "one"))

    def framing(name, expect, data):
        cases.append(Case(name, lambda rid: data, expect, None))

    s1 = b'{"model": "kev-tiny", "state": "x", "questions": {"u": {"type": "noul", "instructions": "?"}}}'
    app("truncated_json", {400}, s1[:40])
    app("invalid_utf8", {400}, s1.replace(b'"x"', b'"\xff\xfe\xfd"'))
    app("nul_in_string", {400}, s1.replace(b'"x"', b'"a\x00b"'))
    app("deep_nesting", {400}, b"[" * 100000)
    app("number_overflow", {400}, s1.replace(b'"x"', b"1e999999"))
    app("empty_body", {400}, b"")
    app("not_json", {400}, b"hello, tandem")
    app("over_max_body", {413}, b'{"state": "' + b"a" * (MAX_BODY + 1024) + b'"}')
    app("zstd_garbage", {400}, b"\x28\xb5\x2f\xfd garbage", headers=[("Content-Encoding", "zstd")])
    app("gzip_body", {415}, gzip.compress(s1), headers=[("Content-Encoding", "gzip")])
    app("timeout_not_a_number", {400}, s1, headers=[("X-Tandem-Timeout-Ms", "soon")])
    app("timeout_zero", {400}, s1, headers=[("X-Tandem-Timeout-Ms", "0")])
    app("timeout_too_large", {400}, s1, headers=[("X-Tandem-Timeout-Ms", "99999999999")])
    app("unknown_model", {400}, valid_s1("no-such-model"))
    app("get_systemone", {405}, None, method="GET")
    app("delete_models", {405}, None, method="DELETE", path="/v1/models")
    app("unknown_route", {404}, b"{}", path="/v1/nope")
    app("unknown_pipeline", {404}, json.dumps({"state": "x", "candidates": CANDIDATES}).encode(),
        path="/v1/pipelines/nope")
    app("pipeline_without_candidates", {400}, b'{"state": "x"}', path=f"/v1/pipelines/{PIPELINE}")
    app("pipeline_one_candidate", {400}, b'{"state": "x", "candidates": {"a": "b"}}',
        path=f"/v1/pipelines/{PIPELINE}")
    app("pipeline_unknown_field", {400},
        json.dumps({"state": "x", "candidates": CANDIDATES, "bogus": 1}).encode(),
        path=f"/v1/pipelines/{PIPELINE}")
    app("pipeline_model_two_questions", {400},
        json.dumps({"model": f"pipelines/{PIPELINE}", "state": "x",
                    "questions": {**QUESTIONS[0], **QUESTIONS[1]}}).encode())
    app("chat_unknown_model", {400}, b'{"model": "no-such-model", "messages": []}',
        path="/v1/chat/completions")
    for line in (ROOT / "tests" / "data" / "s1" / "cases.jsonl").read_text().splitlines():
        case = json.loads(line)
        if case["error"] is None:
            continue
        body = case["body"]
        if isinstance(body, dict) and body.get("model") == "kev":
            body = {**body, "model": DECIDE}
        app(f"s1/{case['name']}", {400}, json.dumps(body).encode())
    framing("bad_request_line", {400}, b"GARBAGE\r\n\r\n")
    framing("header_without_colon", {400}, b"GET /health HTTP/1.1\r\nHost 127.0.0.1\r\n\r\n")
    framing("header_70k", {400}, b"GET /v1/models HTTP/1.1\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n")
    framing("unknown_method", {501}, b"BREW /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n")
    framing("bad_chunk_size", {400, 413}, b"POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nZZZ\r\nabc\r\n0\r\n\r\n")
    framing("negative_content_length", {400}, b"POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Length: -5\r\n\r\n")
    framing("http_0_9", {400}, b"GET /\r\n\r\n")
    framing("http2_preface", {400, 501}, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    return cases


class Bombs:
    """Compression bombs, built once (lazily: a few hundred ms of CPU)."""

    def __init__(self):
        self.cases = None

    def get(self):
        if self.cases is None:
            c = zstd.ZstdCompressor(level=3)
            streamed = b"".join(c.compress(b"\0" * (1 << 20)) for _ in range(256)) + c.flush()
            declared = zstd.compress(b"\0" * (64 << 20))
            frame = zstd.compress(b"\0" * (1 << 20))
            nested = zstd.compress(b"[" * (200 << 10))
            gz = gzip.compress(b"\0" * (64 << 20), compresslevel=9)
            hard_cap = b"{" + b" " * (9 << 20)  # past 8 MiB: libevent's own 413
            z = [("Content-Encoding", "zstd")]
            self.cases = [
                ("zstd_256MiB_no_size", http_bytes, streamed, z, {413}, "one"),
                ("zstd_64MiB_declared", http_bytes, declared, z, {413}, "one"),
                ("zstd_300_frames", http_bytes, frame * 300, z, {413}, "one"),
                ("zstd_to_200KiB_of_brackets", http_bytes, nested, z, {400}, "one"),
                ("gzip_64MiB", http_bytes, gz, [("Content-Encoding", "gzip")], {415}, "one"),
                ("body_past_hard_cap", http_bytes, hard_cap, [], {413}, None),
            ]
        return self.cases


# --- faults ----------------------------------------------------------------------------

def schedule(rng, seconds):
    """[(t, kind, fault_seed)]: each kind's count spread over equal slots of the fault
    window, one time drawn in the middle 80% of each slot."""
    a, b = FAULT_WINDOW[0] * seconds, FAULT_WINDOW[1] * seconds
    events = []
    for kind, per_min in FAULTS.items():
        n = max(1, round(per_min * seconds / 60))
        w = (b - a) / n
        for i in range(n):
            events.append((a + i * w + rng.uniform(0.1, 0.9) * w, kind, rng.getrandbits(32)))
    return sorted(events)


class Chaos:
    """Runs the schedule: each fault in its own thread, logged with its times."""

    def __init__(self, daemon, ledger, tinyfs, seed, t0):
        self.d, self.ledger, self.tinyfs, self.t0 = daemon, ledger, tinyfs, t0
        self.cases = corpus()
        random.Random(f"{seed}-corpus").shuffle(self.cases)
        self.next_case = 0
        self.bombs = Bombs()
        self.next_bomb = 0
        self.hups = Counter()
        self.slow_held = []      # seconds each slowloris connection stayed open (None: never closed)
        self.bomb_times = []     # (name, seconds to the answer)
        self.floods = []         # {status: count} per flood
        self.lock = threading.Lock()
        self.disk_lock = threading.Lock()
        self.threads = []
        self.seed = seed

    def run(self, events, stop):
        for t, kind, fseed in events:
            if stop.wait(max(0.0, self.t0 + t - now())):
                break
            th = threading.Thread(target=self.guarded, args=(kind, random.Random(fseed)),
                                  name=kind, daemon=True)
            th.start()
            self.threads.append(th)
        for th in self.threads:
            th.join(120)
        self.recovery()

    def recovery(self):
        """Seconds from the end of the last fault to /health 200 (None: not within the
        bound + 5 s), measured while the clients go on; the reasons of any 503 are logged."""
        last = max((f.t1 or now() for f in self.ledger.faults), default=now())
        self.health_s, unhealthy = None, Counter()
        while self.d.alive() and now() < last + HEALTH_BOUND + 5:
            status, why = self.d.health(timeout=1)
            if status == 200:
                self.health_s = now() - last
                break
            unhealthy[f"{status} {why[:200]}"] += 1
            time.sleep(0.05)
        for why, n in unhealthy.items():
            self.ledger.log(f"/health after the last fault, {n} time(s): {why}")
        self.ledger.log(f"/health 200 {self.health_s} s after the last fault ended")

    def guarded(self, kind, rng):
        f = self.ledger.fault(kind)
        try:
            getattr(self, kind)(rng, f)
        except Exception as e:  # a fault that could not be injected is logged, not fatal
            self.ledger.end(f, error=f"{type(e).__name__}: {e}")

    # engines

    def resident(self, rng, f, capped):
        """A resident engine, (model, pid), or None; one with a request running on it if
        one comes within 3 s (a fault there tests more than one on an idle engine), and
        with `capped`, only a model under the kill cap."""
        deadline, idle = now() + 3, []
        while now() < deadline:
            resident = [(name, m) for name, m in sorted(status_models(self.d.url).items())
                        if m["state"] == "resident" and m.get("pid") and not (
                            capped and sum(1 for t in self.ledger.kills[name]
                                           if t > now() - 60) >= KILL_CAP)]
            busy = [(name, m["pid"]) for name, m in resident if m.get("running")]
            idle = idle or [(name, m["pid"]) for name, m in resident]
            if busy:
                return rng.choice(busy)
            time.sleep(0.05)
        if idle:
            return rng.choice(idle)
        self.ledger.end(f, skipped="no resident engine" + (" under the kill cap" if capped else ""))
        return None

    def engine_kill(self, rng, f):
        target = self.resident(rng, f, capped=True)
        if target:
            model, pid = target
            with self.ledger.lock:
                self.ledger.kills[model].append(now())
            try:
                os.kill(pid, signal.SIGKILL)
                self.ledger.end(f, model=model, pid=pid)
            except ProcessLookupError:
                self.ledger.end(f, model=model, pid=pid, skipped="already gone")

    def engine_stop(self, rng, f):
        target = self.resident(rng, f, capped=False)
        if target:
            model, pid = target
            hold = rng.uniform(0.3, 3.0)  # past header_timeout at times
            try:
                os.kill(pid, signal.SIGSTOP)
                time.sleep(hold)
                os.kill(pid, signal.SIGCONT)
                self.ledger.end(f, model=model, pid=pid, stopped_s=round(hold, 2))
            except ProcessLookupError:
                self.ledger.end(f, model=model, pid=pid, skipped="gone")

    # the daemon

    def sighup(self, rng, f):
        variant = rng.choice(["queue_depth", "bodies", "invalid"])
        text = self.d.base_config
        if variant == "queue_depth":
            text = text.replace("queue_depth: 64", f"queue_depth: {rng.randint(16, 63)}")
        elif variant == "bodies":
            text = text.replace("bodies: false", "bodies: true")
        else:
            text = text.replace("queue_depth: 64", "queue_depth: -1")
        self.d.write_config(text)
        os.kill(self.d.proc.pid, signal.SIGHUP)
        with self.lock:
            self.hups[variant] += 1
        if variant == "invalid":
            time.sleep(0.5)
            self.d.write_config(self.d.base_config)
        self.ledger.end(f, variant=variant)

    def disk_full(self, rng, f):
        hold = rng.uniform(1.5, 4.0)
        with self.disk_lock:
            filled = self.tinyfs.fill(self.d.audit)
            time.sleep(hold)
            self.tinyfs.free()
        self.ledger.end(f, held_s=round(hold, 2), filler_bytes=filled)

    # clients that misbehave

    def hangup_request(self, rng, f):
        variant = rng.choice(["after_send", "after_send", "half_body", "headers_only"])
        model = rng.choice(MODELS)
        body = valid_s1(model)
        audit = "at_most_one" if variant == "after_send" else "none"
        r = self.ledger.begin("x", "hangup", (model,), SERVED, audit=audit)
        data = http_bytes("POST", "/v1/systemone", body, rid=r.rid)
        if variant == "half_body":
            data = data[:len(data) - len(body) // 2]
        elif variant == "headers_only":
            data = data[:len(data) - len(body)]
        wait = rng.uniform(0.0, 0.3)
        with socket.create_connection(("127.0.0.1", self.d.port), timeout=10) as s:
            s.sendall(data)
            time.sleep(wait)
            ready = select.select([s], [], [], 0)[0]
            if variant == "after_send" and ready:  # answered before the client left
                try:
                    status, headers, body_, _ = read_response(s, now() + 5)
                    r.answer(status, headers, body_)
                    r.audit = "one"
                except NoResponse as e:
                    r.fail("transport_error", str(e))
            else:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
                r.fail("hung_up", f"{variant} after {wait:.2f}s")
        self.ledger.end(f, variant=variant, model=model, rid=r.rid, outcome=r.outcome)

    def hangup_stream(self, rng, f):
        client = Client(f"h{rng.getrandbits(16)}", self.d.url, self.ledger, rng.random(),
                        threading.Event())
        r = client.stream(hang_up_after=rng.randint(1, 3), who="x", ledger_kind="hangup_stream")
        client.ts.close()
        client.oa.close()
        self.ledger.end(f, rid=r.rid, status=r.status, outcome=r.outcome, note=r.note)

    def slowloris(self, rng, f):
        n, give_up = 4, HEADER_TIMEOUT_S + SLOW_SLACK + 2.0
        socks = []
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", self.d.port), timeout=5)
            s.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            socks.append([s, now(), None])
        drip = b"X-Slow: " + b"a" * 64
        i = 0
        while now() < socks[0][1] + give_up and any(c[2] is None for c in socks):
            for c in socks:
                if c[2] is not None:
                    continue
                try:
                    c[0].send(drip[i % len(drip):i % len(drip) + 1])
                    if select.select([c[0]], [], [], 0)[0] and not c[0].recv(4096):
                        c[2] = now() - c[1]
                except OSError:
                    c[2] = now() - c[1]
            i += 1
            time.sleep(rng.uniform(0.3, 0.6))
        held = [None if c[2] is None else round(c[2], 2) for c in socks]
        for c in socks:
            c[0].close()
        with self.lock:
            self.slow_held += held
        self.ledger.end(f, closed_after_s=held)

    def malformed(self, rng, f):
        sent = []
        for _ in range(8):
            with self.lock:
                case = self.cases[self.next_case % len(self.cases)]
                self.next_case += 1
            self.send_case(case.name, case.build, case.expect, case.audit, "malformed")
            sent.append(case.name)
        self.ledger.end(f, cases=sent)

    def send_case(self, name, build, expect, audit, kind):
        r = self.ledger.begin("x", kind, (), expect, audit=audit)
        r.note = name
        try:
            data = build(r.rid)
            r.sent_id = r.rid.encode() in data  # a framing case's raw bytes carry none
            status, headers, body, extra = send_raw(self.d.port, data)
            r.answer(status, headers, body)
            if extra:
                r.outcome, r.note = "extra_bytes", f"{name}: {len(extra)} bytes after the response"
        except (NoResponse, OSError) as e:
            r.fail("transport_error", f"{name}: {e}")
        return r

    def bomb(self, rng, f):
        cases = self.bombs.get()
        with self.lock:
            name, build, body, headers, expect, audit = cases[self.next_bomb % len(cases)]
            self.next_bomb += 1
        t = now()
        r = self.send_case(name, lambda rid: build("POST", "/v1/systemone", body, headers, rid),
                           expect, audit, "bomb")
        took = (r.t1 or now()) - t
        with self.lock:
            self.bomb_times.append((name, took))
        self.ledger.end(f, case=name, status=r.status, answered_s=round(took, 3))

    def fd_flood(self, rng, f):
        conns = []
        for i in range(FLOOD):
            r = self.ledger.begin("x", "flood", (), LISTED)
            try:
                s = socket.create_connection(("127.0.0.1", self.d.port), timeout=10)
                s.sendall(http_bytes("GET", "/v1/models", None, rid=r.rid))
                conns.append((s, r))
            except OSError as e:
                r.fail("transport_error", f"connect: {e}")
        time.sleep(1.0)  # all of them open at once
        deadline = now() + 30
        statuses = Counter()
        for s, r in conns:  # closing each answered one frees a descriptor for the next
            try:
                status, headers, body, _ = read_response(s, deadline)
                r.answer(status, headers, body)
                statuses[status] += 1
            except (NoResponse, OSError) as e:
                r.fail("transport_error", f"flood: {e}")
                statuses["none"] += 1
            finally:
                s.close()
        with self.lock:
            self.floods.append(dict(statuses))
        self.ledger.end(f, connections=FLOOD, answers=dict(statuses))


# --- the run -----------------------------------------------------------------------

class EngineWatch(threading.Thread):
    """Records every engine the daemon starts (its children, polled every 50 ms)."""

    def __init__(self, daemon, marker):
        super().__init__(name="engine-watch", daemon=True)
        self.d, self.marker = daemon, marker
        self.pids = {}
        self.stop = threading.Event()

    def run(self):
        while not self.stop.wait(0.05):
            self.poll()

    def poll(self):
        for pid in self.d.children() - set(self.pids):
            cmd = cmdline(pid)
            if self.marker in cmd:
                self.pids[pid] = cmd


def cmdline(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def live_engines(marker):
    """Processes whose command line names this run's model directory."""
    found = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and marker in cmdline(int(p.name)):
            try:
                if "State:\tZ" not in (p / "status").read_text():
                    found.append(int(p.name))
            except OSError:
                pass
    return found


def warm_up(url, ledger):
    """One request on every route, each of which must answer 200 (else the soak cannot
    say anything): this also loads both models once and measures their loads."""
    c = Client("w", url, ledger, 0, threading.Event())
    for op in ("s1", "pipeline", "pipeline_s1", "chat", "stream", "completion", "models"):
        before = set(ledger.reqs)
        t = now()
        getattr(c, op)()
        ledger.log(f"warm-up {op}: {now() - t:.2f} s")
        for rid in set(ledger.reqs) - before:
            r = ledger.reqs[rid]
            if r.status != 200 or r.outcome != "answered":
                raise RuntimeError(f"warm-up {op}: {r.status} {r.outcome} {r.message or r.note}")
    c.ts.close()
    c.oa.close()


def unload_all(url, timeout=30):
    for m in MODELS:
        control(url, "POST", f"/admin/models/{m}/unload")
    deadline = now() + timeout
    while now() < deadline:
        if all(m["state"] in ("unloaded", "failed") for m in status_models(url).values()):
            return
        time.sleep(0.1)
    raise RuntimeError("the models did not unload")


def idle_stats(d, target_fds=None, settle=10.0):
    """The daemon's stats with no model resident and no client connected: sampled until
    the descriptor count is steady (or down to target_fds), at most `settle` seconds."""
    unload_all(d.url)
    deadline = now() + settle
    last = None
    while True:
        time.sleep(0.3)
        st = d.stats()
        steady = last is not None and st[0] == last[0] and st[1] == last[1]
        if (target_fds is None and steady) or (target_fds is not None and st[0] <= target_fds) \
                or now() > deadline:
            return st
        last = st


def read_audit(path):
    """(records by request id, torn line descriptions) from the audit file and its rotations."""
    by_id = defaultdict(list)
    torn = []
    files = sorted(path.parent.glob(path.name + ".*"), reverse=True) + [path]
    for p in files:
        if not p.exists() or p.name.endswith(".tmp"):
            continue
        data = p.read_bytes()
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        elif lines:
            torn.append(f"{p.name}: last line has no newline: {lines[-1][:80]!r}")
        for i, line in enumerate(lines):
            try:
                rec = json.loads(line)
                by_id[rec["request_id"]].append(rec)
            except (ValueError, KeyError, TypeError):
                torn.append(f"{p.name}:{i + 1}: {line[:80]!r}")
    return by_id, torn


def wait_audit(path, reqs, timeout):
    """Waits until every request that must be in the audit log is there; returns the waited s."""
    t = now()
    while True:
        by_id, _ = read_audit(path)
        missing = [r for r in reqs if r.audit == "one" and not by_id.get(r.rid)]
        if not missing or now() - t > timeout:
            return now() - t
        time.sleep(0.25)


# --- invariants ---------------------------------------------------------------------------

def check_responses(ledger):
    bad = []
    counts = Counter()
    for r in ledger.reqs.values():
        counts[r.outcome] += 1
        if r.outcome == "pending":
            bad.append(f"{ledger.span(r)}: no response within {CLIENT_TIMEOUT:.0f} s")
        elif r.outcome in ("transport_error", "extra_bytes"):
            bad.append(f"{ledger.span(r)}: {r.outcome}: {r.note}")
        elif r.outcome == "cut":
            if not ledger.kills_between(r.models, r.t0, r.t1 + 0.5):
                bad.append(f"{ledger.span(r)}: stream cut without an engine kill: {r.note}")
        if r.status is not None and r.status not in r.expect:
            bad.append(f"{ledger.span(r)}: status {r.status} not in {sorted(r.expect)}"
                       f": {r.error_type}: {(r.message or '')[:160]}")
        if r.status is not None and r.sent_id and r.echoed is not None and r.echoed != r.rid:
            bad.append(f"{ledger.span(r)}: answered with x-request-id {r.echoed}")
        if r.status is not None and r.echoed is None and r.audit == "one" and r.kind != "models":
            bad.append(f"{ledger.span(r)}: the answer has no x-request-id")
    measured = (f"{len(ledger.reqs)} requests: {counts['answered']} answered, "
                f"{counts['hung_up']} hung up by their client, {counts['cut']} streams cut by a kill, "
                f"{len(bad)} violation(s)")
    return not bad, measured, bad


def check_502(ledger):
    bad = []
    kinds = Counter()
    for r in ledger.reqs.values():
        if r.status != 502:
            continue
        kills = ledger.kills_between(r.models, r.t0, r.t1)
        if r.kind in RESENT or r.kind == "hangup":
            if kills >= 2 and "twice" in (r.message or ""):
                kinds["failed twice"] += 1
            elif r.deadline_ms and "deadline" in (r.message or ""):
                kinds["deadline too short to reload"] += 1
            else:
                bad.append(f"{ledger.span(r)}, deadline {r.deadline_ms or REQUEST_TIMEOUT_S * 1000} ms,"
                           f" {kills} kill(s) meanwhile): 502 {r.error_type}: {(r.message or '')[:200]}")
        elif r.kind in GENERATIONS or r.kind == "hangup_stream":
            if kills:
                kinds["a generation's engine killed"] += 1
            else:
                bad.append(f"{ledger.span(r)}: 502 without an engine kill: {(r.message or '')[:200]}")
        else:
            bad.append(f"{ledger.span(r)}: 502: {(r.message or '')[:200]}")
    total = sum(kinds.values()) + len(bad)
    shown = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "none allowed"
    return not bad, f"{total} 502(s): {shown}; {len(bad)} not allowed", bad


def check_audit(ledger, by_id, torn, dropped, waited):
    bad = list(f"torn: {t}" for t in torn)
    ours = late_499 = 0
    for r in ledger.reqs.values():
        lines = by_id.get(r.rid, [])
        if r.audit is None:
            continue
        if r.audit == "one":
            ours += 1
            if len(lines) != 1:
                bad.append(f"{ledger.span(r)}: {len(lines)} audit lines, want 1")
            elif r.kind == "stream" and r.outcome == "answered" and lines[0]["status"] == HUNG_UP:
                late_499 += 1  # the client read to [DONE] and left before the engine's end
            elif r.status is not None and r.outcome != "cut" and lines[0]["status"] != r.status:
                bad.append(f"{ledger.span(r)}: audit status {lines[0]['status']}, client saw {r.status}")
        elif r.audit == "at_most_one":
            if len(lines) > 1:
                bad.append(f"{ledger.span(r)}: {len(lines)} audit lines, want at most 1")
            elif lines and lines[0]["status"] not in SERVED | {HUNG_UP}:
                bad.append(f"{ledger.span(r)}: audit status {lines[0]['status']}")
        elif lines:
            bad.append(f"{ledger.span(r)}: never arrived whole, yet {len(lines)} audit line(s)")
    missing = sum(1 for b in bad if "audit lines, want 1" in b and ": 0 audit lines" in b)
    if dropped and missing <= dropped:  # lines tandem itself counted as lost
        bad = [b for b in bad if ": 0 audit lines" not in b]
    shown = "n/a (no metric)" if dropped is None else f"{dropped:.0f}"
    measured = (f"{ours} answered request ids, {missing} missing, {len(torn)} torn line(s), "
                f"tandem_audit_dropped_total {shown}; flushed {waited:.1f} s after the load; "
                f"{late_499} whole stream(s) logged 499")
    return not bad, measured, bad


def mib(n):
    return f"{n / (1 << 20):.1f} MiB"


# --- the report ---------------------------------------------------------------------------

def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


ROUTES = {"s1": "`POST /v1/systemone` (TypeSafe SDK)",
          "pipeline_s1": "`POST /v1/systemone`, model `pipelines/ops` (TypeSafe SDK)",
          "pipeline": "`POST /v1/pipelines/ops` (http.client)",
          "chat": "`POST /v1/chat/completions` (OpenAI SDK)",
          "stream": "`POST /v1/chat/completions`, stream (OpenAI SDK)",
          "completion": "`POST /v1/completions` (OpenAI SDK)",
          "models": "`GET /v1/models` (TypeSafe SDK)",
          "hangup": "System One, client hangs up (raw socket)",
          "hangup_stream": "streamed chat, client hangs up (OpenAI SDK)",
          "malformed": "malformed corpus (raw socket)",
          "bomb": "compression bombs (raw socket)",
          "flood": "`GET /v1/models`, fd flood (raw socket)"}


def report(args, run, ledger, chaos, invariants, ms):
    statuses = sorted({r.status for r in ledger.reqs.values() if r.status is not None})
    rows = []
    for kind, label in ROUTES.items():
        rs = [r for r in ledger.reqs.values() if r.kind == kind]
        if not rs:
            continue
        c = Counter(r.status for r in rs if r.status is not None)
        o = Counter(r.outcome for r in rs)
        rows.append([label, len(rs), *[c.get(s, "") for s in statuses], o.get("hung_up", ""),
                     o.get("cut", ""), o.get("transport_error", "") or ""])
    req_table = table(["route (client)", "requests", *map(str, statuses), "hung up by client",
                       "stream cut", "no response"], rows)

    refused = Counter((r.status, r.error_type or "?") for r in ledger.reqs.values()
                      if r.kind not in ("malformed", "bomb") and (r.status or 0) >= 429)
    refused_text = ("Refusals of well-formed requests, by status and error type: "
                    + (", ".join(f"{st} `{t}` {n}" for (st, t), n in sorted(refused.items()))
                       or "none") + ".")

    fc = defaultdict(list)
    for f in ledger.faults:
        fc[f.kind].append(f)
    frows = []
    for kind in FAULTS:
        fs = fc.get(kind, [])
        skipped = sum(1 for f in fs if "skipped" in f.detail or "error" in f.detail)
        frows.append([kind, len(fs) - skipped, skipped or "", fault_detail(kind, fs, chaos)])
    fault_table = table(["fault", "injected", "skipped", "detail"], frows)

    retry_rows = [[dict(ls).get("model", ""), dict(ls).get("reason", ""), f"{v:.0f}"]
                  for (n, ls), v in sorted(ms.items(), key=lambda kv: sorted(kv[0][1]))
                  if n == "tandem_engine_retries_total" and v]
    attempts = Counter(rec.get("attempts", 1) for recs in run["audit"].values() for rec in recs)
    retry_text = (table(["model", "reason", "resends (`tandem_engine_retries_total`)"], retry_rows)
                  if retry_rows else "No resend was counted (`tandem_engine_retries_total` is 0 or absent).")
    crashes = {dict(ls)["model"]: v for (n, ls), v in ms.items() if n == "tandem_model_crashes_total"}
    loads = {dict(ls)["model"]: v for (n, ls), v in ms.items() if n == "tandem_model_loads_total"}

    inv_table = table(["invariant", "bound", "measured", "result"],
                      [[name, bound, measured, "**pass**" if ok else "**FAIL**"]
                       for name, bound, ok, measured, _ in invariants])
    failed = [(name, bad) for name, _, ok, _, bad in invariants if not ok]
    failures = ""
    if failed:
        failures = "\n\nViolations (the first five of each):\n\n" + "\n".join(
            f"- `{name}`: " + "; ".join(b for b in bad[:5]) for name, bad in failed)

    cmd = " ".join(["build/venv/bin/python", "tests/soak/soak.py", "--tandem",
                    shown_path(args.tandem), "--seconds", str(args.seconds), "--seed",
                    str(args.seed), "--clients", str(args.clients), "--out", shown_path(args.out)])
    made = f"`make soak SOAK_S={args.seconds}`, which runs `{cmd}`" if os.environ.get("MAKELEVEL") \
        else f"`{cmd}`"
    body = f"""Made by {made} on {run['date']} ({run['wall']:.0f} s in all, {args.seconds} s of load and faults), seed **{args.seed}**. Machine: {os.cpu_count()} CPU cores ({cpu_model()}), no GPU; engine {run['engine']}; tandem at {run['tandem']}.

Set-up: `tandem serve` with `{DECIDE}` and `{VERIFY}` on a {mib(run['budget'])} `ram:` budget that holds one of them at a time (they rotate), the pipeline `{PIPELINE}` (decide on {DECIDE}, verify on {VERIFY}), `limits.max_connections` {MAX_CONNECTIONS}, `header_timeout` {HEADER_TIMEOUT_S} s, `max_body` {MAX_BODY >> 10} KiB, `request_timeout` {REQUEST_TIMEOUT_S} s, `limits.max_restarts` 5 (the default: the soak kills at most {KILL_CAP} engines per model per 60 s), `--drain-delay 0`; the daemon runs with `RLIMIT_NOFILE` {NOFILE}. Audit log on a {run['tinyfs']}. {args.clients} client threads, each a seeded loop with 0.05 to 0.4 s between requests; every request has its own `x-request-id`. Faults start at seeded times within {FAULT_WINDOW[0]:.0%} to {FAULT_WINDOW[1]:.0%} of the run; the run's log (`soak.log` in its work directory) lists each with its time.

### Requests by route and status

{req_table}

{refused_text}

### Faults by kind

{fault_table}

### Retries

{retry_text}

Audit lines by `attempts`: {', '.join(f'{k}: {v}' for k, v in sorted(attempts.items()))}. Engine crashes (`tandem_model_crashes_total`): {', '.join(f'{k} {v:.0f}' for k, v in sorted(crashes.items())) or 'none'}; loads: {', '.join(f'{k} {v:.0f}' for k, v in sorted(loads.items()))}.

### Invariants

{inv_table}{failures}
"""
    replace_section(Path(args.out), "soak", "## Chaos soak (`make soak`)", body)


def shown_path(p):
    """p relative to the repository when it is inside it, else absolute."""
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)


def fault_detail(kind, fs, chaos):
    done = [f for f in fs if "skipped" not in f.detail and "error" not in f.detail]
    if kind in ("engine_kill", "engine_stop"):
        c = Counter(f.detail["model"] for f in done)
        return ", ".join(f"{m}: {n}" for m, n in sorted(c.items()))
    if kind == "sighup":
        return ", ".join(f"{v}: {n}" for v, n in sorted(chaos.hups.items()))
    if kind in ("hangup_request", "hangup_stream"):
        c = Counter(f.detail.get("outcome") for f in done)
        return ", ".join(f"{o}: {n}" for o, n in sorted(c.items()))
    if kind == "slowloris":
        closed = [h for h in chaos.slow_held if h is not None]
        shut = (f"closed by tandem after {min(closed):.1f} to {max(closed):.1f} s"
                if closed else "none closed by tandem")
        return (f"{len(chaos.slow_held)} connections; {shut}; {chaos.slow_held.count(None)} "
                f"still open when the client gave up after "
                f"{HEADER_TIMEOUT_S + SLOW_SLACK + 2:.1f} s")
    if kind == "malformed":
        return f"{chaos.next_case} cases sent of a corpus of {len(chaos.cases)}"
    if kind == "bomb":
        return "; ".join(f"{n}: {t:.2f} s" for n, t in chaos.bomb_times)
    if kind == "disk_full":
        return ", ".join(f"{f.detail['held_s']} s" for f in done)
    if kind == "fd_flood":
        return "; ".join(", ".join(f"{k}: {v}" for k, v in sorted(fl.items(), key=str))
                         for fl in chaos.floods) + f" ({FLOOD} connections each)"
    return ""


# --- main --------------------------------------------------------------------------------

def soak(args, work, ledger):
    models = work / "models"
    models.mkdir()
    for m in MODELS:  # this run's own copies: their path marks this run's engines
        shutil.copyfile(FIXTURES / f"{m}.gguf", models / f"{m}.gguf")
    tinyfs = TinyFS(work / "audit", ledger)
    ledger.log(f"audit file system: {tinyfs.how}")
    audit = tinyfs.path / "audit.jsonl"
    port = free_port()
    run = {"tinyfs": tinyfs.how, "date": datetime.datetime.now(datetime.timezone.utc)
           .strftime("%Y-%m-%d %H:%M UTC"), "engine": engine_version(),
           "tandem": git_head()}
    d = None
    try:
        run["budget"] = rotating_budget(args.tandem, work, port, audit)
        d = Daemon(args.tandem, work, audit, config_text(port, work, audit, run["budget"]))
        d.start(tinyfs.mounted, ledger.t0)
        tinyfs.pid = d.proc.pid
        watch = EngineWatch(d, str(models))
        watch.start()
        ledger.log(f"tandem serve pid {d.proc.pid} on {d.url}, budget {run['budget']} B")
        warm_up(d.url, ledger)
        warm = set(ledger.reqs)
        before = idle_stats(d)
        ledger.log(f"idle before the load: {before[0]} fds, {before[1]} threads, RSS {mib(before[2])}")
        return run_load(args, d, ledger, tinyfs, watch, before, warm, run, audit)
    finally:
        if d and d.proc and d.alive():
            d.proc.kill()
            d.proc.wait()
        for pid in live_engines(str(models)):
            os.kill(pid, signal.SIGKILL)
        for f in tinyfs.path.glob("audit.jsonl*"):  # kept for reading after the unmount
            shutil.copyfile(f, work / f.name)
        tinyfs.close()


def run_load(args, d, ledger, tinyfs, watch, before, warm, run, audit):
    events = schedule(random.Random(args.seed), args.seconds)
    t0 = now()
    ledger.log(f"load: {args.clients} clients for {args.seconds} s; {len(events)} faults scheduled")
    stop_clients, stop_chaos = threading.Event(), threading.Event()
    clients = [Client(i, d.url, ledger, args.seed, stop_clients) for i in range(args.clients)]
    for c in clients:
        c.start()
    chaos = Chaos(d, ledger, tinyfs, args.seed, t0)
    chaos_thread = threading.Thread(target=chaos.run, args=(events, stop_chaos), daemon=True)
    chaos_thread.start()
    while now() < t0 + args.seconds and d.alive():
        time.sleep(0.2)
    stop_chaos.set()
    chaos_thread.join(180)
    health_s = getattr(chaos, "health_s", None)
    stop_clients.set()
    for c in clients:
        c.join(CLIENT_TIMEOUT + 10)
    alive_during = d.alive()
    ledger.log(f"load over after {now() - t0:.1f} s; daemon {'alive' if alive_during else 'DEAD'}")
    if not alive_during:
        raise SystemExit(f"soak: tandem serve died during the load (exit {d.proc.returncode}):\n"
                         + d.log()[-3000:])

    reqs = [r for rid, r in ledger.reqs.items() if rid not in warm]
    waited = wait_audit(audit, reqs, AUDIT_FLUSH)
    ms = metrics(d.url)
    after = idle_stats(d, target_fds=before[0])
    ledger.log(f"idle after the load: {after[0]} fds, {after[1]} threads, RSS {mib(after[2])}, "
               f"peak {mib(after[3])}")

    # shutdown with an engine resident, so that there is one to reap
    control(d.url, "POST", "/v1/systemone", json.loads(valid_s1()), timeout=60)
    watch.poll()
    at_term = [p for p in watch.pids if cmdline(p)]
    t = now()
    d.proc.send_signal(signal.SIGTERM)
    try:
        code = d.proc.wait(SHUTDOWN_BOUND + 30)
    except subprocess.TimeoutExpired:
        code = None
    stop_s = now() - t
    watch.stop.set()
    time.sleep(0.2)
    survivors = [p for p in watch.pids if cmdline(p) and p in live_engines(str(watch.marker))]
    survivors += [p for p in live_engines(watch.marker) if p not in survivors]
    d.tee.join(10)

    by_id, torn = read_audit(audit)
    dropped = metric_sum(ms, "tandem_audit_dropped_total")
    run["audit"] = {r.rid: by_id.get(r.rid, []) for r in reqs}
    for rid in warm:
        ledger.reqs.pop(rid)

    slow_bad = [h for h in chaos.slow_held if h is None or h > HEADER_TIMEOUT_S + SLOW_SLACK]
    bomb_bad = [f"{n}: {t:.2f} s" for n, t in chaos.bomb_times if t > BOMB_BOUND]
    hwm_growth = after[3] - before[3]
    # ASan's quarantine and shadow memory make RSS say nothing about leaks (its own leak
    # check does): the memory bounds are measured but not judged on an instrumented build
    asan = b"__asan_init" in args.tandem.read_bytes()
    unjudged = " (not judged under ASan)" if asan else ""
    sanitizer = SANITIZER_REPORT.search(d.log())
    invariants = [
        ("one_response", "exactly one, documented status", *check_responses(ledger)),
        ("no_kill_502", "0 when the deadline allowed a resend", *check_502(ledger)),
        ("audit", "one line per answered id, 0 torn", *check_audit(ledger, by_id, torn, dropped, waited)),
        ("idle_fds", "≤ idle count before the load", after[0] <= before[0],
         f"{before[0]} before, {after[0]} after", [f"{after[0] - before[0]} more descriptors"]
         + fd_listing(d, after[0] > before[0])),
        ("idle_threads", "≤ idle count before the load", after[1] <= before[1],
         f"{before[1]} before, {after[1]} after", [f"{after[1]} threads"]),
        ("rss_growth", f"< {mib(RSS_BOUND)}", asan or after[2] - before[2] < RSS_BOUND,
         f"{mib(before[2])} before, {mib(after[2])} after ({after[2] - before[2]:+,} B)"
         + unjudged, ["grew"]),
        ("engines_reaped", f"exit 0 within {SHUTDOWN_BOUND:.0f} s, no engine left",
         code == 0 and stop_s <= SHUTDOWN_BOUND and not survivors,
         f"exit {code} after {stop_s:.1f} s; {len(watch.pids)} engines seen in the run, "
         f"{len(at_term)} running at SIGTERM, {len(survivors)} alive after",
         [f"survivors {survivors}, exit {code}, {stop_s:.1f} s"]),
        ("health_recovery", f"≤ {HEALTH_BOUND:.0f} s after the last fault",
         health_s is not None and health_s <= HEALTH_BOUND,
         "never" if health_s is None else f"{health_s:.2f} s", ["/health not 200 in time"]),
        ("slowloris", f"closed ≤ header_timeout + {SLOW_SLACK} s",
         not slow_bad and bool(chaos.slow_held),
         f"{len(chaos.slow_held)} connections; {len(slow_bad)} open longer than "
         f"{HEADER_TIMEOUT_S + SLOW_SLACK:.1f} s", [f"held: {chaos.slow_held}"]),
        ("bombs", f"answered ≤ {BOMB_BOUND:.0f} s, peak RSS +< {mib(HWM_BOUND)}",
         not bomb_bad and (asan or hwm_growth < HWM_BOUND),
         f"{len(chaos.bomb_times)} bombs, slowest {max((t for _, t in chaos.bomb_times), default=0):.2f} s; "
         f"peak RSS {hwm_growth:+,} B{unjudged}", bomb_bad + [f"peak RSS grew {mib(hwm_growth)}"]),
        ("sanitizer", "no report", not sanitizer, "none" if not sanitizer else sanitizer.group(0),
         [d.log()[-2000:]] if sanitizer else []),
    ]
    run["wall"] = now() - ledger.t0
    with open(ledger.log_file.name.replace("soak.log", "requests.jsonl"), "w") as out:
        for r in ledger.reqs.values():  # for reading a failure afterwards
            out.write(json.dumps({"rid": r.rid, "kind": r.kind, "t0": round(r.t0 - ledger.t0, 3),
                                  "t1": r.t1 and round(r.t1 - ledger.t0, 3), "status": r.status,
                                  "outcome": r.outcome, "type": r.error_type,
                                  "message": r.message, "note": r.note}) + "\n")
    report(args, run, ledger, chaos, invariants, ms)
    failed = [i for i in invariants if not i[2]]
    for name, bound, ok, measured, bad in invariants:
        ledger.log(f"invariant {name}: {'pass' if ok else 'FAIL'}: {measured} (bound: {bound})")
    for name, _, _, _, bad in failed:
        for b in bad[:20]:
            ledger.log(f"  {name}: {b}")
    return failed


def fd_listing(d, show):
    if not show:
        return []
    try:
        return [" ".join(f"{fd}->{os.readlink(f'/proc/{d.proc.pid}/fd/{fd}')}"
                         for fd in sorted(os.listdir(f"/proc/{d.proc.pid}/fd"), key=int))]
    except OSError:
        return []


def git_head():
    p = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                       capture_output=True, text=True)
    return p.stdout.strip() or "unknown"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tandem", type=Path, default=ROOT / "build" / "tandem")
    ap.add_argument("--seconds", type=int, default=int(os.environ.get("SOAK_S", 300)))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "reliability.md")
    ap.add_argument("--workdir", type=Path, help="kept afterwards (default: a temporary one, "
                    "removed when every invariant holds)")
    args = ap.parse_args()
    args.tandem, args.out = args.tandem.resolve(), args.out.resolve()
    if not ENGINE.exists():
        sys.exit(f"soak: {ENGINE} is missing: run `make deps`")
    for m in MODELS:
        if not (FIXTURES / f"{m}.gguf").exists():
            sys.exit(f"soak: {FIXTURES / m}.gguf is missing: run `make fixtures`")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="tandem-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(work / "soak.log", now())
    ledger.log(f"soak: seed {args.seed}, {args.seconds} s, {args.clients} clients, work dir {work}")
    for sig in (signal.SIGTERM, signal.SIGINT):  # unwind (unmount, stop the daemon) on a signal
        signal.signal(sig, lambda *_: sys.exit(f"soak: interrupted; work dir {work}"))
    failed = soak(args, work, ledger)
    if failed:
        print(f"soak: FAILED: {', '.join(i[0] for i in failed)} (seed {args.seed}; work dir {work})",
              file=sys.stderr)
        sys.exit(1)
    print(f"soak: every invariant holds (seed {args.seed}); table in {args.out}", file=sys.stderr)
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
