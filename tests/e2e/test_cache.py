"""The decision cache end to end (src/serve/dcache.c, docs/serve.md, Decision
cache): an exact repeat of a System One decision, or of a pipeline's stage, is
answered from tandem's memory with the engine's own bytes; identical
decisions in flight are evaluated once; a changed model file, a SIGHUP that
changes a model's settings and POST /admin/cache/clear drop what was kept;
`Cache-Control`, `cache: false` and `determinism: relaxed` opt out; the cap
holds under a flood.

"Evaluated" is always checked on the engine's side too: the model's
`answered` count in /v1/status grows by one per job an engine answered, and
never for an answer from the cache or from an identical request in flight.

One daemon serves the tests that can share it; the cap, the host RAM budget,
a cache of 0 bytes and a change of the default model get daemons of their own. Every engine is a tiny fixture on one
thread (kev-tiny, laya-tiny) except SmolLM2, the openjev kind, which the
byte-identity test needs. Engines are held mid-request with SIGSTOP, so that
requests meet in flight however loaded the machine is, and killed with
SIGKILL (test_retry.py does the same)."""
import itertools
import json
import os
import re
import shutil
import signal
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import SANITIZER_REPORT, Serve, fixture_path, http
from test_deciders import MIXED, answers_json
from test_determinism import value_bytes
from test_pipeline import REQUEST as PIPELINE_REQUEST

TIMEOUT = 120  # per request: other jobs share this machine's two cores

LAYA_KEYS = "    ctx: 512\n    batch: 512\n    ubatch: 512\n    threads: 1\n"
KEV_KEYS = "    ctx: 512\n    threads: 1\n"

# a one-question decision: the cheapest request that still has an answer
CHOICE = {"act": {"type": "choice", "instructions": "What should the operator do?",
                  "criteria": {"reduce": "reduce concurrency", "stop": "stop non-critical jobs",
                               "nothing": "change nothing"}}}


def decision(model, state, questions=CHOICE):
    return {"model": model, "state": state, "questions": questions}


def post(url, body, headers=None, timeout=TIMEOUT):
    """(status, raw body bytes, headers) of one POST of body (a dict, or bytes as they are)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data, {"Content-Type": "application/json",
                                             **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def ask(s, body, headers=None, expect="any"):
    """One /v1/systemone decision that must answer 200; returns (raw body, x-tandem-cache
    or None). expect: the x-tandem-cache value it must have ("any": no check)."""
    status, raw, h = post(s.url + "/v1/systemone", body, headers)
    assert status == 200, (status, raw[:600])
    got = h.get("x-tandem-cache")
    if expect != "any":
        assert got == expect, f"x-tandem-cache {got!r}, expected {expect!r}: {raw[:300]}"
    return raw, got


def spliced(raw):
    """What a hit must send for an engine's answer raw: "cached": true as its first member."""
    assert raw.startswith(b'{"') and b'"cached"' not in raw, raw[:200]
    return b'{"cached":true,' + raw[1:]


def model_status(s, name):
    return next(m for m in s.status()["models"] if m["name"] == name)


def counts(s, name):
    """Model name's cache counters and its engine's answered, loads and pid."""
    m = model_status(s, name)
    return {**m["cache"], "answered": m["answered"], "loads": m["loads"], "pid": m["pid"]}


def delta(after, before):
    return {k: after[k] - before[k] for k in after
            if isinstance(after[k], int) and not isinstance(after[k], bool) and k != "pid"}


def wait_for(cond, timeout=60, what="condition"):
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, f"{what}: not reached in {timeout} s"
        time.sleep(0.02)


def audit_of(s, request_id):
    def lines():
        return [json.loads(x) for x in s.audit.read_text().splitlines() if x.strip()]
    wait_for(lambda: any(x["request_id"] == request_id for x in lines()), 10,
             f"audit line of {request_id}")
    return next(x for x in lines() if x["request_id"] == request_id)


def rid(tag):
    return {"x-request-id": f"{tag}-{time.monotonic_ns()}"}


def stop_clean(s):
    code = s.stop()
    assert code == 0, f"tandem serve exited {code}: {s.log()[-2000:]}"
    assert not SANITIZER_REPORT.search(s.log()), s.log()[-4000:]


def in_background(fn, *args, **kwargs):
    """Runs fn in a thread; returns a function that joins it and gives its result."""
    out = {}

    def target():
        try:
            out["r"] = fn(*args, **kwargs)
        except BaseException as e:  # handed to the test's thread below
            out["e"] = e
    t = threading.Thread(target=target)
    t.start()

    def result(timeout=TIMEOUT):
        t.join(timeout)
        assert not t.is_alive(), "the request did not end"
        if "e" in out:
            raise out["e"]
        return out["r"]
    return result


def together(n, fn):
    """Starts n threads that call fn() at once (a barrier); returns a join for their results."""
    barrier = threading.Barrier(n)

    def one():
        barrier.wait(30)
        return fn()
    joins = [in_background(one) for _ in range(n)]
    return lambda: [j() for j in joins]


def stopped(s, name):
    """Warms model name, then SIGSTOPs its engine: a request sent now waits on it."""
    ask(s, decision(name, f"warm {name} {time.monotonic_ns()}"))
    pid = model_status(s, name)["pid"]
    os.kill(pid, signal.SIGSTOP)
    return pid


def catch_engine_start(pid, known, timeout=30):
    """SIGSTOPs the first new child of pid once it runs the engine (not before its exec:
    the spawn holds the daemon until then); returns its pid."""
    from test_retry import children
    deadline = time.time() + timeout
    while time.time() < deadline:
        for child in children(pid) - known:
            try:
                if "llama" in os.readlink(f"/proc/{child}/exe"):
                    os.kill(child, signal.SIGSTOP)
                    return child
            except OSError:
                pass  # gone, or not readable yet
        time.sleep(0.001)
    raise AssertionError("no engine was started")


def replace_file(path, src):
    """Puts a fresh copy of src at path (a new inode), as an upgrade would."""
    tmp = path.with_suffix(".new")
    shutil.copyfile(src, tmp)
    os.replace(tmp, path)


# --- the shared daemon ------------------------------------------------------------------------

PIPELINES = """pipelines:
  ops:
    decide:
      model: kev
      instructions: Which response should the operator take now?
    verify:
      - model: laya
        questions:
          consistent:
            type: noul
            instructions: Is "{{candidates[decide.choice]}}" consistent with the situation?
    verdict:
      thresholds:
        consistent: ">= 0"
  ops2:
    decide:
      model: kev
      instructions: Which response should the operator take now?
    verify:
      - model: laya
        questions:
          risky:
            type: noul
            instructions: Is "{{candidates[decide.choice]}}" risky?
    verdict:
      thresholds:
        risky: ">= 0"
"""


def shared_config(tmp, hup_ctx=512):
    laya, kev = fixture_path("laya-tiny.gguf"), fixture_path("kev-tiny.gguf")
    text = (f"limits:\n  request_timeout: {TIMEOUT}s\nmodels:\n"
            f"  smollm2:\n    path: {fixture_path('smollm2-decider.gguf')}\n{KEV_KEYS}"
            f"  kev:\n    path: {kev}\n{KEV_KEYS}"
            f"  laya:\n    path: {laya}\n{LAYA_KEYS}"
            f"  laya-file:\n    path: {tmp / 'laya-file.gguf'}\n{LAYA_KEYS}"
            f"  laya-busy:\n    path: {tmp / 'laya-busy.gguf'}\n{LAYA_KEYS}"
            f"  laya-load:\n    path: {tmp / 'laya-load.gguf'}\n{LAYA_KEYS}"
            f"  laya-hup:\n    path: {laya}\n{LAYA_KEYS.replace('ctx: 512', f'ctx: {hup_ctx}')}"
            f"  laya-off:\n    path: {laya}\n{LAYA_KEYS}    cache: false\n"
            f"  laya-relaxed:\n    path: {laya}\n{LAYA_KEYS}    parallel: 2\n"
            f"    determinism: relaxed\n")
    return text + PIPELINES


@pytest.fixture(scope="module")
def daemon(tandem_bin, tmp_path_factory):
    """laya-file, laya-busy and laya-load read copies of laya-tiny in the daemon's folder, which
    the tests replace; the others read the fixtures."""
    tmp = tmp_path_factory.mktemp("cache")
    for name in ("laya-file", "laya-busy", "laya-load"):
        shutil.copyfile(fixture_path("laya-tiny.gguf"), tmp / f"{name}.gguf")
    s = Serve(tandem_bin, tmp, shared_config(tmp))
    s.tmp = tmp
    yield s
    stop_clean(s)


# --- 1. a hit is the miss's bytes -------------------------------------------------------------

@pytest.mark.parametrize("model", ["smollm2", "kev", "laya"])
def test_a_hit_is_byte_identical_to_the_miss(daemon, model):
    """openjev (SmolLM2), Kev and Laya: the same request twice; the second is
    answered from memory with the first's body and "cached": true first."""
    body = {"model": model, **MIXED, "state": f"{MIXED['state']} (byte identity, {model})"}
    before = counts(daemon, model)
    miss_id, hit_id = rid("miss"), rid("hit")
    raw_miss, _ = ask(daemon, body, miss_id, expect="miss")
    raw_hit, _ = ask(daemon, body, hit_id, expect="hit")
    assert "cached" not in json.loads(raw_miss)
    assert json.loads(raw_hit)["cached"] is True
    assert answers_json(raw_hit) == answers_json(raw_miss)
    assert value_bytes(raw_hit, "answers") == value_bytes(raw_miss, "answers")
    assert raw_hit == spliced(raw_miss), "a hit must be the engine's body with the mark spliced in"
    # the key is the canonical text: the same members, pretty-printed, are the same request
    pretty, _ = ask(daemon, json.dumps(body, indent=2).encode(), expect="hit")
    assert pretty == raw_hit
    d = delta(counts(daemon, model), before)
    assert d["answered"] == 1, f"the engine evaluated {d['answered']} times for a miss and a hit"
    assert (d["misses"], d["hits"], d["entries"]) == (1, 2, 1), d
    assert audit_of(daemon, miss_id["x-request-id"])["cache"] == "miss"
    hit_line = audit_of(daemon, hit_id["x-request-id"])
    assert hit_line["cache"] == "hit" and hit_line["status"] == 200
    if model == "smollm2":
        return  # the rest costs a SmolLM2 evaluation and shows nothing new
    # the same decision worded in another member order is another request: evaluated again
    reordered = {"questions": body["questions"], "state": body["state"], "model": model}
    raw_other, _ = ask(daemon, reordered, expect="miss")
    assert value_bytes(raw_other, "answers") == value_bytes(raw_miss, "answers")


def pipeline_post(s, path, body, headers=None):
    status, raw, h = post(s.url + path, body, headers)
    assert status == 200, raw[:600]
    return raw, h.get("x-tandem-cache")


def per_request_free(raw):
    """A pipeline's verdict without what belongs to one request (its id, its timing)."""
    doc = json.loads(raw)
    for k in ("request_id", "timing"):
        doc.pop(k)
    return doc


VERDICT_KEYS = ("verdict", "choice", "reason", "decide", "attempts", "models", "usage")


def test_a_pipeline_is_cached_stage_by_stage(daemon):
    body = {**PIPELINE_REQUEST, "state": PIPELINE_REQUEST["state"] + " (pipeline cache)"}
    before = {m: counts(daemon, m) for m in ("kev", "laya")}
    first, h1 = pipeline_post(daemon, "/v1/pipelines/ops", body, rid("pipe-miss"))
    mid = {m: counts(daemon, m) for m in ("kev", "laya")}
    hit_id = rid("pipe-hit")
    again, h2 = pipeline_post(daemon, "/v1/pipelines/ops", body, hit_id)
    after = {m: counts(daemon, m) for m in ("kev", "laya")}
    assert (h1, h2) == ("miss", "hit")
    stages = [[x.get("cache") for x in json.loads(r)["timing"]["stages"]] for r in (first, again)]
    assert stages == [["miss", "miss"], ["hit", "hit"]], stages
    assert json.loads(first)["verdict"] == "accepted"
    assert per_request_free(again) == per_request_free(first)
    for k in VERDICT_KEYS:
        assert value_bytes(again, k) == value_bytes(first, k), k
    assert {m: delta(mid[m], before[m])["answered"] for m in mid} == {"kev": 1, "laya": 1}
    assert {m: delta(after[m], mid[m])["answered"] for m in mid} == {"kev": 0, "laya": 0}, \
        "a pipeline whose every stage hit reached an engine"
    assert audit_of(daemon, hit_id["x-request-id"])["cache"] == "hit"

    # System One with model pipelines/ops asks the same stages: all hit
    question = {"act": {"type": "choice", "instructions": "Which response should the operator "
                        "take now?", "criteria": body["candidates"]}}
    s1, h3 = pipeline_post(daemon, "/v1/systemone", {"model": "pipelines/ops",
                                                     "state": body["state"],
                                                     "questions": question})
    assert h3 == "hit", h3
    assert value_bytes(s1, "attempts") == value_bytes(first, "attempts")
    # another pipeline with the same decide stage and another verify stage: partial
    other, h4 = pipeline_post(daemon, "/v1/pipelines/ops2", body)
    assert h4 == "partial", h4
    assert [x.get("cache") for x in json.loads(other)["timing"]["stages"]] == ["hit", "miss"]
    assert value_bytes(other, "decide") == value_bytes(first, "decide")


def test_no_cache_on_a_pipeline_model_evaluates_its_stages(daemon):
    """/v1/systemone takes Cache-Control (docs/openapi.yaml), whatever its model: with
    model pipelines/NAME and no-cache, every stage is evaluated, none read from memory."""
    state = PIPELINE_REQUEST["state"] + " (no-cache pipeline)"
    question = {"act": {"type": "choice", "instructions": "Which response should the operator "
                        "take now?", "criteria": PIPELINE_REQUEST["candidates"]}}
    body = {"model": "pipelines/ops", "state": state, "questions": question}
    assert pipeline_post(daemon, "/v1/systemone", body)[1] == "miss"
    assert pipeline_post(daemon, "/v1/systemone", body)[1] == "hit"
    before = {m: counts(daemon, m) for m in ("kev", "laya")}
    raw, header = pipeline_post(daemon, "/v1/systemone", body, {"Cache-Control": "no-cache"})
    d = {m: delta(counts(daemon, m), before[m]) for m in before}
    stages = [x.get("cache") for x in json.loads(raw)["timing"]["stages"]]
    assert {m: d[m]["answered"] for m in d} == {"kev": 1, "laya": 1} and "hit" not in stages, (
        f"Cache-Control: no-cache on a pipeline model was answered from the cache: "
        f"x-tandem-cache {header}, stages {stages}, engine answers {d}")
    assert header != "hit"


def test_a_hit_needs_no_engine(daemon):
    body = decision("kev", "hit while unloaded")
    raw, _ = ask(daemon, body)
    status, reply = http("POST", daemon.url + "/admin/models/kev/unload")
    assert status in (200, 202), reply
    wait_for(lambda: model_status(daemon, "kev")["state"] == "unloaded", what="kev unloaded")
    loads = model_status(daemon, "kev")["loads"]
    assert ask(daemon, body, expect="hit")[0] == spliced(raw)
    m = model_status(daemon, "kev")
    assert m["state"] == "unloaded" and m["loads"] == loads, "a hit loaded the engine"


# --- 2. invalidation --------------------------------------------------------------------------

def test_a_replaced_model_file_is_noticed_at_the_next_lookup(daemon):
    name, path = "laya-file", daemon.tmp / "laya-file.gguf"
    bodies = [decision(name, f"file change {i}") for i in range(2)]
    first = [ask(daemon, b, expect="miss")[0] for b in bodies]
    assert [ask(daemon, b, expect="hit")[0] for b in bodies] == [spliced(r) for r in first]
    before = counts(daemon, name)
    assert before["entries"] == 2

    for how in ("replaced", "touched"):
        if how == "replaced":
            replace_file(path, fixture_path("laya-tiny.gguf"))  # a new inode, the same bytes
        else:
            st = os.stat(path)
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
        raw, _ = ask(daemon, bodies[0], expect="miss")
        after = counts(daemon, name)
        d = delta(after, before)
        assert d["invalidations"] == before["entries"], (how, d)
        assert d["loads"] == 1 and after["pid"] != before["pid"], \
            f"file {how}: the engine was not started again on the new file: {d}"
        assert d["answered"] == 1, d
        assert value_bytes(raw, "answers") == value_bytes(first[0], "answers"), \
            "the same bytes on disk must give the same answers"
        assert after["entries"] == 1, "the other decision must have been dropped with it"
        ask(daemon, bodies[1], expect="miss")
        ask(daemon, bodies[0], expect="hit")  # kept again once the new file is loaded
        before = counts(daemon, name)
        assert before["loads"] == after["loads"], "a load per request after the change"


def test_a_file_changed_while_its_engine_is_busy_is_loaded_once_the_engine_is_free(daemon):
    """The lookup that notices the change cannot stop a busy engine. Once that
    engine is free, a request must still load the new file (and be kept again):
    the old engine must not go on answering from the file that was replaced."""
    name, path = "laya-busy", daemon.tmp / "laya-busy.gguf"
    ask(daemon, decision(name, "busy: cached before"), expect="miss")
    ask(daemon, decision(name, "busy: cached before"), expect="hit")
    pid = stopped(daemon, name)
    before = counts(daemon, name)
    try:
        running = in_background(ask, daemon, decision(name, "busy: on the engine"))
        wait_for(lambda: model_status(daemon, name)["running"] == 1, what="running")
        replace_file(path, fixture_path("laya-tiny.gguf"))
        noticed = in_background(ask, daemon, decision(name, "busy: notices the change"))
        wait_for(lambda: counts(daemon, name)["invalidations"] > before["invalidations"],
                 what="the change noticed")
        wait_for(lambda: model_status(daemon, name)["queued"] == 1, what="queued")
    finally:
        os.kill(pid, signal.SIGCONT)
    running()
    noticed()
    wait_for(lambda: model_status(daemon, name)["running"] == 0, what="idle")
    body = decision(name, "busy: after the change")
    first, _ = ask(daemon, body)
    again, header = ask(daemon, body)
    after = counts(daemon, name)
    assert after["pid"] != pid and after["loads"] > before["loads"], (
        f"{name}'s file was replaced while its engine was busy; the engine is free now, "
        f"yet the same engine (pid {pid}, loads {after['loads']}) still answers from the old "
        f"file, and nothing is kept again: {after}")
    assert header == "hit", f"the decision after the change is never kept: {after}"
    assert again == spliced(first)


def test_a_file_changed_while_its_engine_loads_is_loaded_again_once_the_engine_is_free(daemon):
    """The change is noticed while the engine loads: what it loaded is unknown, so
    nothing it answers is kept; once it is free, a request must load the file again
    and be kept, or the model is never cached again."""
    from test_retry import children
    name, path = "laya-load", daemon.tmp / "laya-load.gguf"
    assert model_status(daemon, name)["state"] == "unloaded"
    known = children(daemon.proc.pid)
    first = in_background(ask, daemon, decision(name, "load: starts the engine"))
    child = catch_engine_start(daemon.proc.pid, known)
    try:
        assert model_status(daemon, name)["state"] == "loading"
        replace_file(path, fixture_path("laya-tiny.gguf"))
        noticed = in_background(ask, daemon, decision(name, "load: notices the change"))
        wait_for(lambda: counts(daemon, name)["misses"] == 2, what="the second lookup")
    finally:
        os.kill(child, signal.SIGCONT)
    first()
    noticed()
    body = decision(name, "load: after the change")
    ask(daemon, body)
    again, header = ask(daemon, body)
    after = counts(daemon, name)
    assert header == "hit", (
        f"{name}'s file was replaced while its engine loaded; the engine (pid {child}) is free "
        f"now, yet it was never started again and nothing is kept: {after}")


def test_a_sighup_that_changes_a_models_settings_drops_its_entries(daemon):
    hup, other = decision("laya-hup", "hup: dropped"), decision("kev", "hup: kept")
    for body in (hup, other):
        ask(daemon, body, expect="miss")
        ask(daemon, body, expect="hit")
    original = daemon.config.read_text()
    prefix = original.split("limits:")[0]
    daemon.config.write_text(prefix + shared_config(daemon.tmp, hup_ctx=1024))
    try:
        seen = daemon.log().count("its cached decisions were dropped")
        daemon.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: daemon.log().count("its cached decisions were dropped") > seen, 30,
                 "the SIGHUP's line")
    finally:
        daemon.config.write_text(original)
    log = daemon.log()
    assert "SIGHUP: laya-hup changed: its cached decisions were dropped" in log, log[-2000:]
    assert "restart tandem to apply" in log
    assert "kev changed" not in log
    assert model_status(daemon, "laya-hup")["cache"]["entries"] == 0
    ask(daemon, hup, expect="miss")
    ask(daemon, other, expect="hit")  # another model's entries stay


def test_admin_clear_drops_one_models_entries_or_all(daemon):
    kev, laya = decision("kev", "clear: kev"), decision("laya", "clear: laya")
    for body in (kev, laya):
        ask(daemon, body)
        ask(daemon, body, expect="hit")
    held = counts(daemon, "kev")["entries"]
    status, reply = http("POST", daemon.url + "/admin/cache/clear?model=kev")
    assert status == 200 and reply == {"cleared": held, "model": "kev"}, reply
    assert counts(daemon, "kev")["entries"] == 0
    ask(daemon, kev, expect="miss")
    ask(daemon, laya, expect="hit")

    total = daemon.status()["cache"]
    assert total["entries"] >= 2
    status, reply = http("POST", daemon.url + "/admin/cache/clear")
    assert status == 200 and reply == {"cleared": total["entries"], "model": None}, reply
    after = daemon.status()["cache"]
    assert (after["entries"], after["bytes"]) == (0, 0), after
    assert after["invalidations"] - total["invalidations"] == total["entries"]
    ask(daemon, kev, expect="miss")
    ask(daemon, laya, expect="miss")

    status, reply = http("POST", daemon.url + "/admin/cache/clear?model=nope")
    assert status == 404, reply
    assert reply["error"]["type"] == "model_not_found" and reply["error"]["param"] == "model"
    assert daemon.status()["cache"]["entries"] == 2, "a refused clear dropped entries"


# --- 3. opt-outs ------------------------------------------------------------------------------

def test_no_cache_bypasses_the_lookup_and_the_engine_evaluates(daemon):
    body = decision("kev", "bypass: looked up")
    raw_miss, _ = ask(daemon, body, expect="miss")
    before = counts(daemon, "kev")
    bypass_id = rid("bypass")
    raw, _ = ask(daemon, body, {"Cache-Control": "no-cache", **bypass_id}, expect="bypass")
    d = delta(counts(daemon, "kev"), before)
    assert d["answered"] == 1, "Cache-Control: no-cache was answered without the engine"
    assert (d["bypasses"], d["misses"], d["hits"]) == (1, 0, 0), d
    assert raw == raw_miss, "a bypass is the engine's own answer, unmarked"
    line = audit_of(daemon, bypass_id["x-request-id"])
    assert line["cache"] == "bypass" and line["attempts"] == 1
    ask(daemon, body, expect="hit")

    # a bypass's answer is kept; with no-store it is not, nor is a plain no-store miss
    kept, gone, gone2 = (decision("kev", f"bypass: {x}") for x in ("kept", "no-store", "miss"))
    ask(daemon, kept, {"Pragma": "no-cache"}, expect="bypass")
    ask(daemon, kept, expect="hit")
    ask(daemon, gone, {"Cache-Control": "No-Cache, no-store"}, expect="bypass")
    ask(daemon, gone, expect="miss")
    ask(daemon, gone2, {"Cache-Control": "max-age=0, no-store"}, expect="miss")
    before = counts(daemon, "kev")
    ask(daemon, gone2, expect="miss")
    assert delta(counts(daemon, "kev"), before)["answered"] == 1


@pytest.mark.parametrize("model", ["laya-off", "laya-relaxed"])
def test_an_uncached_model_is_always_evaluated(daemon, model):
    """cache: false, and determinism: relaxed (answers may move with the load)."""
    body = decision(model, "never cached")
    before = counts(daemon, model)
    ids = [rid(model) for _ in range(3)]
    raws = [ask(daemon, body, i, expect=None)[0] for i in ids]
    after = model_status(daemon, model)
    assert after["answered"] - before["answered"] == 3, "a request was not evaluated"
    assert after["cache"]["enabled"] is False
    assert {k: v for k, v in after["cache"].items() if k != "enabled"} == \
        {k: 0 for k in after["cache"] if k != "enabled"}, after["cache"]
    assert all(b'"cached"' not in r for r in raws)
    assert all("cache" not in audit_of(daemon, i["x-request-id"]) for i in ids)
    assert model_status(daemon, "laya")["cache"]["enabled"] is True


def metric_samples(s):
    out = {}
    for family in text_string_to_metric_families(http("GET", s.url + "/metrics")[1]):
        for sample in family.samples:
            if sample.name.startswith("tandem_cache_"):
                out[(sample.name, sample.labels.get("model"))] = sample.value
    return out


def test_status_and_metrics_count_the_same(daemon):
    body = decision("kev", "metrics")
    ask(daemon, body)
    ask(daemon, body, expect="hit")
    status = daemon.status()
    samples = metric_samples(daemon)
    counters = {"entries", "bytes", "hits", "misses", "coalesced", "bypasses", "evictions",
                "invalidations"}
    assert set(status["cache"]) == counters | {"max_bytes"}, status["cache"]
    assert all(set(m["cache"]) == counters | {"enabled"} for m in status["models"])
    total = {k: 0 for k in status["cache"] if k != "max_bytes"}
    assert status["cache"]["max_bytes"] == 64 << 20  # the default
    for m in status["models"]:
        c = m["cache"]
        for k in ("hits", "misses", "coalesced", "bypasses", "evictions", "invalidations"):
            assert samples.get((f"tandem_cache_{k}_total", m["name"]), 0) == c[k], (m["name"], k)
        assert samples.get(("tandem_cache_entries", m["name"]), 0) == c["entries"]
        assert samples.get(("tandem_cache_bytes", m["name"]), 0) == c["bytes"]
        for k in total:
            total[k] += c[k]
    assert total == {k: v for k, v in status["cache"].items() if k != "max_bytes"}
    assert status["cache"]["hits"] >= 1 and samples[("tandem_cache_hits_total", "kev")] >= 1


def test_a_hit_is_only_ever_the_routed_models_own_answer(serve_factory):
    """la and lb are two models of one file with the same settings. A request that names
    no model goes to the default one; after a SIGHUP makes lb the default, it must be
    lb's answer, not the one la's cache holds for the same text."""
    def config(default):
        return (f"defaults:\n  model: {default}\nmodels:\n"
                + "".join(f"  {m}:\n    path: {fixture_path('laya-tiny.gguf')}\n{LAYA_KEYS}"
                          for m in ("la", "lb")))
    s = serve_factory(config("la"))
    body = {"state": "which model answers?", "questions": CHOICE}
    raw, _ = ask(s, body, expect="miss")
    assert json.loads(raw)["model"] == "la"
    s.config.write_text(s.config.read_text().split("defaults:")[0] + config("lb"))
    s.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "SIGHUP: reloaded" in s.log(), 30, "the reload")
    status, raw, h = post(s.url + "/v1/systemone", body)
    assert status == 200 and h.get("X-Tandem-Model") == "lb", raw[:300]
    assert json.loads(raw)["model"] == "lb", (
        f"a request routed to lb (X-Tandem-Model: lb, x-tandem-cache: "
        f"{h.get('x-tandem-cache')}) got la's cached answer: {raw[:120]}")
    assert model_status(s, "lb")["answered"] == 1


# --- 4. identical requests in flight ----------------------------------------------------------

def test_identical_requests_in_flight_are_evaluated_once(daemon):
    name = "laya"
    body = decision(name, "eight at once", MIXED["questions"])
    pid = stopped(daemon, name)
    before = counts(daemon, name)
    tag, seq = f"eight-{time.monotonic_ns()}", itertools.count()
    try:
        join = together(8, lambda: post(daemon.url + "/v1/systemone", body,
                                        {"x-request-id": f"{tag}-{next(seq)}"}))
        wait_for(lambda: delta(counts(daemon, name), before)["coalesced"] == 7
                 and delta(counts(daemon, name), before)["misses"] == 1, 60,
                 "one leader and seven waiting")
        assert model_status(daemon, name)["running"] == 1
    finally:
        os.kill(pid, signal.SIGCONT)
    results = join()
    assert [st for st, _, _ in results] == [200] * 8, [r[1][:300] for r in results]
    headers = sorted(h.get("x-tandem-cache") for _, _, h in results)
    assert headers == ["coalesced"] * 7 + ["miss"], headers
    assert len({raw for _, raw, _ in results}) == 1, "identical requests got different bodies"
    d = delta(counts(daemon, name), before)
    assert d["answered"] == 1, f"8 identical requests in flight cost {d['answered']} evaluations"
    assert (d["misses"], d["coalesced"], d["entries"]) == (1, 7, 1), d
    assert sorted(audit_of(daemon, f"{tag}-{i}")["cache"] for i in range(8)) == \
        ["coalesced"] * 7 + ["miss"]
    assert ask(daemon, body, expect="hit")[0] == spliced(results[0][1])


def test_identical_pipelines_in_flight_evaluate_each_stage_once(daemon):
    """Four identical pipelines, sent one after another while the first one's decide
    stage is on its engine: the three wait for it, and then for one verify stage."""
    body = {**PIPELINE_REQUEST, "state": PIPELINE_REQUEST["state"] + " (four pipelines)"}
    ask(daemon, decision("laya", f"warm laya {time.monotonic_ns()}"))
    pid = stopped(daemon, "kev")
    before = {m: counts(daemon, m) for m in ("kev", "laya")}
    joins = []
    try:
        joins.append(in_background(post, daemon.url + "/v1/pipelines/ops", body))
        wait_for(lambda: model_status(daemon, "kev")["running"] == 1, what="the first decide")
        for n in range(1, 4):
            time.sleep(0.005)  # each one due a few ms after the one before
            joins.append(in_background(post, daemon.url + "/v1/pipelines/ops", body))
            wait_for(lambda: delta(counts(daemon, "kev"), before["kev"])["coalesced"] == n, 60,
                     f"{n} decide stages waiting")
    finally:
        os.kill(pid, signal.SIGCONT)
    results = [j() for j in joins]
    assert [st for st, _, _ in results] == [200] * 4, [r[1][:300] for r in results]
    assert all(per_request_free(r[1]) == per_request_free(results[0][1]) for r in results)
    d = {m: delta(counts(daemon, m), before[m]) for m in before}
    stages = [tuple(x["cache"] for x in json.loads(raw)["timing"]["stages"])
              for _, raw, _ in results]
    assert stages[0][0] == "miss" and all(s[0] == "coalesced" for s in stages[1:]), stages
    assert {m: d[m]["answered"] for m in d} == {"kev": 1, "laya": 1}, (
        f"4 identical pipelines in flight: engine evaluations {d}, stages in the order sent "
        f"{stages}")
    assert [s[1] for s in stages].count("miss") == 1, stages
    assert pipeline_post(daemon, "/v1/pipelines/ops", body)[1] == "hit"


def test_a_request_waits_only_for_a_leader_due_no_later_than_itself(daemon):
    name = "laya"
    body = decision(name, "deadlines")
    pid = stopped(daemon, name)
    before = counts(daemon, name)

    def sent(timeout_ms=None):
        headers = {"X-Tandem-Timeout-Ms": str(timeout_ms)} if timeout_ms else {}
        return in_background(post, daemon.url + "/v1/systemone", body, headers)
    try:
        leader = sent(100_000)
        wait_for(lambda: model_status(daemon, name)["running"] == 1, what="the leader running")
        sooner = sent(60_000)  # due before the leader: it may not wait for it
        wait_for(lambda: delta(counts(daemon, name), before)["misses"] == 2, what="a second miss")
        later = sent()  # request_timeout, 120 s: due after the leader, so it waits
        wait_for(lambda: delta(counts(daemon, name), before)["coalesced"] == 1, what="a waiter")
    finally:
        os.kill(pid, signal.SIGCONT)
    results = [leader(), sooner(), later()]
    assert [st for st, _, _ in results] == [200] * 3, [r[1][:300] for r in results]
    assert [h.get("x-tandem-cache") for _, _, h in results] == ["miss", "miss", "coalesced"]
    assert len({value_bytes(raw, "answers") for _, raw, _ in results}) == 1
    d = delta(counts(daemon, name), before)
    assert d["answered"] == 2 and (d["misses"], d["coalesced"]) == (2, 1), d


def test_an_error_is_shared_with_the_waiters_and_never_kept(daemon):
    name = "laya"
    body = decision(name, "word " * 700)  # more than laya's window of 512 tokens
    pid = stopped(daemon, name)
    before = counts(daemon, name)
    try:
        join = together(3, lambda: post(daemon.url + "/v1/systemone", body))
        wait_for(lambda: delta(counts(daemon, name), before)["coalesced"] == 2, what="2 waiting")
    finally:
        os.kill(pid, signal.SIGCONT)
    results = join()
    assert [st for st, _, _ in results] == [400] * 3, [r[1][:300] for r in results]
    assert len({raw for _, raw, _ in results}) == 1
    assert "does not fit the model's window" in json.loads(results[0][1])["error"]["message"]
    status, raw, h = post(daemon.url + "/v1/systemone", body)
    assert status == 400 and raw == results[0][1] and h.get("x-tandem-cache") == "miss"
    d = delta(counts(daemon, name), before)
    assert (d["misses"], d["coalesced"], d["entries"], d["hits"]) == (2, 2, 0, 0), d


# --- 5. memory --------------------------------------------------------------------------------

def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_the_cap_holds_under_a_flood_and_evicts_least_recently_used(serve_factory):
    cap = 64 << 10
    # under `make asan`, freed memory waits in ASan's quarantine (256 MiB by default) and
    # would count as held: keep it small for this daemon (test_security_limits does too)
    asan = os.environ.get("ASAN_OPTIONS")
    # the request store is off: SQLite's page cache (up to 2 MiB as it fills) is not the
    # decision cache's and would blur its measure
    s = serve_factory(f"limits:\n  request_timeout: {TIMEOUT}s\ncache:\n  max_bytes: 64KiB\n"
                      f"store:\n  path: \"off\"\n"
                      f"models:\n  laya:\n    path: {fixture_path('laya-tiny.gguf')}\n"
                      + LAYA_KEYS, env={"ASAN_OPTIONS": asan + ":quarantine_size_mb=1"}
                      if asan else None)
    assert re.search(r"less 64\.0 KiB of host RAM for the decision cache \(cache\.max_bytes\)",
                     s.log()), s.log()
    # the question's name is not in the prompt, only in the answer: 8 KB answers for the
    # price of a tiny decision, so that a cache past its cap would show in the RSS
    conn = socket.create_connection(("127.0.0.1", s.port))
    reader = conn.makefile("rb")

    def one(i):
        body = json.dumps({"model": "laya", "state": f"flood {i}", "questions": {
            f"q{i:04d}" + "k" * 8000: {"type": "noul", "instructions": "Is it fine?"}}}).encode()
        conn.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                     + body)
        status = int(reader.readline().split()[1])
        headers = {}
        while (line := reader.readline().strip()):
            k, _, v = line.decode().partition(":")
            headers[k.strip().lower()] = v.strip()
        raw = reader.read(int(headers["content-length"]))
        assert status == 200, raw[:300]
        return headers.get("x-tandem-cache")

    try:
        for i in range(30):  # warm: the engine, the daemon's buffers, the cache full
            one(i)
        rss0 = rss_kib(s.proc.pid)
        most = 0
        for i in range(30, 330):
            assert one(i) == "miss"
            if i % 25 == 0:
                most = max(most, s.status()["cache"]["bytes"])
        c = s.status()["cache"]
        rss1 = rss_kib(s.proc.pid)
        assert c["max_bytes"] == cap and 0 < c["bytes"] <= cap and most <= cap, (c, most)
        assert c["evictions"] == 330 - c["entries"] and c["entries"] < 10, c
        print(f"\nflood: {c}, RSS {rss0} -> {rss1} KiB")
        # 300 answers of 8 KB went through: 2.4 MB had the cap not held (110 KiB measured)
        bound = 1024 + (2048 if asan else 0)
        assert rss1 - rss0 < bound, f"the daemon's RSS grew {rss1 - rss0} KiB over 300 requests"

        # least recently used: the oldest entry, once hit, outlives the one after it
        n = c["entries"]
        oldest, next_oldest = 330 - n, 331 - n
        assert one(oldest) == "hit" and one(oldest - 1) == "miss"  # that miss evicted next_oldest
        assert one(oldest) == "hit" and one(next_oldest) == "miss"
    finally:
        reader.close()
        conn.close()


@pytest.mark.parametrize("reserved,rotates", [("1MiB", False), ("12MiB", True)])
def test_the_cap_is_taken_from_the_host_ram_budget(serve_factory, reserved, rotates):
    """Two laya-tiny engines (6.2 MiB planned each) on a budget of 20 MiB: beside a
    cache of 1 MiB both stay resident; beside one of 12 MiB they take turns."""
    s = serve_factory(f"budget:\n  ram: 20MiB\ncache:\n  max_bytes: {reserved}\nmodels:\n"
                      + "".join(f"  {m}:\n    path: {fixture_path('laya-tiny.gguf')}\n"
                                f"{LAYA_KEYS}" for m in ("la", "lb")))
    size = reserved.replace("MiB", ".0 MiB")
    assert f"budget 20.0 MiB (--ram (no GPU found)), less {size} of host RAM for the decision " \
           f"cache (cache.max_bytes)" in s.log(), s.log()
    assert ("(models rotate)" in s.log()) == rotates, s.log()
    for m in ("la", "lb"):
        ask(s, decision(m, "budget"), expect="miss")
    assert model_status(s, "la")["evictions"] == (1 if rotates else 0)


def test_a_cache_of_zero_bytes_is_off(serve_factory):
    s = serve_factory(f"cache:\n  max_bytes: 0\nmodels:\n  laya:\n"
                      f"    path: {fixture_path('laya-tiny.gguf')}\n" + LAYA_KEYS)
    body = decision("laya", "zero")
    raws = [ask(s, body, expect=None)[0] for _ in range(2)]
    assert raws[0] == raws[1] and b'"cached"' not in raws[1]
    st = s.status()
    assert st["cache"]["max_bytes"] == 0 and st["cache"]["entries"] == 0
    m = st["models"][0]
    assert m["cache"]["enabled"] is False and m["answered"] == 2 and m["cache"]["misses"] == 0


# --- 6. faults --------------------------------------------------------------------------------

def test_an_engine_killed_under_waiters_gives_them_the_resends_answer(daemon):
    name = "laya"
    body = decision(name, "killed under six", MIXED["questions"])
    pid = stopped(daemon, name)
    before = counts(daemon, name)
    m0 = model_status(daemon, name)
    try:
        join = together(6, lambda: post(daemon.url + "/v1/systemone", body))
        wait_for(lambda: delta(counts(daemon, name), before)["coalesced"] == 5
                 and model_status(daemon, name)["running"] == 1, 60, "a leader and five waiting")
    finally:
        os.kill(pid, signal.SIGKILL)
    results = join()
    assert [st for st, _, _ in results] == [200] * 6, [r[1][:300] for r in results]
    assert len({raw for _, raw, _ in results}) == 1, "the waiters got different answers"
    assert sorted(h.get("x-tandem-cache") for _, _, h in results) == ["coalesced"] * 5 + ["miss"]
    m1 = model_status(daemon, name)
    assert (m1["crashes"] - m0["crashes"], m1["retries"] - m0["retries"]) == (1, 1), m1
    assert m1["pid"] != pid
    d = delta(counts(daemon, name), before)
    assert d["answered"] == 1 and d["entries"] == 1, d

    # what was kept is the whole answer: a hit equals a fresh evaluation
    hit, _ = ask(daemon, body, expect="hit")
    fresh, _ = ask(daemon, body, {"Cache-Control": "no-cache"}, expect="bypass")
    assert hit == spliced(results[0][1])
    assert value_bytes(hit, "answers") == value_bytes(fresh, "answers")


def test_when_the_leaders_client_leaves_a_waiter_leads(daemon):
    name = "laya"
    body = decision(name, "the leader leaves")
    data = json.dumps(body).encode()
    pid = stopped(daemon, name)
    before = counts(daemon, name)
    leader = socket.create_connection(("127.0.0.1", daemon.port))
    try:
        leader.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nx-request-id: "
                       b"leaves-%d\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                       % (os.getpid(), len(data)) + data)
        wait_for(lambda: model_status(daemon, name)["running"] == 1, 60, "the leader running")
        join = together(3, lambda: post(daemon.url + "/v1/systemone", body))
        wait_for(lambda: delta(counts(daemon, name), before)["coalesced"] == 3, 60, "3 waiting")
        leader.close()
        # one waiter leads a new evaluation, the other two wait for it
        wait_for(lambda: delta(counts(daemon, name), before)["misses"] == 2
                 and delta(counts(daemon, name), before)["coalesced"] == 5, 30,
                 "a waiter leading")
    finally:
        leader.close()
        os.kill(pid, signal.SIGCONT)
    results = join()
    assert [st for st, _, _ in results] == [200] * 3, [r[1][:300] for r in results]
    assert len({raw for _, raw, _ in results}) == 1
    assert sorted(h.get("x-tandem-cache") for _, _, h in results) == ["coalesced"] * 2 + ["miss"]
    line = audit_of(daemon, f"leaves-{os.getpid()}")
    assert line["status"] == 499, line
    assert ask(daemon, body, expect="hit")[0] == spliced(results[0][1])


def test_a_waiter_that_leaves_does_not_disturb_the_others(daemon):
    name = "laya"
    body = decision(name, "a waiter leaves")
    data = json.dumps(body).encode()
    pid = stopped(daemon, name)
    before = counts(daemon, name)
    try:
        leader = in_background(post, daemon.url + "/v1/systemone", body)
        wait_for(lambda: model_status(daemon, name)["running"] == 1, 60, "the leader running")
        waiter = socket.create_connection(("127.0.0.1", daemon.port))
        waiter.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nx-request-id: "
                       b"waiter-%d\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                       b"\r\n" % (os.getpid(), len(data)) + data)
        others = together(2, lambda: post(daemon.url + "/v1/systemone", body))
        wait_for(lambda: delta(counts(daemon, name), before)["coalesced"] == 3, 60, "3 waiting")
        waiter.close()
        audit_of(daemon, f"waiter-{os.getpid()}")  # it is gone, and logged
    finally:
        os.kill(pid, signal.SIGCONT)
    results = [leader()] + others()
    assert [st for st, _, _ in results] == [200] * 3, [r[1][:300] for r in results]
    assert len({raw for _, raw, _ in results}) == 1
    assert [h.get("x-tandem-cache") for _, _, h in results] == ["miss", "coalesced", "coalesced"]
    assert audit_of(daemon, f"waiter-{os.getpid()}")["status"] == 499
    d = delta(counts(daemon, name), before)
    assert d["answered"] == 1 and d["misses"] == 1, d
