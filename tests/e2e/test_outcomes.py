"""Outcomes fed back (issue 41): the request store, `POST /v1/feedback`, `GET /v1/quality`,
`tandem feedback`, `tandem export`, `--data store:SINCE` and the MCP tool `feedback`.

Everything is real: daemons on the tiny fixtures (kev-tiny decides, laya-tiny verifies;
their random weights still give real, deterministic probabilities, and every number here is
checked against a recomputation, never against a value written down), the store read back
with Python's own sqlite3 module, faults made for real (kill -9, a full tmpfs, a lock held
by another process, random bytes, a database from a newer tandem).

The numbers are checked independently: /v1/quality's accuracy, NLL, ECE, Brier score and
reliability bins are recomputed here from the database rows and from the answers the
clients received (the formulas of docs/eval.md: the top answer is the first argmax of the
probability vector, noul is [p, 1 - p], 15 equal-width confidence bins), and a pipeline's
precision, rejected-would-be-right and escalations from its verdicts and outcomes.

Two module daemons serve the tests that only add to a store: `shared` without bodies and
`bodied` with store.bodies. Tests on them keep apart by their own question names and
pipelines (quality groups by model x question and by pipeline). Faults get daemons of their
own."""
import errno
import hashlib
import json
import math
import os
import random
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import SANITIZER_REPORT, Serve, fixture_path, http

TIMEOUT = 120  # per request: other jobs share this machine's two cores
KEV_KEYS = "    ctx: 1024\n    threads: 1\n"
LAYA_KEYS = "    ctx: 512\n    batch: 512\n    ubatch: 512\n    threads: 1\n"
ECE_BINS = 15
EPS = 1e-12  # METRICS_KL_EPSILON: the floor inside NLL's logarithm

CANDIDATES = {"reduce": "Reduce build concurrency from eight jobs to four.",
              "stop": "Stop the non-critical documentation builds.",
              "nothing": "Change nothing and wait."}


def questions(prefix):
    """One question of each type, named PREFIX_c (choice), PREFIX_s (score), PREFIX_n (noul)."""
    return {f"{prefix}_c": {"type": "choice", "instructions": "Which team should take it?",
                            "criteria": {"billing": "payments", "shipping": "deliveries",
                                         "technical": None}},
            f"{prefix}_s": {"type": "score", "instructions": "How upset is the customer?",
                            "criteria": ["calm", "annoyed", "angry"]},
            f"{prefix}_n": {"type": "noul", "instructions": "Is the parcel lost?"}}


PIPELINE = """  {name}:
    decide:
      model: kev
      instructions: Which response should the operator take now?
    verify:
      - model: laya
        questions:
          consistent:
            type: noul
            instructions: Is "{{{{candidates[decide.choice]}}}}" consistent with the situation?
    verdict:
      thresholds:
        consistent: ">= 0"
      on_reject: {on_reject}
"""
# three pipelines alike but for what a rejection does (ops and mix apart: their quality is too)
PIPELINES = "pipelines:\n" + "".join(
    PIPELINE.format(name=name, on_reject=on_reject) for name, on_reject in
    (("ops", "reject"), ("mix", "reject"), ("esc", "escalate\n      escalate: {model: kev}")))


def config(store, bodies=False, retention=None, laya=True, pipelines=True):
    """kev (and laya) on one thread each; the store at `store` ("off" turns it off)."""
    text = f"limits:\n  request_timeout: {TIMEOUT}s\nmodels:\n"
    text += f"  kev:\n    path: {fixture_path('kev-tiny.gguf')}\n{KEV_KEYS}"
    if laya:
        text += f"  laya:\n    path: {fixture_path('laya-tiny.gguf')}\n{LAYA_KEYS}"
    text += f"store:\n  path: {store}\n  bodies: {'true' if bodies else 'false'}\n"
    if retention:
        text += f"  retention: {retention}\n"
    return text + (PIPELINES if laya and pipelines else "")


# --- HTTP --------------------------------------------------------------------------------------

def post(url, body, headers=None, timeout=TIMEOUT):
    """(status, parsed body or raw text) of one POST of body (a dict, or bytes as they are)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data, {"Content-Type": "application/json",
                                             **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw, status, hs = r.read(), r.status, r.headers
    except urllib.error.HTTPError as e:
        raw, status, hs = e.read(), e.code, e.headers
    try:
        return status, json.loads(raw), hs
    except ValueError:
        return status, raw.decode(errors="replace"), hs


def feedback(s, body):
    status, parsed, _ = post(s.url + "/v1/feedback", body)
    return status, parsed


def decide(s, state, qs, model="kev", request_id=None):
    """One /v1/systemone decision that must answer 200: (request id, answer, headers)."""
    headers = {"x-request-id": request_id} if request_id else {}
    status, answer, hs = post(s.url + "/v1/systemone",
                              {"model": model, "state": state, "questions": qs}, headers)
    assert status == 200, (status, answer)
    assert request_id is None or hs["x-request-id"] == request_id
    return hs["x-request-id"], answer, hs


def pipeline(s, name, state, **extra):
    """One pipeline request that must answer 200: (request id, answer)."""
    status, answer, _ = post(f"{s.url}/v1/pipelines/{name}",
                             {"state": state, "candidates": CANDIDATES, **extra})
    assert status == 200, (status, answer)
    return answer["request_id"], answer


def quality(s, since=None):
    status, q = http("GET", s.url + "/v1/quality" + (f"?since={since}" if since else ""))
    assert status == 200, q
    return q


def model_quality(q, question, model="kev"):
    rows = [m for m in q["models"] if m["model"] == model and m["question"] == question]
    assert len(rows) == 1, (question, q["models"])
    return rows[0]


def pipeline_quality(q, name):
    rows = [p for p in q["pipelines"] if p["pipeline"] == name]
    assert len(rows) == 1, (name, q["pipelines"])
    return rows[0]


def metric(s, name, **labels):
    """The value of sample `name` with these labels on /metrics, or None."""
    for family in text_string_to_metric_families(http("GET", s.url + "/metrics")[1]):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return None


def wait_for(cond, timeout=30, what="condition"):
    deadline = time.time() + timeout
    while True:
        got = cond()
        if got:
            return got
        assert time.time() < deadline, f"{what}: not reached in {timeout} s"
        time.sleep(0.05)


def stop_clean(s):
    code = s.stop()
    assert code == 0, f"tandem serve exited {code}: {s.log()[-2000:]}"
    assert not SANITIZER_REPORT.search(s.log()), s.log()[-4000:]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tandem(tandem_bin, *args, timeout=300):
    return subprocess.run([str(tandem_bin), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


# --- the store, read with Python's sqlite3 --------------------------------------------------------

def connect(path):
    """A connection to the store at path, which must exist (sqlite3 would create it)."""
    return sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=30)


def query(path, sql, args=()):
    con = connect(path)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def request_row(path, request_id):
    """The latest requests row of request_id as a dict, or None."""
    con = connect(path)
    con.row_factory = sqlite3.Row
    try:
        row = con.execute("SELECT * FROM requests WHERE request_id = ? ORDER BY id DESC LIMIT 1",
                          (request_id,)).fetchone()
        return dict(row) if row else None
    finally:
        con.close()


def stored(path, request_id, timeout=30):
    """Waits for request_id's row (the writer thread stores it after the answer, and opens
    the store at its first job)."""
    def row():
        try:
            return request_row(path, request_id)
        except sqlite3.OperationalError:  # no file or no schema yet
            return None
    return wait_for(row, timeout, f"stored row of {request_id}")


def labels_of(path, request_id):
    """{question: (gold JSON text, gold_index, target JSON or None)} of request_id's latest row."""
    rows = query(path, "SELECT l.question, l.gold, l.gold_index, l.target FROM labels l "
                       "JOIN requests r ON r.id = l.request WHERE r.id = (SELECT max(id) FROM "
                       "requests WHERE request_id = ?)", (request_id,))
    return {q: (g, i, t) for q, g, i, t in rows}


def db_items(path, where, args=()):
    """Scored items (probabilities, gold index, target or None) from the rows: the labelled
    questions of the requests that match `where` (over requests r and questions q)."""
    rows = query(path, "SELECT q.options, q.probabilities, l.gold_index, l.target "
                       "FROM requests r JOIN questions q ON q.request = r.id "
                       "JOIN labels l ON l.request = q.request AND l.question = q.name "
                       f"WHERE l.gold_index IS NOT NULL AND {where} ORDER BY r.id", args)
    items = []
    for options, probs, gold, target in rows:
        p = json.loads(probs)
        assert len(p) == len(json.loads(options))
        items.append((p, gold, json.loads(target) if target else None))
    return items


# --- the formulas of docs/eval.md, written again ---------------------------------------------------

def top(p):
    best = 0
    for i in range(1, len(p)):
        if p[i] > p[best]:
            best = i
    return best


def ece_bin(c):
    if not c > 0:
        return 0
    return min(int(math.floor(c * ECE_BINS)), ECE_BINS - 1)


def summary(items):
    """count, accuracy, nll, ece, brier and the 15 reliability bins of (p, gold, target)."""
    n = len(items)
    correct = nll = brier = 0.0
    bins = [[0, 0.0, 0.0] for _ in range(ECE_BINS)]  # count, sum of confidence, correct
    for p, gold, target in items:
        y = target if target is not None else [1.0 if i == gold else 0.0 for i in range(len(p))]
        t = top(p)
        ok = t == gold
        correct += ok
        nll -= sum(yi * math.log(max(pi, EPS)) for pi, yi in zip(p, y) if yi > 0)
        brier += sum((pi - yi) ** 2 for pi, yi in zip(p, y))
        b = bins[ece_bin(p[t])]
        b[0] += 1
        b[1] += p[t]
        b[2] += ok
    if n == 0:
        return {"count": 0, "accuracy": None, "nll": None, "ece": None, "brier": None,
                "bins": bins}
    ece = sum(c / n * abs(k / c - s / c) for c, s, k in bins if c)
    return {"count": n, "accuracy": correct / n, "nll": nll / n, "ece": ece, "brier": brier / n,
            "bins": bins}


def close(a, b):
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def same_numbers(got, want, keys=("accuracy", "nll", "ece", "brier")):
    assert got["count"] == want["count"], (got, want)
    for k in keys:
        assert close(got[k], want[k]), f"{k}: {got[k]!r} != {want[k]!r} ({got})"


def same_bins(reliability, bins):
    assert len(reliability) == ECE_BINS, reliability
    for i, (b, (count, conf, right)) in enumerate(zip(reliability, bins)):
        assert close(b["lo"], i / ECE_BINS) and close(b["hi"], (i + 1) / ECE_BINS), b
        assert b["count"] == count, (b, count)
        if count:
            assert close(b["confidence"], conf / count) and close(b["accuracy"], right / count), b
        else:
            assert b["confidence"] is None and b["accuracy"] is None, b


def vector(question, answer):
    """The probability vector of an answer the client received, in the question's order."""
    if answer["type"] == "noul":
        return [answer["noul"], 1 - answer["noul"]]
    if answer["type"] == "score":
        return [answer["probabilities"][str(i)] for i in range(len(question["criteria"]))]
    return [answer["probabilities"][k] for k in question["criteria"]]


def keys_of(question):
    if question["type"] == "noul":
        return ["true", "false"]
    if question["type"] == "score":
        return [str(i) for i in range(len(question["criteria"]))]
    return list(question["criteria"])


def gold_of(question, gold):
    """(gold index, target vector or None) of a gold value in docs/eval-format.md's format."""
    keys = keys_of(question)
    if isinstance(gold, dict):
        target = [gold["target"].get(k, 0.0) for k in keys]
        answer = gold.get("answer", keys[top(target)])
    else:
        target, answer = None, gold
    key = json.dumps(answer) if isinstance(answer, bool) else str(answer)
    return keys.index(key), target


def client_items(cases, name):
    """Scored items of question `name` from what the clients received and the gold they sent:
    cases is a list of (questions, answer, gold dict)."""
    out = []
    for qs, answer, gold in cases:
        if name in gold:
            index, target = gold_of(qs[name], gold[name])
            out.append((vector(qs[name], answer["answers"][name]), index, target))
    return out


# --- the shared daemon: no bodies ------------------------------------------------------------------

@pytest.fixture(scope="module")
def shared(tandem_bin, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("outcomes")
    s = Serve(tandem_bin, tmp, config(tmp / "store.db"))
    s.store = tmp / "store.db"
    yield s
    stop_clean(s)


# --- 1. feedback is checked against the stored request ----------------------------------------------

def test_feedback_labels_a_decision_and_a_repeat_is_unchanged(shared):
    qs = questions("v1")
    rid, answer, hs = decide(shared, "A customer writes that the parcel never came.", qs)
    status, r = feedback(shared, {"request_id": rid, "gold": {"v1_c": "shipping", "v1_n": True}})
    assert status == 200, r
    assert r["request_id"] == rid and sorted(r["labelled"]) == ["v1_c", "v1_n"], r
    assert r["unchanged"] == [] and r["replaced"] == []
    status, r = feedback(shared, {"request_id": rid, "gold": {"v1_c": "shipping", "v1_n": True}})
    assert status == 200 and r["labelled"] == [] and sorted(r["unchanged"]) == ["v1_c", "v1_n"], r
    # one new, one repeated
    status, r = feedback(shared, {"request_id": rid, "gold": {"v1_s": 2, "v1_n": True}})
    assert status == 200 and r["labelled"] == ["v1_s"] and r["unchanged"] == ["v1_n"], r

    row = stored(shared.store, rid)
    assert row["model"] == "kev" and row["pipeline"] is None and row["verdict"] is None
    assert row["node"] == hs["x-tandem-node"]
    assert row["sha256"] == sha256(fixture_path("kev-tiny.gguf"))
    assert row["body"] is None
    qrows = {name: (typ, json.loads(opts), json.loads(probs), choice)
             for name, typ, opts, probs, choice in query(
                 shared.store, "SELECT name, type, options, probabilities, choice FROM questions "
                               "WHERE request = ?", (row["id"],))}
    assert set(qrows) == set(qs)
    for name, q in qs.items():
        typ, opts, probs, choice = qrows[name]
        assert typ == q["type"] and opts == keys_of(q)
        assert probs == vector(q, answer["answers"][name]), name  # the client's numbers, exactly
        assert choice == opts[top(probs)]
    assert labels_of(shared.store, rid) == {"v1_c": ('"shipping"', 1, None),
                                            "v1_n": ("true", 0, None), "v1_s": ("2", 2, None)}
    assert metric(shared, "tandem_feedback_total", status="200") >= 3
    st = shared.status()["store"]
    assert st["state"] == "ok" and st["path"] == str(shared.store) and not st["error"], st
    assert st["records"] >= 1 and st["errors"] == 0 and st["dropped"] == 0, st
    assert metric(shared, "tandem_store_records_total") >= 1


def test_with_the_store_off_decisions_are_served_and_feedback_is_503(serve_factory):
    s = serve_factory(config("off", laya=False))
    rid, _, _ = decide(s, "Nothing is kept.", questions("off"))
    status, r = feedback(s, {"request_id": rid, "gold": {"off_n": True}})
    assert status == 503 and r["error"]["type"] == "unavailable_error", r
    assert "store.path: off" in r["error"]["message"], r
    assert http("GET", s.url + "/v1/quality")[0] == 503
    assert s.status()["store"]["state"] == "off"


def test_an_unknown_id_is_404_saying_so(shared):
    status, r = feedback(shared, {"request_id": "never-sent-41", "gold": {"x": "y"}})
    assert status == 404 and r["error"]["type"] == "not_found_error", r
    message = r["error"]["message"]
    assert "never-sent-41" in message and "no request" in message and "expired" not in message


def test_an_expired_id_is_404_saying_so(serve_factory, tmp_path):
    store = tmp_path / "store.db"
    s = serve_factory(config(store, retention="2s", laya=False))
    rid, _, _ = decide(s, "The queue is growing.", questions("ex"))
    stored(store, rid)
    status, r = feedback(s, {"request_id": rid, "gold": {"ex_n": True}})
    assert status == 200, r  # young enough
    # retention deletes it in the background (every tenth of store.retention, within a second)
    wait_for(lambda: query(store, "SELECT 1 FROM expired WHERE request_id = ?", (rid,)), 10,
             "the retention sweep")
    assert request_row(store, rid) is None
    assert query(store, "SELECT count(*) FROM labels") == [(0,)]
    status, r = feedback(s, {"request_id": rid, "gold": {"ex_n": True}})
    assert status == 404 and r["error"]["type"] == "not_found_error", r
    message = r["error"]["message"]
    assert rid in message and "expired" in message and "store.retention" in message, message


def test_a_request_past_retention_is_expired_before_its_sweep(shared):
    """The sweep runs every min(retention / 10, 60 s); a request past store.retention (30d
    here: its time is moved back 31 days in the file) is expired already."""
    rid, _, _ = decide(shared, "An old incident.", questions("v2"))
    stored(shared.store, rid)
    con = connect(shared.store)
    with con:
        con.execute("UPDATE requests SET time_ms = time_ms - 31 * 86400000 WHERE request_id = ?",
                    (rid,))
    con.close()
    status, r = feedback(shared, {"request_id": rid, "gold": {"v2_n": True}})
    assert status == 404 and "expired" in r["error"]["message"], (status, r)


def test_questions_and_answers_are_checked_against_the_stored_request(shared):
    qs = questions("v3")
    rid, _, _ = decide(shared, "The login page answers 500.", qs)

    def refused(gold, *names):
        status, r = feedback(shared, {"request_id": rid, "gold": gold})
        assert status == 422 and r["error"]["type"] == "invalid_request_error", (gold, r)
        for name in names:
            assert name in r["error"]["message"], (name, r["error"]["message"])
        return r["error"]["message"]

    refused({"v3_x": "billing"}, "v3_x", "v3_c", "v3_s", "v3_n")  # not asked: the valid ones
    refused({"v3_c": "bills"}, "bills", "billing", "shipping", "technical")  # not an option
    refused({"v3_s": 3}, "v3_s")  # a level past the last
    refused({"v3_c": {"answer": "bills", "target": {"billing": 1}}}, "bills", "billing")
    refused({"v3_c": {"target": {"bills": 1}}}, "bills")
    # a refused feedback labels nothing, not even its valid questions
    refused({"v3_n": True, "v3_x": 1}, "v3_x")
    assert labels_of(shared.store, rid) == {}
    assert metric(shared, "tandem_feedback_total", status="422") >= 6


def test_a_different_label_conflicts_unless_replaced(shared):
    rid, _, _ = decide(shared, "Disk at 91% on the build host.", questions("v4"))
    assert feedback(shared, {"request_id": rid, "gold": {"v4_c": "shipping"}})[0] == 200
    status, r = feedback(shared, {"request_id": rid, "gold": {"v4_c": "technical"}})
    assert status == 409 and r["error"]["type"] == "conflict", r
    assert all(w in r["error"]["message"] for w in ("v4_c", "shipping", "technical")), r
    # the conflict leaves the label, and the other question of the same feedback, alone
    status, r = feedback(shared, {"request_id": rid, "gold": {"v4_c": "technical", "v4_n": False}})
    assert status == 409, r
    assert labels_of(shared.store, rid) == {"v4_c": ('"shipping"', 1, None)}
    status, r = feedback(shared, {"request_id": rid, "gold": {"v4_c": "technical", "v4_n": False},
                                  "replace": True})
    assert status == 200 and r["replaced"] == ["v4_c"] and r["labelled"] == ["v4_n"], r
    assert labels_of(shared.store, rid) == {"v4_c": ('"technical"', 2, None),
                                            "v4_n": ("false", 1, None)}
    # replace with the same label is unchanged
    status, r = feedback(shared, {"request_id": rid, "gold": {"v4_c": "technical"},
                                  "replace": True})
    assert status == 200 and r["unchanged"] == ["v4_c"] and r["replaced"] == [], r


def test_target_distributions_are_kept(shared):
    qs = questions("v5")
    rid, _, _ = decide(shared, "Refund asked twice for one order.", qs)
    gold = {"v5_c": {"answer": "billing", "target": {"billing": 0.7, "shipping": 0.3}},
            "v5_s": {"target": {"0": 0.1, "1": 0.2, "2": 0.7}},
            "v5_n": {"target": {"true": 0.25, "false": 0.75}}}
    status, r = feedback(shared, {"request_id": rid, "gold": gold})
    assert status == 200 and sorted(r["labelled"]) == sorted(gold), r
    got = labels_of(shared.store, rid)
    assert {q: (json.loads(g), i, json.loads(t)) for q, (g, i, t) in got.items()} == {
        "v5_c": (gold["v5_c"], 0, [0.7, 0.3, 0.0]),
        "v5_s": (gold["v5_s"], 2, [0.1, 0.2, 0.7]),
        "v5_n": (gold["v5_n"], 1, [0.25, 0.75])}
    # a target that is not a distribution is refused and names the question's target
    rid2, _, _ = decide(shared, "Refund asked three times for one order.", qs)
    status, r = feedback(shared, {"request_id": rid2, "gold": {"v5_c": {
        "answer": "billing", "target": {"billing": 0.7, "shipping": 0.2}}}})
    assert status in (400, 422) and "target" in json.dumps(r["error"]), r
    assert labels_of(shared.store, rid2) == {}


def test_pipeline_outcomes_a_key_and_null(shared):
    rid, a = pipeline(shared, "ops", "The build server swaps; two documentation builds run.")
    assert a["verdict"] == "accepted"
    row = stored(shared.store, rid)
    assert (row["pipeline"], row["verdict"], row["choice"], row["model"]) == (
        "ops", "accepted", a["choice"], "kev")
    assert json.loads(row["attempts"]) == a["attempts"]
    status, r = feedback(shared, {"request_id": rid, "outcome": "stop"})
    assert status == 200 and r["labelled"] == ["choice"], r
    assert labels_of(shared.store, rid) == {"choice": ('"stop"', 1, None)}
    status, r = feedback(shared, {"request_id": rid, "outcome": "stop"})
    assert status == 200 and r["unchanged"] == ["choice"], r
    status, r = feedback(shared, {"request_id": rid, "outcome": None})
    assert status == 409 and r["error"]["type"] == "conflict", r
    status, r = feedback(shared, {"request_id": rid, "outcome": None, "replace": True})
    assert status == 200 and r["replaced"] == ["choice"], r
    assert labels_of(shared.store, rid) == {"choice": ("null", None, None)}

    status, r = feedback(shared, {"request_id": rid, "outcome": "restart"})
    assert status == 422 and r["error"]["type"] == "invalid_request_error", r
    assert all(k in r["error"]["message"] for k in ["restart", *CANDIDATES]), r
    # gold belongs to decisions, outcomes to pipelines
    status, r = feedback(shared, {"request_id": rid, "gold": {"choice": "stop"}})
    assert status == 422 and r["error"]["type"] == "invalid_request_error", r
    mid, _, _ = decide(shared, "Which team?", questions("v6"))
    status, r = feedback(shared, {"request_id": mid, "outcome": "reduce"})
    assert status == 422 and r["error"]["type"] == "invalid_request_error", r
    assert labels_of(shared.store, mid) == {}


def test_malformed_bodies_are_400_naming_the_field(shared):
    rid, _, _ = decide(shared, "The VPN drops every hour.", questions("v7"))
    ok_gold = {"v7_n": True}
    cases = [
        (b"not json", None),
        (b"[]", None),
        (b'{"request_id": "x", "gold": {"a": 1}', None),
        ({}, "request_id"),
        ({"gold": ok_gold}, "request_id"),
        ({"request_id": 41, "gold": ok_gold}, "request_id"),
        ({"request_id": rid}, None),  # neither gold nor outcome
        ({"request_id": rid, "gold": ok_gold, "outcome": "stop"}, None),  # both
        ({"request_id": rid, "gold": "true"}, "gold"),
        ({"request_id": rid, "gold": [True]}, "gold"),
        ({"request_id": rid, "gold": ok_gold, "replace": "yes"}, "replace"),
        ({"request_id": rid, "outcome": 3}, "outcome"),
    ]
    for body, param in cases:
        status, r = feedback(shared, body)
        assert status == 400, (body, status, r)
        assert r["error"]["type"] == "invalid_request_error", (body, r)
        if param:
            assert r["error"].get("param") == param, (body, r)
    assert labels_of(shared.store, rid) == {}
    assert feedback(shared, {"request_id": rid, "gold": ok_gold})[0] == 200


def test_an_unknown_field_is_400_naming_it(shared):
    rid, _, _ = decide(shared, "The VPN drops every minute.", questions("v7"))
    status, r = feedback(shared, {"request_id": rid, "gold": {"v7_n": True}, "golds": {}})
    assert status == 400 and r["error"]["type"] == "invalid_request_error", r
    assert "golds" in r["error"]["message"], r
    assert labels_of(shared.store, rid) == {}
    assert r["error"].get("param") == "golds", r


def test_a_request_id_seen_twice_takes_the_latest(shared):
    rid = f"twice-{time.monotonic_ns()}"
    decide(shared, "First time.", {"first": questions("v8")["v8_c"]}, request_id=rid)
    decide(shared, "Second time.", {"second": questions("v8")["v8_n"]}, request_id=rid)
    wait_for(lambda: len(query(shared.store, "SELECT id FROM requests WHERE request_id = ?",
                               (rid,))) == 2, what="both rows")
    status, r = feedback(shared, {"request_id": rid, "gold": {"first": "billing"}})
    assert status == 422 and "second" in r["error"]["message"], r
    status, r = feedback(shared, {"request_id": rid, "gold": {"second": False}})
    assert status == 200, r
    assert labels_of(shared.store, rid) == {"second": ("false", 1, None)}


# --- 2. the numbers, recomputed ----------------------------------------------------------------

QUALITY_GOLD = [
    {"qq_c": {"answer": "shipping", "target": {"billing": 0.2, "shipping": 0.8}}, "qq_s": 1,
     "qq_n": True},
    {"qq_c": "billing", "qq_s": {"target": {"0": 0.1, "1": 0.3, "2": 0.6}}, "qq_n": False},
    {"qq_c": "technical", "qq_s": 0, "qq_n": {"answer": True, "target": {"true": 0.9, "false": 0.1}}},
    {"qq_c": "billing", "qq_s": 2, "qq_n": False},
    {"qq_c": "shipping", "qq_s": 1, "qq_n": True},
    {"qq_c": "billing", "qq_s": 0, "qq_n": True},
    {"qq_n": False},
    {},  # asked, never labelled: not counted
]


def test_quality_equals_the_numbers_recomputed_from_rows_and_answers(shared):
    qs = questions("qq")
    cases = []
    t0 = int(time.time() * 1000)
    for i, gold in enumerate(QUALITY_GOLD):
        rid, answer, _ = decide(shared, f"Ticket {i}: the customer writes about order {100 + i}.",
                                qs)
        if gold:
            # in two feedbacks, to label a request bit by bit
            first = dict(list(gold.items())[:1])
            assert feedback(shared, {"request_id": rid, "gold": first})[0] == 200
            status, r = feedback(shared, {"request_id": rid, "gold": gold})
            assert status == 200 and r["unchanged"] == list(first), r
        cases.append((qs, answer, gold))
    q = quality(shared)
    assert q["since_ms"] == 7 * 86400 * 1000 and q["from_ms"] <= t0 <= q["to_ms"], q
    for name, typ, n in (("qq_c", "choice", 6), ("qq_s", "score", 6), ("qq_n", "noul", 7)):
        from_answers = summary(client_items(cases, name))
        from_rows = summary(db_items(shared.store, "q.name = ? AND r.model = 'kev'", (name,)))
        assert from_answers["count"] == from_rows["count"] == n
        same_numbers(from_rows, from_answers)
        assert from_rows["bins"] == from_answers["bins"]
        live = model_quality(q, name)
        assert live["type"] == typ
        same_numbers(live, from_rows)
        same_bins(live["reliability"], from_rows["bins"])
        assert sum(b["count"] for b in live["over_time"]) == n, live["over_time"]
        # the same numbers in a narrower window that still holds them all
        same_numbers(model_quality(quality(shared, "1h"), name), from_rows)
    print("\nkev-tiny on its labels: " + ", ".join(
        f"{m['question']} acc={m['accuracy']:.3f} nll={m['nll']:.3f} ece={m['ece']:.3f}"
        for m in q["models"] if m["question"].startswith("qq_")))


def test_quality_gauges_on_metrics_follow_the_feedback(shared):
    """/metrics has the numbers of /v1/quality (store.quality_window, 7d), refreshed within
    5 s of a feedback."""
    qs = {"qg_n": questions("qg")["qg_n"]}
    for i, gold in enumerate([True, False, False, True, True]):
        rid, _, _ = decide(shared, f"Gauge case {i}.", qs)
        assert feedback(shared, {"request_id": rid, "gold": {"qg_n": gold}})[0] == 200
    live = model_quality(quality(shared), "qg_n")
    assert live["count"] == 5
    labels = {"model": "kev", "question": "qg_n"}
    wait_for(lambda: all(close(metric(shared, f"tandem_quality_{key}", **labels), live[key])
                         for key in ("accuracy", "nll", "ece")), 15, "the gauges of qg_n")
    assert metric(shared, "tandem_quality_count", **labels) == 5


def test_the_quality_count_gauge_has_the_contracts_name(shared):
    text = http("GET", shared.url + "/metrics")[1]
    assert "# TYPE tandem_quality_accuracy gauge" in text
    assert "# TYPE tandem_quality_count gauge" in text


def test_quality_reports_the_store(shared):
    rid, _, _ = decide(shared, "A stored case.", questions("qs"))
    assert feedback(shared, {"request_id": rid, "gold": {"qs_n": True}})[0] == 200
    st = quality(shared)["store"]
    assert st["state"] == "ok" and st["path"] == str(shared.store), st
    assert st["requests"] >= 1 and st["labelled"] >= 1, st


def pipeline_case(s, name, i, outcome_rule, **extra):
    """One pipeline request, its outcome by outcome_rule(answer, decider's ranking) and the
    feedback; returns (answer, outcome)."""
    rid, a = pipeline(s, name, f"Host {i} of pipeline {name}: memory at {80 + i}%.", **extra)
    probs = a["decide"]["answers"]["choice"]["probabilities"]
    ranking = sorted(CANDIDATES, key=lambda k: -probs[k])  # stable: the first argmax first
    outcome = outcome_rule(a, ranking)
    if outcome != "unlabelled":
        status, r = feedback(s, {"request_id": rid, "outcome": outcome})
        assert status == 200 and r["labelled"] == ["choice"], r
    return a, outcome


def expected_pipeline(cases):
    """What /v1/quality must say of a pipeline, from the answers and outcomes."""
    labelled = [(a, o) for a, o in cases if o != "unlabelled"]
    accepted = [(a, o) for a, o in labelled if a["verdict"] == "accepted"]
    rejected = [(a, o) for a, o in labelled if a["verdict"] == "rejected"]
    right = sum(o is not None and a["choice"] == o for a, o in accepted)
    decider_top = lambda a: list(CANDIDATES)[top(vector(
        {"type": "choice", "criteria": CANDIDATES}, a["decide"]["answers"]["choice"]))]
    items = [(vector({"type": "choice", "criteria": CANDIDATES}, a["decide"]["answers"]["choice"]),
              list(CANDIDATES).index(o), None) for a, o in labelled if o is not None]
    return {"count": len(labelled), "accepted": len(accepted), "accepted_right": right,
            "precision": right / len(accepted) if accepted else None,
            "rejected": len(rejected),
            "rejected_would_be_right": sum(o is not None and decider_top(a) == o
                                           for a, o in rejected),
            "escalated": sum(a["verdict"] == "escalated" for a, _ in labelled)}, summary(items)


def rows_pipeline(path, name):
    """The same, from the database rows alone."""
    rows = query(path, "SELECT r.verdict, r.choice, q.options, q.probabilities, l.gold, "
                       "l.gold_index FROM requests r JOIN questions q ON q.request = r.id "
                       "JOIN labels l ON l.request = r.id AND l.question = q.name "
                       "WHERE r.pipeline = ? AND q.name = 'choice'", (name,))
    out = {"count": len(rows), "accepted": 0, "accepted_right": 0, "rejected": 0,
           "rejected_would_be_right": 0, "escalated": 0}
    for verdict, choice, options, probs, gold, index in rows:
        outcome, options, probs = json.loads(gold), json.loads(options), json.loads(probs)
        assert (outcome is None) == (index is None) and (index is None or options[index] == outcome)
        if verdict == "accepted":
            out["accepted"] += 1
            out["accepted_right"] += outcome is not None and choice == outcome
        elif verdict == "rejected":
            out["rejected"] += 1
            out["rejected_would_be_right"] += outcome is not None and options[top(probs)] == outcome
        else:
            assert verdict == "escalated", verdict
            out["escalated"] += 1
    out["precision"] = out["accepted_right"] / out["accepted"] if out["accepted"] else None
    return out, summary(db_items(path, "r.pipeline = ? AND q.name = 'choice'", (name,)))


def test_pipeline_quality_equals_verdicts_and_outcomes_recomputed(shared):
    other = lambda a, ranking, than: next(k for k in ranking if k != than)
    mix = [pipeline_case(shared, "mix", 0, lambda a, r: a["choice"]),               # right
           pipeline_case(shared, "mix", 1, lambda a, r: other(a, r, a["choice"])),  # wrong
           pipeline_case(shared, "mix", 2, lambda a, r: None),                      # none right
           pipeline_case(shared, "mix", 3, lambda a, r: "unlabelled"),
           # min_confidence 1 rejects every decision before verification
           pipeline_case(shared, "mix", 4, lambda a, r: r[0], min_confidence=1),    # would be right
           pipeline_case(shared, "mix", 5, lambda a, r: r[1], min_confidence=1),
           pipeline_case(shared, "mix", 6, lambda a, r: None, min_confidence=1)]
    esc = [pipeline_case(shared, "esc", 0, lambda a, r: a["choice"]),
           pipeline_case(shared, "esc", 1, lambda a, r: a["choice"], min_confidence=1)]
    assert [a["verdict"] for a, _ in mix] == ["accepted"] * 4 + ["rejected"] * 3
    assert [a["verdict"] for a, _ in esc] == ["accepted", "escalated"]
    q = quality(shared)
    for name, cases, counts in (
            ("mix", mix, {"count": 6, "accepted": 3, "accepted_right": 1, "rejected": 3,
                          "rejected_would_be_right": 1, "escalated": 0}),
            ("esc", esc, {"count": 2, "accepted": 1, "accepted_right": 1, "rejected": 0,
                          "rejected_would_be_right": 0, "escalated": 1})):
        from_answers, decide_answers = expected_pipeline(cases)
        from_rows, decide_rows = rows_pipeline(shared.store, name)
        assert from_answers == from_rows and {k: from_rows[k] for k in counts} == counts
        live = pipeline_quality(q, name)
        for key in counts:
            assert live[key] == counts[key], (name, key, live)
        assert close(live["precision"], from_rows["precision"]), live
        same_numbers(decide_rows, decide_answers)
        assert live["decide"]["model"] == "kev" and live["decide"]["question"] == "choice"
        same_numbers(live["decide"], decide_rows, keys=("accuracy", "nll", "ece"))
        for a, _ in cases:
            row = request_row(shared.store, a["request_id"])
            assert (row["pipeline"], row["verdict"], row["choice"]) == (
                name, a["verdict"], a["choice"])
            assert json.loads(row["attempts"]) == a["attempts"]


# --- 3 and 4: the store as a dataset: eval, export --------------------------------------------------

@pytest.fixture(scope="module")
def bodied(tandem_bin, tmp_path_factory):
    """A daemon with store.bodies and only kev, and a labelled set on it: the store holds one
    question of each type under one name each, so eval's per-type numbers are quality's per
    question."""
    tmp = tmp_path_factory.mktemp("bodies")
    s = Serve(tandem_bin, tmp, config(tmp / "store.db", bodies=True, laya=False))
    s.store = tmp / "store.db"
    qs = questions("qe")
    s.cases = []
    for i, gold in enumerate(QUALITY_GOLD):
        state = {"ticket": 500 + i, "text": f"Order {500 + i} has not arrived after {i + 3} days."}
        rid, answer, _ = decide(s, state, qs)
        gold = {k.replace("qq_", "qe_"): v for k, v in gold.items()}
        if gold:
            status, r = feedback(s, {"request_id": rid, "gold": gold})
            assert status == 200, r
        s.cases.append((rid, state, qs, answer, gold))
    yield s
    stop_clean(s)


def eval_json(tandem_bin, cfg, data):
    out = tandem(tandem_bin, "eval", "--config", cfg, "--model", "kev", "--data", data,
                 "--json", "--bootstrap", "0")
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def same_as_live(s, report):
    q = quality(s)
    for name, typ in (("qe_c", "choice"), ("qe_s", "score"), ("qe_n", "noul")):
        live, offline = model_quality(q, name), report["metrics"][typ]
        assert offline["n"] == live["count"], (name, offline, live)
        for key in ("accuracy", "nll", "ece", "brier"):
            assert close(offline[key], live[key]), (name, key, offline[key], live[key])


def test_bodies_on_keep_the_request_json(bodied):
    for rid, state, qs, _, _ in bodied.cases:
        body = json.loads(stored(bodied.store, rid)["body"])
        assert body["state"] == state and body["questions"] == qs, body


def test_eval_on_the_store_equals_live_quality(tandem_bin, bodied):
    report = eval_json(tandem_bin, bodied.config, "store:7d")
    assert report["requests"]["errors"] == 0 and report["errors"] == [], report["errors"]
    assert report["cases"] >= len(QUALITY_GOLD)
    assert report["metrics"]["overall"]["n"] == 6 + 6 + 7
    same_as_live(bodied, report)


def test_export_writes_a_set_that_eval_reads(tandem_bin, bodied, tmp_path):
    out = tmp_path / "labelled.jsonl"
    done = tandem(tandem_bin, "export", "--config", bodied.config, "--since", "7d", "--labelled",
                  "--out", out)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(l) for l in out.read_text().splitlines() if l.strip()]
    want = {rid: (state, qs, gold) for rid, state, qs, _, gold in bodied.cases if gold}
    assert sorted(c["id"] for c in lines) == sorted(want)
    for c in lines:
        assert set(c) <= {"id", "state", "questions", "gold", "meta"}, c
        state, qs, gold = want[c["id"]]
        assert (c["state"], c["questions"], c["gold"]) == (state, qs, gold), c
    same_as_live(bodied, eval_json(tandem_bin, bodied.config, out))

    everything = tmp_path / "all.jsonl"
    done = tandem(tandem_bin, "export", "--config", bodied.config, "--since", "7d",
                  "--out", everything)
    assert done.returncode == 0, done.stderr
    by_id = {c["id"]: c for c in map(json.loads, everything.read_text().splitlines())}
    for rid, state, qs, _, gold in bodied.cases:
        assert by_id[rid]["state"] == state and by_id[rid].get("gold", {}) == gold


def test_export_without_bodies_says_store_bodies_is_needed(tandem_bin, shared, tmp_path):
    done = tandem(tandem_bin, "export", "--config", shared.config, "--since", "7d",
                  "--out", tmp_path / "x.jsonl")
    assert done.returncode != 0 and "store.bodies" in done.stderr, (done.returncode, done.stderr)
    done = tandem(tandem_bin, "eval", "--config", shared.config, "--model", "kev",
                  "--data", "store:7d", "--json")
    assert done.returncode != 0 and "store.bodies" in done.stderr, (done.returncode, done.stderr)


# --- 5. what the store keeps without bodies ---------------------------------------------------------

def test_bodies_off_keep_no_state_or_question_text(shared):
    marker = "Zanzibar-quokka-41"
    qs = {"v9_c": {"type": "choice", "instructions": f"Which {marker} team?",
                   "criteria": {"billing": f"{marker} payments", "other": None}}}
    rid, _, _ = decide(shared, f"The {marker} ticket.", qs)
    prid, _ = pipeline(shared, "ops", f"The {marker} host swaps.")
    for r in (rid, prid):
        assert stored(shared.store, r)["body"] is None
    assert feedback(shared, {"request_id": rid, "gold": {"v9_c": "other"}})[0] == 200
    assert query(shared.store, "SELECT count(*) FROM requests WHERE body IS NOT NULL") == [(0,)]
    for suffix in ("", "-wal", "-shm"):
        path = shared.store.parent / (shared.store.name + suffix)
        if path.exists():
            data = path.read_bytes()
            for text in (marker, CANDIDATES["stop"]):
                assert text.encode() not in data, f"{text!r} is in {path.name}"


# --- 6. acknowledged feedback survives kill -9 --------------------------------------------------------

KILL_ROUNDS = 3
KILL_THREADS = 4


def kill(s):
    if s.proc.poll() is None:
        s.proc.kill()
        s.proc.wait()
    s.stderr.close()


def burst(s, slots, sends, acked, delay):
    """KILL_THREADS clients send feedback on their own slots, round and round, each a replace
    of the slot's label by its other value, until the daemon dies: SIGKILL after delay s.
    Records each acknowledged value in acked; returns {slot: value} of the feedbacks in flight
    at the kill (committed or not) and how many feedbacks were acknowledged."""
    pending, errors, acks = {}, [], []

    def client(mine):
        for k in range(100000):
            slot = mine[k % len(mine)]
            rid, question = slot
            value = sends[slot] % 2 == 0
            sends[slot] += 1
            try:
                status, r, _ = post(s.url + "/v1/feedback", {
                    "request_id": rid, "gold": {question: value}, "replace": True}, timeout=30)
            except Exception:  # refused, reset, or http.client's RemoteDisconnected: the kill
                pending[slot] = value
                return
            if status != 200:
                errors.append((slot, status, r))
                return
            acked[slot] = value
            acks.append(slot)
        errors.append("the daemon outlived the burst")

    threads = [threading.Thread(target=client, args=(slots[t::KILL_THREADS],))
               for t in range(KILL_THREADS)]
    for t in threads:
        t.start()
    time.sleep(delay)
    s.proc.kill()
    s.proc.wait()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return pending, len(acks)


def test_acknowledged_feedback_survives_kill_9(tandem_bin, tmp_path):
    seed = random.randrange(1 << 30)
    rnd = random.Random(seed)
    store = tmp_path / "store.db"
    cfg = config(store, laya=False)
    qs = {f"k{j}": {"type": "noul", "instructions": f"Is fact {j} true?"} for j in range(8)}
    servers = []

    def start(i):
        where = tmp_path / f"serve{i}"
        where.mkdir()
        servers.append(Serve(tandem_bin, where, cfg))
        return servers[-1]

    try:
        s = start(0)
        ids = [decide(s, f"Machine {i} reports {i} faults.", qs)[0] for i in range(8)]
        for rid in ids:
            stored(store, rid)
        slots = [(rid, q) for rid in ids for q in qs]
        sends = {slot: 0 for slot in slots}
        acked = {}
        for round in range(KILL_ROUNDS):
            delay = rnd.uniform(0.05, 0.4)
            pending, acks = burst(s, slots, sends, acked, delay)
            print(f"\nround {round} (seed {seed}): killed after {delay:.3f} s, {acks} "
                  f"feedbacks acknowledged, {len(pending)} in flight")
            assert acks > 0, "the kill came before any feedback was answered"
            con = sqlite3.connect(store, timeout=30)
            try:
                assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
                rows = dict(((rid, q), json.loads(g)) for rid, q, g in con.execute(
                    "SELECT r.request_id, l.question, l.gold FROM labels l "
                    "JOIN requests r ON r.id = l.request"))
            finally:
                con.close()
            assert len(rows) >= len(acked)
            lost = {slot: (acked[slot], rows.get(slot)) for slot in acked
                    if rows.get(slot) != acked[slot]
                    and not (slot in pending and rows.get(slot) == pending[slot])}
            assert not lost, f"acknowledged, then lost (acked, in the db): {lost}"
            ghosts = {slot: rows[slot] for slot in rows
                      if slot not in acked and slot not in pending}
            assert not ghosts, f"labels nobody acknowledged: {ghosts}"
            # the restarted daemon reads what sqlite3 read
            s = start(round + 1)
            acked = {slot: rows[slot] for slot in rows}
        for slot, value in acked.items():
            status, r = feedback(s, {"request_id": slot[0], "gold": {slot[1]: value}})
            assert status == 200 and r["unchanged"] == [slot[1]], (slot, r)
        assert s.status()["store"]["state"] == "ok"
        stop_clean(s)
    finally:
        for s in servers:
            kill(s)


# --- 7. a store failure never stops decisions -----------------------------------------------------

def store_errors(s):
    return metric(s, "tandem_store_errors_total") or 0


def failing_feedback(s, rid, gold, *causes):
    """Feedback that the failing store must refuse with 503 and a message naming the cause."""
    status, r = feedback(s, {"request_id": rid, "gold": gold})
    assert status == 503 and r["error"]["type"] == "unavailable_error", (status, r)
    message = r["error"]["message"]
    assert any(c in message for c in causes), (causes, message)
    return message


def test_a_full_disk_leaves_decisions_served(serve_factory, tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], check=True)
    s = None
    try:
        s = serve_factory(config(disk / "store.db", laya=False))
        qs = questions("df")
        rid, _, _ = decide(s, "Disk nearly full.", qs)
        status, r = feedback(s, {"request_id": rid, "gold": {"df_c": "technical"}})
        assert status == 200, r
        fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            for size in (1 << 16, 512):
                while True:
                    try:
                        os.write(fd, b"\0" * size)
                    except OSError as e:
                        assert e.errno == errno.ENOSPC, e
                        break
        finally:
            os.close(fd)
        for i in range(60):  # until a record fails to be written
            decide(s, f"Disk full, decision {i}.", qs)
            if store_errors(s) > 0:
                break
        assert store_errors(s) > 0, s.status()["store"]
        for i in range(3):  # and decisions go on
            decide(s, f"Disk still full, decision {i}.", qs)
        failing_feedback(s, rid, {"df_n": True}, "full")
        assert s.status()["store"]["errors"] > 0
        stop_clean(s)
    finally:
        if s and s.proc.poll() is None:
            s.stop()  # the store's files must be closed before the unmount
        subprocess.run(["umount", "-l", str(disk)], check=True)


def locked(path):
    """Another process holds an exclusive lock on the database."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3, sys\n"
         "con = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
         "con.execute('BEGIN EXCLUSIVE'); con.execute('CREATE TABLE holder(x)')\n"
         "print('held', flush=True); sys.stdin.read()", str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    return ("locked",), lambda: (holder.stdin.close(), holder.wait(30))


def corrupt(path):
    path.write_bytes(random.Random(41).randbytes(1 << 16))
    before = path.read_bytes()

    def check():
        assert path.read_bytes() == before, "tandem changed the corrupt file"
    return ("not a database", "malformed"), check


def newer(path):
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE requests(id INTEGER PRIMARY KEY, future TEXT)")
    con.execute("PRAGMA user_version = 99")
    con.commit()
    con.close()

    def check():
        assert query(path, "PRAGMA user_version") == [(99,)]
        assert query(path, "SELECT name FROM sqlite_master") == [("requests",)]
    return ("99",), check


@pytest.mark.parametrize("fault", [locked, corrupt, newer], ids=["locked", "corrupt", "newer"])
def test_a_store_that_cannot_open_leaves_decisions_served(serve_factory, tmp_path, fault):
    path = tmp_path / "store.db"
    causes, after = fault(path)
    try:
        s = serve_factory(config(path, laya=False))
        rid, _, _ = decide(s, "The store is unusable.", questions("sf"))
        store = wait_for(lambda: (lambda st: st if st["state"] == "failed" else None)(
            s.status()["store"]), 30, "store state failed")
        assert store["path"] == str(path) and any(c in store["error"] for c in causes), store
        decide(s, "The store is still unusable.", questions("sf"))
        message = failing_feedback(s, rid, {"sf_n": True}, *causes)
        assert str(path) in message, message
        assert store_errors(s) > 0
        if fault is newer:  # refused with a clear message in the log
            lines = [l for l in s.log().splitlines() if str(path) in l and "99" in l]
            assert lines, s.log()[-2000:]
            print("\n" + lines[0])
    finally:
        after()


# --- 8. tandem feedback and the MCP tool ---------------------------------------------------------------

def test_the_feedback_command_labels_requests(tandem_bin, shared):
    qs = questions("c1")
    rid, _, _ = decide(shared, "The printer is on fire.", qs)
    done = tandem(tandem_bin, "feedback", "--url", shared.url, rid, "--gold", "c1_c=technical",
                  "--gold", "c1_s=2", "--gold", "c1_n=false")
    assert done.returncode == 0, done.stderr
    assert labels_of(shared.store, rid) == {"c1_c": ('"technical"', 2, None),
                                            "c1_s": ("2", 2, None), "c1_n": ("false", 1, None)}
    done = tandem(tandem_bin, "feedback", "--url", shared.url, rid, "--gold", "c1_c=billing")
    assert done.returncode != 0 and "c1_c" in done.stderr, done.stderr  # 409
    done = tandem(tandem_bin, "feedback", "--url", shared.url, "--replace", rid,
                  "--gold-json", '{"c1_c": {"answer": "billing", "target": {"billing": 0.6, '
                                 '"technical": 0.4}}}')
    assert done.returncode == 0, done.stderr
    gold, index, target = labels_of(shared.store, rid)["c1_c"]
    assert (json.loads(gold), index, json.loads(target)) == (
        {"answer": "billing", "target": {"billing": 0.6, "technical": 0.4}}, 0, [0.6, 0, 0.4])

    prid, a = pipeline(shared, "ops", "Two nightly builds hold the memory.")
    done = tandem(tandem_bin, "feedback", "--config", shared.config, prid, "--outcome", "stop")
    assert done.returncode == 0, done.stderr
    assert labels_of(shared.store, prid) == {"choice": ('"stop"', 1, None)}
    done = tandem(tandem_bin, "feedback", "--config", shared.config, "--replace", prid,
                  "--outcome-none")
    assert done.returncode == 0, done.stderr
    assert labels_of(shared.store, prid) == {"choice": ("null", None, None)}

    done = tandem(tandem_bin, "feedback", "--url", shared.url, "never-sent-c1", "--gold", "x=y")
    assert done.returncode == 1 and "never-sent-c1" in done.stderr, done.stderr


def test_the_mcp_tool_labels_a_request(tandem_bin, shared):
    rid, _, _ = decide(shared, "The backup did not run.", questions("m1"))
    prid, _ = pipeline(shared, "ops", "The backup host is at 99% memory.")
    proc = subprocess.Popen([str(tandem_bin), "mcp", "--url", shared.url], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def call(id, method, params):
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": id, "method": method,
                                     "params": params}).encode() + b"\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    try:
        init = call(1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                      "clientInfo": {"name": "outcomes", "version": "0"}})
        assert "result" in init, init
        tools = {t["name"]: t for t in call(2, "tools/list", {})["result"]["tools"]}
        assert "feedback" in tools, list(tools)
        assert {"request_id", "gold", "outcome", "replace"} <= set(
            tools["feedback"]["inputSchema"]["properties"])
        r = call(3, "tools/call", {"name": "feedback", "arguments": {
            "request_id": rid, "gold": {"m1_c": "shipping", "m1_n": True}}})["result"]
        assert r.get("isError") is not True, r
        assert sorted(r["structuredContent"]["labelled"]) == ["m1_c", "m1_n"], r
        r = call(4, "tools/call", {"name": "feedback", "arguments": {
            "request_id": prid, "outcome": "reduce"}})["result"]
        assert r.get("isError") is not True, r
        r = call(5, "tools/call", {"name": "feedback", "arguments": {
            "request_id": rid, "gold": {"m1_c": "billing"}}})["result"]
        assert r["isError"] is True and "m1_c" in r["content"][0]["text"], r  # the route's 409
    finally:
        proc.stdin.close()
        assert proc.wait(30) == 0, proc.stderr.read()
    assert labels_of(shared.store, rid) == {"m1_c": ('"shipping"', 1, None),
                                            "m1_n": ("true", 0, None)}
    assert labels_of(shared.store, prid) == {"choice": ('"reduce"', 0, None)}
