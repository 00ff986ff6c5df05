"""The audit log under faults: its filesystem fills up (a real 64 KiB tmpfs,
mounted for the test), and `logs.audit_on_error` decides what the daemon does.

continue (the default) keeps answering; the lines wait in memory and land,
in order and whole, once space returns, with no request needed (the daemon
retries every second). fail refuses model requests (503, /health 503) while
lines wait, and admits again once they are written. Rotation under concurrent
clients loses no line, and a rotation that fails is a failed write like any
other."""
import json
import os
import subprocess
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import http
from test_serve import A, config, error_shape, wait_for

pytestmark = pytest.mark.quick  # in `make check` (docs/testing.md)


@pytest.fixture
def tiny_fs(tmp_path):
    """A 64 KiB tmpfs at tmp_path/auditfs (skipped where mounting is not permitted).
    Request it before serve_factory, so that the daemon stops before the unmount."""
    where = tmp_path / "auditfs"
    where.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)],
                              capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip("cannot mount a tmpfs here: no mount command")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield where
    subprocess.run(["umount", str(where)], check=True)


def fill(fs):
    """Writes a filler file until the filesystem is full; returns its path."""
    filler = fs / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"x" * 512):
            pass
    except OSError:
        pass  # ENOSPC: full
    finally:
        os.close(fd)
    return filler


PAD = "p" * 1000  # with logs.bodies, a line of about 1.2 KiB: the third crosses a page


def ask(s, rid):
    """One audited model request (a one-token completion: cheap on a CPU), as
    (status, parsed body, headers)."""
    body = json.dumps({"model": A, "prompt": f"request {rid}", "max_tokens": 1,
                       "user": PAD}).encode()
    req = urllib.request.Request(s.url + "/v1/completions", body,
                                 {"Content-Type": "application/json", "x-request-id": rid})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), dict(e.headers)


def lines_of(path):
    """Every line of the log (and its rotations), oldest first; a torn line
    fails json.loads or the newline check."""
    files = sorted(Path(path).parent.glob(Path(path).name + "*"),
                   key=lambda p: -int(p.suffix[1:]) if p.suffix[1:].isdigit() else 0)
    texts = [p.read_text() for p in files]
    assert all(t.endswith("\n") for t in texts if t), "a torn last line"
    return [json.loads(l) for t in texts for l in t.splitlines()]


def metric_value(s, name, label=""):
    """The value of the series name{...label...} (label: one 'k="v"'), or None."""
    for line in http("GET", s.url + "/metrics")[1].splitlines():
        series, _, value = line.rpartition(" ")
        if series.split("{")[0] == name and label in series:
            return float(value)
    return None


def test_continue_serves_through_a_full_disk_and_loses_no_line(tiny_fs, serve_factory):
    audit = tiny_fs / "audit.jsonl"
    s = serve_factory(config(), logs=f"  audit: {audit}\n  bodies: true\n")
    assert ask(s, "before")[0] == 200
    filler = fill(tiny_fs)
    n = 12  # the log's last page has room for a line or two, then one is cut short
    for i in range(n):
        assert ask(s, f"full-{i}")[0] == 200
    assert len(lines_of(audit)) < 5  # whole lines only, even while full
    assert metric_value(s, "tandem_audit_errors_total") >= 5
    st = s.status()["audit"]
    assert st["state"] == "failing" and st["pending_lines"] >= 5 and st["dropped"] == 0
    assert "No space left on device" in st["last_error"]
    assert "audit log failing" in s.log() and s.log().count("audit log failing") == 1
    filler.unlink()
    # no request needed: the daemon retries the waiting lines every second
    wait_for(lambda: audit.read_text().count('"request_id":"full-') == n, timeout=10)
    assert ask(s, "after")[0] == 200
    ids = [l["request_id"] for l in lines_of(audit)]
    assert ids[0] == "before" and ids[-1] == "after"
    assert [i for i in ids if i.startswith("full-")] == [f"full-{i}" for i in range(n)]
    assert s.status()["audit"]["state"] == "ok" and "audit log recovered" in s.log()
    assert metric_value(s, "tandem_audit_dropped_total") == 0


def test_fail_refuses_while_lines_wait_then_recovers(tiny_fs, serve_factory):
    audit = tiny_fs / "audit.jsonl"
    s = serve_factory(config(), logs=f"  audit: {audit}\n  bodies: true\n"
                                     "  audit_on_error: fail\n")
    assert ask(s, "before")[0] == 200
    filler = fill(tiny_fs)
    answered = []
    for i in range(10):  # the log's last page takes a line or two; then a write fails
        status, body, headers = ask(s, f"full-{i}")
        if status != 200:
            break
        answered.append(f"full-{i}")
    assert status == 503, body
    error_shape(body, 503)
    assert body["error"]["type"] == "unavailable_error"
    msg = body["error"]["message"]
    assert "audit log cannot be written" in msg and str(audit) in msg, msg
    assert "No space left on device" in msg
    assert headers["Retry-After"] == "1"
    assert len(answered) < 5 and metric_value(s, "tandem_audit_errors_total") >= 1
    assert http("GET", s.url + "/health")[0] == 503
    assert http("GET", s.url + "/livez")[0] == 200
    assert metric_value(s, "tandem_rejections_total", 'reason="audit_log"') == 1
    filler.unlink()
    wait_for(lambda: http("GET", s.url + "/health")[0] == 200, timeout=10)
    assert ask(s, "after")[0] == 200
    seen = [(l["request_id"], l["status"]) for l in lines_of(audit)]
    assert seen == ([("before", 200)] + [(i, 200) for i in answered]
                    + [(f"full-{len(answered)}", 503), ("after", 200)])


def get_models(s, rid):
    req = urllib.request.Request(s.url + "/v1/models", headers={"x-request-id": rid})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status


def test_rotation_under_concurrent_clients_loses_no_line(serve_factory, tmp_path):
    audit = tmp_path / "rot" / "audit.jsonl"
    s = serve_factory(config(), logs=f"  audit: {audit}\n  audit_max: 2KiB\n  audit_keep: 1000\n")
    answered = []

    def client(k):
        for i in range(25):
            if get_models(s, f"c{k}-{i}") == 200:
                answered.append(f"c{k}-{i}")

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(answered) == 100
    ids = [l["request_id"] for l in lines_of(audit)]
    assert sorted(ids) == sorted(answered)
    for k in range(4):  # each client's lines in the order it sent them, across the files
        assert [i for i in ids if i.startswith(f"c{k}-")] == [f"c{k}-{i}" for i in range(25)]
    assert len(list(audit.parent.glob("audit.jsonl.*"))) >= 5  # it did rotate, many times


def test_a_failed_rotation_is_a_failed_write(serve_factory, tmp_path):
    audit = tmp_path / "rot" / "audit.jsonl"
    blocker = tmp_path / "rot" / "audit.jsonl.1"
    blocker.mkdir(parents=True)  # rename(audit.jsonl, audit.jsonl.1) fails: EISDIR
    s = serve_factory(config(), logs=f"  audit: {audit}\n  audit_max: 4KiB\n  audit_keep: 1\n")
    sent = []
    while not metric_value(s, "tandem_audit_errors_total"):  # until a rotation is due
        sent.append(f"r-{len(sent)}")
        assert get_models(s, sent[-1]) == 200
        assert len(sent) < 100
    for _ in range(3):  # served on (continue); the lines wait
        sent.append(f"r-{len(sent)}")
        assert get_models(s, sent[-1]) == 200
    st = http("GET", s.url + "/v1/status")[1]["audit"]  # its own line then waits too
    assert st["state"] == "failing" and st["pending_lines"] == 4, st
    assert "Is a directory" in st["last_error"]
    blocker.rmdir()
    # the 1 s retry rotates, then writes the waiting lines in order (keep 1: no second rotation)
    wait_for(lambda: audit.exists() and audit.read_text().count("\n") == 5, timeout=10)
    ids = [l["request_id"] for l in lines_of(audit)]
    assert [i for i in ids if i.startswith("r-")] == sent
    assert http("GET", s.url + "/v1/status")[1]["audit"]["state"] == "ok"
    assert metric_value(s, "tandem_audit_dropped_total") == 0
