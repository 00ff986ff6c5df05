"""Decide-then-verify pipelines end to end: `tandem serve` with pipelines and
`tandem decide`, on the real engine with the two fixture decision models
(SmolLM2 decides, Gemma-3 verifies).

Outcomes are steered through the verdict rule, never by faking answers: a
threshold no noul can pass ("> 1") rejects every candidate, ">= 0" accepts
the first, and a threshold placed between two measured answers makes the
second candidate pass where the first failed."""
import hashlib
import json
import subprocess
import threading
import time

import pytest

from conftest import fixture_path, http, model_file, rotating_budget

A, B = "smollm2-decider", "gemma3-decider"
REQUEST = {
    "state": "The build server is at 97% memory and swapping. Eight compile jobs run in "
             "parallel; two are nightly documentation builds nobody waits for.",
    "candidates": {"reduce": "Reduce build concurrency from eight jobs to four.",
                   "stop": "Stop the non-critical documentation builds.",
                   "nothing": "Change nothing and wait."},
}

OTHER = {**REQUEST, "state": "The disk is 40% full and every job finishes on time."}


def config(budget="2GiB", threshold=">= 0", on_reject="next_best", max_attempts=3,
           escalate="", extra_pipelines="", scheduling="", tiny=False):
    (path_a, keys_a), (path_b, keys_b) = model_file(A, tiny), model_file(B, tiny)
    return f"""budget:
  ram: {budget}
limits:
  request_timeout: 300s
{scheduling}
models:
  {A}:
    path: {path_a}
    aliases: [decider]
    {keys_a}
    keep_alive: forever
  {B}:
    path: {path_b}
    aliases: [verifier]
    {keys_b}
    keep_alive: forever
pipelines:
  ops:
    decide:
      model: decider
      instructions: Which response should the operator take now?
    verify:
      - model: verifier
        questions:
          consistent:
            type: noul
            instructions: >-
              The operator proposes: {{{{candidates[decide.choice]}}}}
              ({{{{decide.choice}}}}, attempt {{{{attempt}}}}). Is it consistent with the situation?
            criteria:
              true: it addresses the situation
              false: it ignores or worsens it
          severity:
            type: score
            instructions: How risky is "{{{{decide.choice}}}}"?
            criteria: [safe, risky, dangerous]
    verdict:
      thresholds:
        consistent: "{threshold}"
      on_reject: {on_reject}
      max_attempts: {max_attempts}
{escalate}
  accept-all:
    decide:
      model: decider
      instructions: Which response should the operator take now?
    verify:
      - model: verifier
        questions:
          consistent:
            type: noul
            instructions: Is "{{{{candidates[decide.choice]}}}}" a sensible step?
    verdict:
      thresholds:
        consistent: ">= 0"
{extra_pipelines}
"""


def run(s, body=REQUEST, name="ops", headers=None, timeout=300):
    import urllib.request
    req = urllib.request.Request(f"{s.url}/v1/pipelines/{name}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def reload(s, text):
    s.config.write_text(s.config.read_text().split("budget:")[0] + text)
    before = s.log().count("SIGHUP: reloaded")
    s.proc.send_signal(1)  # SIGHUP
    deadline = time.time() + 30
    while s.log().count("SIGHUP: reloaded") == before:
        assert time.time() < deadline and "keeping the running config" not in s.log(), s.log()
        time.sleep(0.05)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def ranked(answer):
    probs = answer["decide"]["answers"]["choice"]["probabilities"]
    return sorted(probs, key=lambda k: -probs[k])


# --- verdicts -------------------------------------------------------------------------------

def test_accept_reports_every_probability_threshold_model_and_timing(serve_factory):
    s = serve_factory(config())
    st, a = run(s, headers={"x-typesafe-request-id": "pipe-1"})
    assert st == 200, a
    assert a["verdict"] == "accepted" and a["request_id"] == "pipe-1"
    choice = a["decide"]["answers"]["choice"]
    assert set(choice["probabilities"]) == set(REQUEST["candidates"])
    assert abs(sum(choice["probabilities"].values()) - 1) < 1e-6
    assert a["choice"] == ranked(a)[0] == choice["choice"]
    [attempt] = a["attempts"]
    assert attempt["candidate"] == a["choice"] and attempt["decide"] == choice
    q = attempt["verify"][0]["questions"]
    assert q["consistent"]["threshold"] == ">= 0" and q["consistent"]["passed"] is True
    assert 0 <= q["consistent"]["answer"]["noul"] <= 1
    assert q["severity"]["threshold"] is None and q["severity"]["passed"] is None
    assert 0 <= q["severity"]["answer"]["score"] <= 2
    assert [(m["role"], m["name"], m["sha256"]) for m in a["models"]] == [
        ("decide", A, sha256(fixture_path(A + ".gguf"))),
        ("verify", B, sha256(fixture_path(B + ".gguf")))]
    stages = a["timing"]["stages"]
    assert [x["stage"] for x in stages] == ["decide", "verify[0]"]
    assert all(x[k] >= 0 for x in stages for k in ("queued_ms", "loading_ms", "running_ms"))
    assert a["usage"]["input_tokens"] > 0
    line = [json.loads(x) for x in s.audit.read_text().splitlines()][-1]
    assert line["route"] == "pipeline" and line["pipeline"] == "ops"
    assert line["verdict"] == "accepted" and line["request_id"] == "pipe-1"


def test_reject_after_n_attempts_then_next_best_passes_on_the_second(serve_factory):
    s = serve_factory(config(threshold="> 1", max_attempts=3))
    st, a = run(s)
    assert st == 200 and a["verdict"] == "rejected" and a["choice"] is None, a
    order = ranked(a)
    assert [x["candidate"] for x in a["attempts"]] == order
    assert all(x["passed"] is False for x in a["attempts"])
    assert "3 of 3 candidates tried" in a["reason"]
    # max_attempts bounds the attempts, also per request
    st, two = run(s, {**REQUEST, "max_attempts": 2})
    assert st == 200 and len(two["attempts"]) == 2 and two["verdict"] == "rejected"

    # a threshold between the first and second candidate's answers: the first
    # fails, the second passes
    n1, n2 = (x["verify"][0]["questions"]["consistent"]["answer"]["noul"] for x in a["attempts"][:2])
    assert n1 != n2, "the verifier gave both candidates the same answer"
    mid = (n1 + n2) / 2
    reload(s, config(threshold=(">= " if n2 > n1 else "<= ") + repr(mid)))
    st, b = run(s)
    assert st == 200 and b["verdict"] == "accepted", b
    assert b["choice"] == order[1]
    assert [x["passed"] for x in b["attempts"]] == [False, True]
    assert b["attempts"][0]["verify"][0]["questions"]["consistent"]["passed"] is False
    # the answers did not move between runs
    assert b["attempts"][0]["verify"][0]["questions"]["consistent"]["answer"]["noul"] == n1


def test_reject_rule_stops_after_the_first_candidate(serve_factory):
    s = serve_factory(config(threshold="> 1", on_reject="reject"))
    st, a = run(s)
    assert st == 200 and a["verdict"] == "rejected" and len(a["attempts"]) == 1


def test_min_confidence_rejects_without_verifying(serve_factory):
    s = serve_factory(config())
    st, a = run(s, {**REQUEST, "min_confidence": 0.99})
    assert st == 200 and a["verdict"] == "rejected" and a["attempts"] == []
    assert "below min_confidence" in a["reason"]
    assert [x["stage"] for x in a["timing"]["stages"]] == ["decide"]


def test_escalate_to_a_pipeline_and_to_a_model(serve_factory):
    s = serve_factory(config(threshold="> 1", on_reject="escalate",
                             escalate="      escalate: {pipeline: accept-all}"))
    st, a = run(s)
    assert st == 200 and a["verdict"] == "escalated", a
    assert a["escalation"]["pipeline"] == "accept-all"
    inner = a["escalation"]["result"]
    assert inner["verdict"] == "accepted" and a["choice"] == inner["choice"]
    assert "escalated to pipeline accept-all" in a["reason"]
    reload(s, config(threshold="> 1", on_reject="escalate", escalate="      escalate: {model: verifier}"))
    st, b = run(s)
    assert st == 200 and b["verdict"] == "escalated", b
    assert b["escalation"]["model"] == B
    esc = b["escalation"]["answers"]["choice"]
    assert b["choice"] == esc["choice"] and set(esc["probabilities"]) == set(REQUEST["candidates"])
    assert b["timing"]["stages"][-1]["stage"] == "escalate"


def test_typesafe_sdk_calls_a_pipeline_as_a_model(serve_factory):
    from pydantic import BaseModel
    from typesafe_sdk import TypeSafeAPIError, TypeSafeClient

    class Verdict(BaseModel):
        verdict: str
        choice: str | None
        attempts: list

    s = serve_factory(config())
    client = TypeSafeClient(api_key="local", base_url=s.url, model="pipelines/ops", timeout=120)
    question = {"act": {"type": "choice", "instructions": "Which response should the operator "
                        "take now?", "criteria": REQUEST["candidates"]}}
    r = client.system_one(state=REQUEST["state"], questions=question)
    run(s, OTHER)  # not an exact repeat: both answers are cold (test_deterministic_...)
    st, native = run(s)
    assert st == 200 and native["verdict"] == "accepted"
    assert r.model == "pipelines/ops" and r.choices["act"].choice == native["choice"]
    assert r.choices["act"].probabilities == native["decide"]["answers"]["choice"]["probabilities"]
    assert r.usage.input_tokens == native["usage"]["input_tokens"]
    full = r.raw_http_response.json()
    assert full["verdict"] == "accepted" and full["attempts"][0]["decide"]["probabilities"] == \
        native["attempts"][0]["decide"]["probabilities"]
    typed = client.system_one(state=REQUEST["state"], questions=question, response_model=Verdict)
    assert typed.verdict == "accepted" and typed.choice == native["choice"]
    # overrides ride along as top-level fields; no accepted candidate: no answer
    low = client.system_one(state=REQUEST["state"], questions=question,
                            extra_body={"min_confidence": 0.99})
    assert low.answers == {} and low.raw_http_response.json()["verdict"] == "rejected"
    line = [json.loads(x) for x in s.audit.read_text().splitlines()][-1]
    assert line["route"] == "systemone" and line["pipeline"] == "ops"
    assert line["verdict"] == "rejected"

    with pytest.raises(TypeSafeAPIError) as e:
        client.system_one(state="x", questions={**question, "b": question["act"]})
    assert e.value.status == 400 and e.value.body["error"]["param"] == "questions"
    cases = [({"act": {"type": "noul", "instructions": "ok?"}}, "questions.act.type"),
             ({"act": {**question["act"], "criteria": {"only": "one"}}}, "questions.act.criteria"),
             ({"act": {**question["act"], "extra": 1}}, "questions.act.extra")]
    for qs, field in cases:
        st, err = http("POST", s.url + "/v1/systemone",
                       {"model": "pipelines/ops", "state": "x", "questions": qs})
        assert st == 400 and err["error"]["param"] == field, (qs, err)
        assert err["error"]["message"].startswith(field + ": "), err
    st, err = http("POST", s.url + "/v1/systemone",
                   {"model": "pipelines/nope", "state": "x", "questions": question})
    assert st == 404 and err["error"]["param"] == "model" and "nope" in err["error"]["message"]


# --- requests and configuration -----------------------------------------------------------------

def test_bad_pipeline_requests_name_the_field(serve_factory):
    s = serve_factory(config())
    st, lst = http("GET", s.url + "/v1/pipelines")
    assert st == 200 and [p["name"] for p in lst["pipelines"]] == ["ops", "accept-all"]
    assert lst["pipelines"][0]["verify"][0]["questions"][0] == {
        "id": "consistent", "type": "noul", "threshold": ">= 0"}
    cases = [({"state": "x"}, "candidates"),
             ({**REQUEST, "candidates": {"only": "one"}}, "candidates"),
             ({**REQUEST, "model": "x"}, "model"),
             ({**REQUEST, "max_attempts": 0}, "max_attempts"),
             ({"candidates": REQUEST["candidates"]}, "state")]
    for body, field in cases:
        st, e = run(s, body)
        assert st == 400 and e["error"]["param"] == field, (body, e)
        assert e["error"]["message"].startswith(field + ":")
    st, e = run(s, name="nope")
    assert st == 404 and "nope" in e["error"]["message"]
    assert http("GET", s.url + "/health")[0] == 200


@pytest.mark.parametrize("snippet,where,what", [
    ("{{decide.choise}}", "pipelines.ops.verify[0].questions.consistent.instructions",
     "unknown reference"),
    ("{{verify.later}}", "pipelines.ops.verify[0].questions.consistent.instructions",
     "verify.later"),
    ("Which response now? {{instructions}}", "pipelines.ops.decide.instructions",
     "refers to itself"),
])
def test_template_reference_errors_are_caught_at_load(tandem_bin, tmp_path, snippet, where, what):
    bad = tmp_path / "bad.yaml"
    text = (config().replace("The operator proposes: {{candidates[decide.choice]}}", snippet)
            if "verify" in where else
            config().replace("Which response should the operator take now?", snippet, 1))
    bad.write_text(text)
    line = next(i for i, l in enumerate(text.splitlines(), 1) if snippet in l)
    r = subprocess.run([str(tandem_bin), "serve", "--config", str(bad), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert f"{bad}:{line}: {where}: " in r.stderr and what in r.stderr, r.stderr
    r = subprocess.run([str(tandem_bin), "decide", "--config", str(bad), "--pipeline", "ops",
                        "--state", "x", "--candidate", "a=1", "--candidate", "b=2"],
                       capture_output=True, text=True)
    assert r.returncode != 0


def test_deterministic_across_two_daemons(serve_factory):
    """Byte-identical answers from two daemons, and from one daemon after
    another request. An exact repeat of the request just answered is served
    from the engine's prompt cache, which for the SmolLM2 decider (a label
    readout on a plain KV cache) evaluates one token instead of the whole
    prompt and moves its probabilities by a few hundredths (docs/pipelines.md,
    Determinism): repeats then agree with each other."""
    def numbers(a):
        return json.dumps([a["decide"], [x["verify"] for x in a["attempts"]]])

    answers = []
    for _ in range(2):
        s = serve_factory(config())
        st, a = run(s)
        assert st == 200
        answers.append(numbers(a))
    assert answers[0] == answers[1]
    assert run(s, OTHER)[0] == 200
    assert numbers(run(s)[1]) == answers[0]
    assert numbers(run(s)[1]) == numbers(run(s)[1])


# --- residency ------------------------------------------------------------------------------------

def test_resident_budget_100_pipelines_cause_no_load_after_warm_up(serve_factory):
    s = serve_factory(config("2GiB", tiny=True))
    assert run(s)[0] == 200
    assert s.loads() == {A: 1, B: 1}
    results = []

    def client(n):
        for _ in range(n):
            results.append(run(s)[0])

    threads = [threading.Thread(target=client, args=(25,)) for _ in range(4)]
    [t.start() for t in threads]
    [t.join(600) for t in threads]
    assert results == [200] * 100
    assert s.loads() == {A: 1, B: 1}


def test_rotating_budget_burst_of_20_costs_at_most_4_loads(serve_factory):
    # it counts loads, never a probability: the tiny stand-ins, on a budget that rotates them
    s = serve_factory(config(rotating_budget(serve_factory, lambda b: config(b, tiny=True)),
                             tiny=True))
    results = []
    t0 = time.time()

    def one():  # each evaluated: identical requests would otherwise wait as one
        results.append(run(s, headers={"Cache-Control": "no-cache"}))

    threads = [threading.Thread(target=one) for _ in range(20)]
    [t.start() for t in threads]
    [t.join(600) for t in threads]
    took = time.time() - t0
    assert [st for st, _ in results] == [200] * 20, [a for st, a in results if st != 200][:2]
    loads = sum(s.loads().values())
    print(f"rotating budget: 20 concurrent pipeline requests, {loads} loads, {took:.1f} s")
    assert loads <= 4


# --- tandem decide --------------------------------------------------------------------------------

def decide(tandem_bin, cfg, *args, timeout=300):
    return subprocess.run([str(tandem_bin), "decide", "--config", str(cfg), *args],
                          capture_output=True, text=True, timeout=timeout)


def test_decide_one_shot_starts_and_stops_its_engines(tandem_bin, tmp_path):
    cfg = tmp_path / "tandem.yaml"
    cfg.write_text(f"listen: 127.0.0.1:1\nlogs:\n  dir: {tmp_path}/logs\n" + config())
    req = tmp_path / "req.json"
    req.write_text(json.dumps(REQUEST))
    r = decide(tandem_bin, cfg, "--pipeline", "ops", "--request", str(req))
    assert r.returncode == 0, r.stderr
    a = json.loads(r.stdout)
    assert a["verdict"] == "accepted" and a["choice"] in REQUEST["candidates"]
    r = decide(tandem_bin, cfg, "--pipeline", "ops", "--human", "--state", REQUEST["state"],
               "--candidate", "reduce=Reduce concurrency", "--candidate", "stop=Stop the docs")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("verdict: accepted: ") and "attempt 1:" in r.stdout
    # no engine or daemon outlives it
    left = subprocess.run(["pgrep", "-f", str(cfg)], capture_output=True, text=True).stdout
    assert left == ""


def test_decide_exit_codes_through_a_running_daemon(serve_factory, tandem_bin):
    s = serve_factory(config(threshold="> 1", max_attempts=1))
    args = ["--pipeline", "ops", "--state", REQUEST["state"], "--candidate", "a=one",
            "--candidate", "b=two"]
    r = decide(tandem_bin, s.config, *args)
    assert r.returncode == 3, r.stderr
    assert "answered by the daemon at" in r.stderr
    assert json.loads(r.stdout)["verdict"] == "rejected"
    reload(s, config(threshold="> 1", on_reject="escalate",
                     escalate="      escalate: {pipeline: accept-all}"))
    assert decide(tandem_bin, s.config, *args).returncode == 4
    assert decide(tandem_bin, s.config, "--pipeline", "accept-all", *args[2:]).returncode == 0
    assert decide(tandem_bin, s.config, "--pipeline", "nope", *args[2:]).returncode == 2
    assert decide(tandem_bin, s.config, "--pipeline", "ops", "--state", "x").returncode == 2
