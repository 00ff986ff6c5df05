"""Engine failures that clients do not see: `tandem serve` resends an
idempotent request (System One, a pipeline stage, embeddings) once when its
engine dies before answering, fails it with 502 engine_failed when the
engine fails on it twice or the deadline leaves no time, and marks a model
that crash-loops failed (503 with the cause and a back-off).

The faults are real: the engine children are SIGSTOPped (so that a request
is in flight on them for as long as the test needs) and SIGKILLed. A new
engine is caught the moment it is forked, by watching tandem's children in
/proc, so a load can be killed before it finishes."""
import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from conftest import http
from test_pipeline import REQUEST
from test_serve import A, B, audit_lines, choice, config, error_shape, long_chat, wait_for


def children(pid):
    """The pids of a process's children, from /proc (every thread's list)."""
    kids = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            kids.update(int(p) for p in (task / "children").read_text().split())
        except OSError:
            pass  # the thread ended
    return kids


def catch_new_child(pid, known, timeout=30):
    """Waits for a child of pid not in known and SIGSTOPs it at once; returns its pid."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        new = children(pid) - known
        if new:
            child = new.pop()
            os.kill(child, signal.SIGSTOP)
            return child
        time.sleep(0.002)
    raise AssertionError("no new engine was started")


def in_background(fn, *args, **kwargs):
    """Runs fn in a thread; returns a function that joins it and gives its result."""
    out = {}
    t = threading.Thread(target=lambda: out.update(r=fn(*args, **kwargs)))
    t.start()

    def result(timeout=120):
        t.join(timeout)
        assert not t.is_alive(), "the request did not end"
        return out["r"]
    return result


def post(url, body, headers, timeout=120):
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def metric(s, name, **labels):
    text = http("GET", s.url + "/metrics")[1]
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


def stopped_engine(s, model=A):
    """Warms model, then SIGSTOPs its engine: a request sent now waits on it."""
    assert s.systemone(choice("warm", model))[0] == 200
    pid = s.model(model)["pid"]
    os.kill(pid, signal.SIGSTOP)
    return pid


def audit_of(s, request_id):
    wait_for(lambda: any(l["request_id"] == request_id for l in audit_lines(s)), timeout=10)
    return next(l for l in audit_lines(s) if l["request_id"] == request_id)


def test_a_decision_survives_an_engine_kill(serve_factory):
    s = serve_factory(config())
    pid = stopped_engine(s)
    answer = in_background(s.systemone, choice("resend me"), {"x-request-id": "kill-once"})
    time.sleep(0.3)  # the request is on the stopped engine
    os.kill(pid, signal.SIGKILL)
    status, body, headers = answer()
    assert status == 200, body
    assert body["answers"]["act"]["choice"] in ("reduce", "stop", "nothing")
    m = s.model(A)
    assert m["crashes"] == 1 and m["retries"] == 1 and m["pid"] != pid
    assert audit_of(s, "kill-once")["attempts"] == 2
    assert metric(s, "tandem_engine_retries_total", model=A, reason="crash") == 1
    assert "resending a request after an engine failure (crash)" in s.log()
    # an answer that needed no resend says so too
    assert s.systemone(choice("again"), {"x-request-id": "once"})[0] == 200
    assert audit_of(s, "once")["attempts"] == 1


def test_a_generation_is_not_resent(serve_factory):
    s = serve_factory(config())
    pid = stopped_engine(s)
    answer = in_background(long_chat, s.url, tokens=50)
    time.sleep(0.3)
    os.kill(pid, signal.SIGKILL)
    status, body = answer()
    assert status == 502, body
    error_shape(body, 502)
    assert body["error"]["type"] == "engine_failed"
    assert "signal 9" in body["error"]["message"] and "not resent" not in body["error"]["message"]
    assert s.model(A)["retries"] == 0


def test_an_engine_that_fails_twice_on_a_request_gives_502(serve_factory):
    s = serve_factory(config())
    pid = stopped_engine(s)
    known = children(s.proc.pid)
    answer = in_background(s.systemone, choice("poison"), {"x-request-id": "twice"})
    time.sleep(0.3)
    os.kill(pid, signal.SIGKILL)  # first failure: tandem restarts the engine to resend
    second = catch_new_child(s.proc.pid, known)
    os.kill(second, signal.SIGKILL)  # the restart dies while loading: second failure
    status, body, _ = answer()
    assert status == 502, body
    error_shape(body, 502)
    assert body["error"]["type"] == "engine_failed"
    assert "twice" in body["error"]["message"] and "signal 9" in body["error"]["message"]
    assert "while loading" in body["error"]["message"]
    assert s.model(A)["crashes"] == 2
    # the model is not broken: the next request loads it again
    assert s.systemone(choice("after"))[0] == 200


def test_a_load_that_crashes_once_keeps_its_queue(serve_factory):
    s = serve_factory(config())
    known = children(s.proc.pid)
    answer = in_background(s.systemone, choice("first load"))
    first = catch_new_child(s.proc.pid, known)
    os.kill(first, signal.SIGKILL)
    status, body, _ = answer()
    assert status == 200, body
    m = s.model(A)
    assert m["crashes"] == 1 and m["loads"] == 1 and m["state"] == "resident"


def test_no_resend_when_the_deadline_leaves_no_time(serve_factory):
    s = serve_factory(config())
    pid = stopped_engine(s)
    ready_ms = s.model(A)["swap"]["ready_ms"]
    # the kill comes 300 ms in; what is left of the deadline is a third of a load
    timeout = 300 + max(ready_ms // 3, 1)
    answer = in_background(s.systemone, choice("hurry"), {"X-Tandem-Timeout-Ms": str(timeout)})
    time.sleep(0.3)
    os.kill(pid, signal.SIGKILL)
    status, body, _ = answer()
    assert status in (502, 504), body
    if status == 502:  # 504 only if the machine stalled past the deadline before the kill
        assert body["error"]["type"] == "engine_failed"
        assert "restart would end after the request's deadline" in body["error"]["message"]
    assert s.model(A)["retries"] == 0


def test_a_pipeline_stage_is_resent(serve_factory):
    from test_pipeline import config as pipeline_config
    s = serve_factory(pipeline_config(tiny=True))
    warm = http("POST", s.url + "/v1/pipelines/ops", REQUEST, timeout=120)
    assert warm[0] == 200, warm
    pid = s.model(B)["pid"]
    os.kill(pid, signal.SIGSTOP)  # the verify stage waits on it
    answer = in_background(post, s.url + "/v1/pipelines/ops", REQUEST,
                           {"x-request-id": "pipe-kill", "Cache-Control": "no-cache"})
    # the kill comes once the verify stage holds B (the decide stage is a repeat, evaluated
    # whole: its time varies with the machine's load)
    deadline = time.time() + 60
    while s.model(B)["running"] != 1 and time.time() < deadline:
        time.sleep(0.05)
    assert s.model(B)["running"] == 1
    os.kill(pid, signal.SIGKILL)
    status, body = answer()
    assert status == 200, body
    assert body["verdict"] in ("accepted", "rejected", "escalated")
    assert audit_of(s, "pipe-kill")["attempts"] == 2
    assert s.model(B)["retries"] == 1


def test_a_crash_loop_marks_the_model_failed_then_it_recovers(serve_factory):
    s = serve_factory(config(limits="  max_restarts: 2"))
    assert s.systemone(choice("warm"))[0] == 200
    os.kill(s.model(A)["pid"], signal.SIGKILL)
    wait_for(lambda: s.model(A)["state"] == "unloaded")
    assert s.systemone(choice("reload"))[0] == 200  # one crash is no loop
    os.kill(s.model(A)["pid"], signal.SIGKILL)
    wait_for(lambda: s.model(A)["state"] == "failed")
    m = s.model(A)
    assert m["crashes_last_60s"] == 2 and 0 < m["retry_in_ms"] <= 2000
    status, body, headers = s.systemone(choice("refused"))
    assert status == 503, body
    error_shape(body, 503)
    assert "2 crashes within 60 s (limits.max_restarts)" in body["error"]["message"]
    assert "signal 9" in body["error"]["message"]
    assert 1 <= int(headers["Retry-After"]) <= 2
    assert metric(s, "tandem_model_failed", model=A) == 1
    assert metric(s, "tandem_rejections_total", model=A, reason="model_failed") == 1
    assert http("GET", s.url + "/health")[0] == 200  # the other model can still serve
    assert s.systemone(choice("other", B))[0] == 200
    time.sleep(int(headers["Retry-After"]) + 0.2)  # the back-off is over: it loads again
    assert s.systemone(choice("recovered"))[0] == 200
    assert s.model(A)["state"] == "resident" and metric(s, "tandem_model_failed", model=A) == 0
