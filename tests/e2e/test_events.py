"""GET /v1/events end to end: a live daemon with the two fixture deciders in a
budget that holds one at a time, read by a real server-sent-events client.

Checked: the order of what a swap publishes (loading, ready, evicted, request,
queue, memory) with increasing ids; every frame read as schemathesis reads one
validates against docs/openapi.yaml's NodeEvent, and its data against the
Event<Name> schema its event names; a resume with Last-Event-ID, and the reset
past the ring; the subscriber cap (429); a subscriber that never reads, which
is dropped while the daemon keeps answering and its memory stays bounded; a
hang-up mid-stream; a pipeline's verdict; the API key; load progress in
/v1/status and on `tandem decide`'s terminal; and the dashboard's files (their
browser test is test_ui.py)."""
import http.client
import os
import pty
import re
import subprocess
import json
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

import jsonschema
import yaml
from schemathesis.core.deserialization import _parse_sse_events

from conftest import ROOT
from conftest import http as http_call
from test_pipeline import REQUEST as PIPELINE_REQUEST
from test_pipeline import config as pipeline_config
from test_pipeline import reload
from test_serve import A, B, choice, config


class Stream:
    """One subscriber: reads the stream on a thread and parses its frames."""

    def __init__(self, url, headers=None):
        u = urlparse(url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        self.conn.request("GET", "/v1/events", headers=headers or {})
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.events, self.comments, self.raw, self.ended = [], [], [], False
        self.cond = threading.Condition()
        if self.status == 200:
            threading.Thread(target=self._read, daemon=True).start()
        else:
            self.body = json.loads(self.resp.read())

    def _read(self):
        buf = b""
        try:
            while chunk := self.resp.read1(65536):
                buf += chunk
                while b"\n\n" in buf:
                    frame, buf = buf.split(b"\n\n", 1)
                    self._frame(frame.decode())
        except (OSError, ValueError, AttributeError, http.client.HTTPException):  # closed by us
            pass
        with self.cond:
            self.ended = True
            self.cond.notify_all()

    def _frame(self, text):
        with self.cond:
            self.raw.append(text + "\n\n")
        ev = {"id": None, "event": "message", "data": None}
        for line in text.split("\n"):
            if line.startswith(":"):
                with self.cond:
                    self.comments.append(line)
                continue
            key, _, value = line.partition(": ")
            ev[key] = json.loads(value) if key == "data" else int(value) if key == "id" else value
        if ev["data"] is not None:
            with self.cond:
                self.events.append(ev)
                self.cond.notify_all()

    def wait(self, pred, timeout=60, what="an event"):
        deadline = time.time() + timeout
        with self.cond:
            while True:
                found = [e for e in self.events if pred(e)]
                if found:
                    return found[0]
                left = deadline - time.time()
                assert left > 0 and not self.ended, f"no {what} in {[e['event'] for e in self.events]}"
                self.cond.wait(left)

    def of(self, kind, model=None):
        with self.cond:
            return [e for e in self.events
                    if e["event"] == kind and (model is None or e["data"].get("model") == model)]

    def close(self):
        self.conn.close()


CONTRACT = yaml.safe_load((ROOT / "docs" / "openapi.yaml").read_text())


def contract_schema(name):
    return jsonschema.Draft202012Validator({"$ref": f"#/components/schemas/{name}",
                                            "components": CONTRACT["components"]})


def assert_frames_keep_the_contract(stream):
    """Every frame stream got, parsed as schemathesis parses a text/event-stream answer
    (its response_schema_conformance check, ST108), is a NodeEvent, and its data is the
    schema its event names (EventLoading for loading). Returns the event names seen."""
    with stream.cond:
        raw = "".join(stream.raw)
    frame = contract_schema("NodeEvent")
    seen = set()
    for e in _parse_sse_events(raw.encode()):
        bad = [err.message for err in frame.iter_errors(e)]
        assert not bad, (e, bad)
        data = json.loads(e["data"])
        schema = contract_schema("Event" + e["event"].capitalize())
        bad = [f"{list(err.absolute_path)}: {err.message}" for err in schema.iter_errors(data)]
        assert not bad, (e["event"], data, bad)
        assert not list(contract_schema("EventData").iter_errors(data)), data
        seen.add(e["event"])
    return seen


def ask(s, model):
    status, body = http_call("POST", s.url + "/v1/systemone", choice("CPU at 95%", model), timeout=120)
    assert status == 200, body
    return body


def index(stream, kind, model):
    return stream.events.index(stream.of(kind, model)[0])


def test_a_swap_publishes_in_order_and_a_resume_replays_what_was_missed(serve_factory):
    s = serve_factory(config(budget="400MiB"))
    st = Stream(s.url)
    assert st.status == 200
    assert st.resp.getheader("Content-Type") == "text/event-stream"
    ask(s, A)
    ask(s, B)
    st.wait(lambda e: e["event"] == "request" and e["data"]["model"] == B, what="B's request")
    ids = [e["id"] for e in st.events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids), ids
    # A loads (spawn first), is ready, answers; then is evicted for B, which loads and answers
    assert st.of("loading", A)[0]["data"]["phase"] == "spawn"
    order = [index(st, "loading", A), index(st, "ready", A), index(st, "request", A),
             index(st, "evicted", A), index(st, "loading", B), index(st, "ready", B),
             index(st, "request", B)]
    assert order == sorted(order), [(e["event"], e["data"].get("model")) for e in st.events]
    assert st.of("evicted", A)[0]["data"]["reason"] == "room"
    ready = st.of("ready", B)[0]["data"]
    assert ready["device"] == "cpu" and ready["load_ms"] > 0 and ready["pid"] > 0
    req = st.of("request", B)[0]["data"]
    assert req["route"] == "systemone" and req["status"] == 200 and req["request_id"]
    assert req["loading_ms"] > 0, "B's request waited for B's load"
    assert req["total_ms"] >= req["queued_ms"] + req["loading_ms"] + req["running_ms"] - 5
    assert "request_body" not in req, "no bodies unless logs.bodies"
    queue = st.wait(lambda e: e["event"] == "queue" and e["data"]["models"][B]["waiting"] == 1)
    assert queue["data"]["models"][B]["oldest_wait_ms"] >= 0
    phases = [e["data"]["phase"] for e in st.of("loading", B)]
    assert phases[0] == "spawn" and phases[-1] in ("reading weights", "warmup"), phases
    # a sample after B is ready (one taken while A was loading or resident names A)
    b_ready = st.of("ready", B)[0]["id"]
    mem = st.wait(lambda e: e["event"] == "memory" and e["id"] > b_ready, timeout=5)["data"]
    host = next(d for d in mem["devices"] if d["device"] == "host")
    assert host["planned_bytes"] > 0 and host["measured_bytes"] > 0
    assert [m["model"] for m in mem["models"]] == [B] and mem["models"][0]["rss_bytes"] > 0

    # a reconnect with the id of A's ready event gets everything after it, in order
    mid = st.of("ready", A)[0]["id"]
    again = Stream(s.url, {"Last-Event-ID": str(mid)})
    again.wait(lambda e: e["id"] == ids[-1], timeout=10, what="the replay's end")
    assert [e["id"] for e in again.events][: len(ids) - ids.index(mid) - 1] == ids[ids.index(mid) + 1:]
    # an id the daemon never issued (a client of an earlier daemon) gets a reset
    stale = Stream(s.url, {"Last-Event-ID": "99999999"})
    reset = stale.wait(lambda e: e["event"] == "reset", timeout=10)
    assert reset["id"] is None and reset["data"]["oldest_id"] >= 1
    assert assert_frames_keep_the_contract(st) >= {"loading", "ready", "evicted", "request",
                                                   "queue", "memory"}
    assert "reset" in assert_frames_keep_the_contract(stale)
    for x in (st, again, stale):
        x.close()


def test_the_subscriber_cap_and_the_key(serve_factory):
    s = serve_factory(config(extra="api_keys: [k-ev]", limits="  max_event_clients: 2"))
    auth = {"Authorization": "Bearer k-ev"}
    assert Stream(s.url).status == 401
    a, b = Stream(s.url, auth), Stream(s.url, auth)
    assert (a.status, b.status) == (200, 200)
    c = Stream(s.url, auth)
    assert c.status == 429, c.status
    assert c.body["error"]["type"] == "too_many_subscribers"
    assert "limits.max_event_clients" in c.body["error"]["message"]
    assert c.resp.getheader("Retry-After")
    # a hang-up mid-stream frees the place
    a.close()
    deadline = time.time() + 10
    while time.time() < deadline:
        req = http.client.HTTPConnection(urlparse(s.url).hostname, urlparse(s.url).port, timeout=10)
        req.request("GET", "/v1/status", headers=auth)
        events = json.loads(req.getresponse().read())["events"]
        if events["subscribers"] == 1:
            break
        time.sleep(0.1)
    assert events == {"subscribers": 1, "dropped": 0, "max": 2}, events
    d = Stream(s.url, auth)
    assert d.status == 200
    # a reload to 0 turns the stream off for new subscribers; those connected stay
    reload(s, config(extra="api_keys: [k-ev]", limits="  max_event_clients: 0"))
    # the subscribers hear of it (tandem mcp rereads the pipelines then)
    assert d.wait(lambda e: e["event"] == "reload", timeout=10)["data"]["config"] == str(s.config)
    assert "reload" in assert_frames_keep_the_contract(d)
    off = Stream(s.url, auth)
    assert off.status == 503 and "max_event_clients: 0" in off.body["error"]["message"]
    assert not b.ended and not d.ended
    b.close(), d.close()


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def test_a_subscriber_that_never_reads_is_dropped_and_memory_stays_bounded(serve_factory):
    s = serve_factory(config(), logs="  bodies: true\n")
    u = urlparse(s.url)
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect((u.hostname, u.port))
    slow.sendall(b"GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # and never reads again
    fast = Stream(s.url)
    before = rss_kib(s.proc.pid)
    # request events carry their bodies (logs.bodies): 40 refused requests of 200 KB each
    # publish 8 MB, far past the 1 MiB a subscriber may fall behind
    big = {"model": A, "state": "x" * 200_000, "questions": "not an object"}
    for _ in range(40):
        status, _ = http_call("POST", s.url + "/v1/systemone", big, timeout=30)
        assert status == 400
    assert http_call("GET", s.url + "/health", timeout=5)[0] == 200, "the daemon keeps answering"
    fast.wait(lambda e: len(fast.of("request")) >= 40, timeout=30, what="40 request events")
    status = http_call("GET", s.url + "/v1/status")[1]["events"]
    assert status["dropped"] == 1 and status["subscribers"] == 1, status
    assert "fell" in s.log() and "dropped" in s.log()
    grew = rss_kib(s.proc.pid) - before
    # ASan's quarantine keeps freed memory: its RSS says nothing here (its leak check does)
    asan = b"__asan_init" in Path(s.proc.args[0]).read_bytes()
    assert asan or grew < 24 * 1024, f"RSS grew {grew} KiB"
    assert fast.of("request")[0]["data"]["request_body"].startswith('{"model"')
    assert assert_frames_keep_the_contract(fast) >= {"request"}
    slow.close(), fast.close()


def test_a_pipeline_publishes_its_verdict(serve_factory):
    s = serve_factory(pipeline_config(tiny=True))
    st = Stream(s.url)
    status, body = http_call("POST", s.url + "/v1/pipelines/ops", PIPELINE_REQUEST, timeout=300)
    assert status == 200, body
    v = st.wait(lambda e: e["event"] == "verdict", timeout=30)["data"]
    assert v["request_id"] == body["request_id"] and v["verdict"] == body["verdict"]
    assert v["decide"] == body["decide"] and v["attempts"] == body["attempts"]
    assert "usage" not in v and "models" not in v
    req = st.wait(lambda e: e["event"] == "request" and e["data"]["pipeline"] == "ops", timeout=10)
    assert req["data"]["route"] == "pipeline" and req["data"]["status"] == 200
    assert assert_frames_keep_the_contract(st) >= {"verdict", "request"}
    st.close()


def test_status_shows_the_load_progress(serve_factory):
    s = serve_factory(config(budget="400MiB"))
    st = Stream(s.url)
    ask(s, B)
    models = {m["name"]: m for m in http_call("GET", s.url + "/v1/status")[1]["models"]}
    assert models[B]["progress"]["phase"] == "ready" and models[B]["progress"]["fraction"] == 1
    assert models[A]["progress"] is None
    loading = st.of("loading", B)
    assert all(e["data"]["elapsed_ms"] >= 0 for e in loading)
    fractions = [e["data"]["fraction"] for e in loading if e["data"]["fraction"] is not None]
    assert fractions == sorted(fractions) and all(0 <= f <= 1 for f in fractions), fractions
    st.close()


def decide_with_stderr_on(tandem_bin, cfg, tty):
    """Runs `tandem decide` with stderr on a pseudo-terminal (tty) or a pipe; its stderr."""
    args = [str(tandem_bin), "decide", "--config", str(cfg), "--pipeline", "ops", "--state",
            PIPELINE_REQUEST["state"], "--candidate", "a=one", "--candidate", "b=two"]
    if not tty:
        r = subprocess.run(args, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        return r.stderr
    master, slave = pty.openpty()
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    assert p.wait(timeout=300) == 0, out
    os.close(master)
    return out.decode(errors="replace")


def test_decide_shows_load_progress_on_a_terminal_only(serve_factory, tandem_bin):
    # 400 MiB holds one model at a time: each decide loads the decider, then the verifier
    s = serve_factory(pipeline_config(budget="400MiB"))
    seen = decide_with_stderr_on(tandem_bin, s.config, tty=True)
    assert re.search(r"\r\x1b\[Kloading (smollm2-decider|gemma3-decider): (spawn|reading weights|warmup)", seen), seen
    assert seen.rstrip().endswith("\x1b[K") or "answered by the daemon" in seen.split("\x1b[K")[-1]
    piped = decide_with_stderr_on(tandem_bin, s.config, tty=False)
    assert "\x1b" not in piped and "loading" not in piped, piped


def test_the_dashboard_files_need_no_key_and_revalidate_by_etag(serve_factory):
    s = serve_factory(config(extra="api_keys: [k-ui]"))
    u = urlparse(s.url)
    for path, file, ctype in (("/ui", "index.html", "text/html"),
                              ("/ui/app.js", "app.js", "text/javascript"),
                              ("/ui/app.css", "app.css", "text/css")):
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
        conn.request("GET", path)
        r = conn.getresponse()
        assert r.status == 200 and r.getheader("Content-Type").startswith(ctype), (path, r.status)
        assert r.read() == (ROOT / "ui" / file).read_bytes(), "served byte for byte"
        etag = r.getheader("ETag")
        assert r.getheader("Cache-Control") == "no-cache" and etag
        assert "default-src 'self'" in r.getheader("Content-Security-Policy")
        conn.request("GET", path, headers={"If-None-Match": etag})
        again = conn.getresponse()
        assert again.status == 304 and again.read() == b""
    conn.request("GET", "/ui/nope.js")
    missing = conn.getresponse()
    assert missing.status == 404 and "the dashboard is /ui" in json.loads(missing.read())["error"]["message"]
    conn.request("GET", "/v1/status")
    assert conn.getresponse().status == 401, "the data behind the page still needs the key"
