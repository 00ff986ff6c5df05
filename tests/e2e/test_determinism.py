"""Determinism through `tandem serve`: the same request gets byte-identical
answers however it is sent (docs/serve.md, Determinism).

Four fixture kinds are served as models of one daemon on the CPU: the SmolLM2
label reader (openjev over a plain KV cache), the Gemma-3 decider (openjev,
sliding-window attention), kev-tiny (Kev, recurrent layers) and laya-tiny (an
encoder). Each gets the same small request set: three cases of
tests/data/eval/decisions.jsonl (one with two questions, two with one) and
test_deciders.MIXED (a choice, a score and a noul). The exact bytes of every
"answers" value are compared with a baseline, the set sent once in order,
when the set is sent:

1. once more in order;
2. back to back, each request twice in a row. The engine answers a prompt
   its slot holds whole by evaluating its last token alone, which the CPU
   kernels round differently from the whole prompt: on SmolLM2 a repeated
   single question moves by a few hundredths (each question is its own engine
   task, so when a request of several comes again, its first question meets
   the previous request's last one in the slot). tandem must not let that
   through;
3. by four concurrent clients, each in its own order (X-Tandem-Queue-Position
   shows that requests really waited behind each other);
4. interleaved with another model's requests on a host RAM budget that never
   holds the two together, so that the model is evicted and loaded again
   (its loads and evictions counters say so);
5. after its engine is killed and tandem starts a new one (the pid changes,
   crashes and loads count it).

Then a decide-then-verify pipeline (SmolLM2 decides, Gemma-3 verifies, both
resident) gives the same verdict bytes, the decider's probabilities and the
verifier's answers, for a request repeated back to back and interleaved with
another; and the OpenAI passthrough gives the same "choices" (the text and
every token's logprob with three alternatives) for the same messages back to
back and as A, B, A (where the engine's host-RAM prompt cache would restore
A's whole prompt).

Every engine runs one thread: on two cores shared with other jobs, engines
whose spinning threads lose a core to another process stall each other (this
file took 3.5 minutes with two threads each, 1.5 with one, on the same busy
machine). Thread count is not what is under test: every comparison is
between answers of the same engine settings."""
import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import ROOT, SANITIZER_REPORT, Serve, fixture_path
from test_deciders import MIXED, answers_json
from test_pipeline import OTHER as PIPELINE_OTHER
from test_pipeline import REQUEST as PIPELINE_REQUEST

TIMEOUT = 300  # per request: other jobs share this machine's two cores

# name -> (fixture, model keys): laya-tiny is a whole-batch encoder whose
# window is 512 tokens, so the whole prompt must fit one micro-batch
MODELS = {
    "smollm2": ("smollm2-decider.gguf", "    ctx: 2048\n"),
    "gemma3": ("gemma3-decider.gguf", "    ctx: 2048\n"),
    "kev": ("kev-tiny.gguf", "    ctx: 1024\n"),
    "laya": ("laya-tiny.gguf", "    ctx: 512\n    batch: 512\n    ubatch: 512\n"),
}

# a two-question case, then single-question ones (on a single question an
# exact repeat is read from the cached prompt's last token alone), then MIXED
CASE_IDS = ["res-tight", "ops-log-warning", "res-swap"]


def load_cases():
    rows = {}
    for line in (ROOT / "tests" / "data" / "eval" / "decisions.jsonl").read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows[row["id"]] = {"state": row["state"], "questions": row["questions"]}
    cases = [(cid, rows[cid]) for cid in CASE_IDS] + [("MIXED", MIXED)]
    assert {len(b["questions"]) for _, b in cases} == {1, 2, 3}
    return cases


CASES = load_cases()


def post(url, body, timeout=TIMEOUT):
    """Returns (status, raw body bytes, headers) of one POST."""
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def value_bytes(raw, key):
    """The exact bytes of the top-level member `key` of a raw JSON body."""
    text = raw.decode()
    start = text.index(f'"{key}":') + len(key) + 3
    value, end = json.JSONDecoder().raw_decode(text, start)
    assert value == json.loads(text)[key], f"{key}: not the top-level member"
    return text[start:end].encode()


def ask(s, model, body):
    """One /v1/systemone request; returns (exact answers bytes, queue position)."""
    status, raw, headers = post(s.url + "/v1/systemone", {**body, "model": model})
    assert status == 200, (model, raw[:500])
    assert headers["X-Tandem-Model"] == model
    return answers_json(raw), int(headers["X-Tandem-Queue-Position"])


def differences(model, baseline, got, how):
    """Lines naming every answer in got (case id -> list of answers bytes)
    that is not the baseline's bytes for that case."""
    out = []
    for cid, answers in got.items():
        for i, a in enumerate(answers):
            if a != baseline[cid]:
                out.append(f"{model} {cid} ({how}, sent #{i + 1}):\n"
                           f"  baseline {baseline[cid].decode()}\n  got      {a.decode()}")
    return out


def assert_same(model, baseline, got, how):
    diff = differences(model, baseline, got, how)
    n = sum(len(v) for v in got.values())
    assert not diff, f"{len(diff)} of {n} answers differ from the baseline:\n" + "\n".join(diff)


def models_config(budget):
    # the decision cache off: every repeat must reach the engine, whose answers are under test
    text = (f"budget:\n  ram: {budget}\nlimits:\n  request_timeout: {TIMEOUT}s\n"
            "cache:\n  max_bytes: 0\nmodels:\n")
    for name, (gguf, keys) in MODELS.items():
        text += f"  {name}:\n    path: {fixture_path(gguf)}\n    threads: 1\n{keys}"
    return text


def wait_for(cond, timeout=60):
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, "condition not reached in time"
        time.sleep(0.02)


def stop_clean(s):
    code = s.stop()
    assert code == 0, f"tandem serve exited {code}: {s.log()[-2000:]}"
    assert not SANITIZER_REPORT.search(s.log()), s.log()[-4000:]


@pytest.fixture(scope="module")
def daemon(tandem_bin, tmp_path_factory):
    """One daemon serving the four models on a host RAM budget of the largest
    one's plan plus half the smallest one's: each fits alone, and each has a
    partner it never fits beside (the largest, or for the largest any other)."""
    probe = Serve(tandem_bin, tmp_path_factory.mktemp("probe"), models_config("8GiB"))
    planned = {m["name"]: m["planned"]["host_bytes"] for m in probe.status()["models"]}
    stop_clean(probe)
    budget = max(planned.values()) + min(planned.values()) // 2
    s = Serve(tandem_bin, tmp_path_factory.mktemp("serve"), models_config(f"{budget}B"))
    s.planned = {m["name"]: m["planned"]["host_bytes"] for m in s.status()["models"]}
    s.budget = budget
    yield s
    stop_clean(s)


@pytest.fixture(scope="module", params=list(MODELS))
def model(request):
    return request.param


@pytest.fixture(scope="module")
def baseline(daemon, model):
    """Each request of the set once, in order: case id -> answers bytes."""
    got = {cid: ask(daemon, model, body)[0] for cid, body in CASES}
    assert len(set(got.values())) == len(got), f"{model}: two cases gave the same answers"
    for cid, body in CASES:
        assert list(json.loads(got[cid])) == list(body["questions"]), (model, cid)
    return got


def test_in_order_again_gives_the_baseline(daemon, model, baseline):
    got = {cid: [ask(daemon, model, body)[0]] for cid, body in CASES}
    assert_same(model, baseline, got, "in order, second pass")


def test_back_to_back_repeats_give_the_baseline(daemon, model, baseline):
    loads = daemon.model(model)["loads"]
    got = {cid: [ask(daemon, model, body)[0] for _ in range(2)] for cid, body in CASES}
    assert daemon.model(model)["loads"] == loads, "the engine was replaced between the repeats"
    assert_same(model, baseline, got, "back to back")


def test_concurrent_clients_in_different_orders_give_the_baseline(daemon, model, baseline):
    n = len(CASES)
    orders = [list(range(n)), list(range(n))[::-1], [(i + 2) % n for i in range(n)],
              [(n - 1 - i + 2) % n for i in range(n)]]
    assert len({tuple(o) for o in orders}) == 4
    start = threading.Barrier(len(orders))
    results, errors = [], []

    def client(order):
        try:
            start.wait(60)
            for i in order:
                cid, body = CASES[i]
                results.append((cid, *ask(daemon, model, body)))
        except BaseException as e:  # reported below, on the test's thread
            errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(o,)) for o in orders]
    [t.start() for t in threads]
    [t.join(TIMEOUT * n) for t in threads]
    assert not errors, errors
    assert len(results) == len(orders) * n
    waited = max(pos for _, _, pos in results)
    print(f"\n{model}: {len(results)} concurrent requests, up to {waited} queued ahead of one")
    assert waited >= 1, "no request ever waited behind another: the clients did not overlap"
    got = {}
    for cid, answers, _ in results:
        got.setdefault(cid, []).append(answers)
    assert_same(model, baseline, got, "4 concurrent clients")


def test_interleaved_with_a_model_that_evicts_it_gives_the_baseline(daemon, model, baseline):
    size = daemon.planned
    # the smallest model (the quickest to load) that never fits beside this one
    partner = min((k for k in size if k != model and size[k] + size[model] > daemon.budget),
                  key=size.get)
    before = daemon.model(model)
    got = {}
    for part in (CASES[:2], CASES[2:]):
        ask(daemon, partner, CASES[-2][1])  # loads the partner, evicting the model
        for cid, body in part:
            got.setdefault(cid, []).append(ask(daemon, model, body)[0])
    after = daemon.model(model)
    swaps = (after["loads"] - before["loads"], after["evictions"] - before["evictions"])
    print(f"\n{model}: interleaved with {partner}: {swaps[0]} loads, {swaps[1]} evictions")
    assert min(swaps) >= 2, f"{model} was not swapped out and back twice: {swaps}"
    assert_same(model, baseline, got, f"interleaved with {partner} across swaps")


def test_after_an_engine_restart_gives_the_baseline(daemon, model, baseline):
    if daemon.model(model)["state"] != "resident":
        ask(daemon, model, CASES[-2][1])
    before = daemon.model(model)
    os.kill(before["pid"], signal.SIGKILL)
    wait_for(lambda: daemon.model(model)["crashes"] == before["crashes"] + 1, timeout=60)
    got = {cid: [ask(daemon, model, body)[0]] for cid, body in CASES}
    after = daemon.model(model)
    assert after["loads"] == before["loads"] + 1 and after["pid"] != before["pid"], after
    assert_same(model, baseline, got, "after the engine was killed and restarted")


# --- a pipeline and the OpenAI passthrough ------------------------------------------------------

DECIDER, VERIFIER = "smollm2-decider", "gemma3-decider"


@pytest.fixture(scope="module")
def pair(tandem_bin, tmp_path_factory):
    """The decide-then-verify pair, both resident (2 GiB holds them)."""
    s = Serve(tandem_bin, tmp_path_factory.mktemp("pair"), f"""budget:
  ram: 2GiB
limits:
  request_timeout: {TIMEOUT}s
cache:
  max_bytes: 0
models:
  {DECIDER}:
    path: {fixture_path(DECIDER + '.gguf')}
    ctx: 2048
    threads: 1
  {VERIFIER}:
    path: {fixture_path(VERIFIER + '.gguf')}
    ctx: 2048
    threads: 1
pipelines:
  ops:
    decide:
      model: {DECIDER}
      instructions: Which response should the operator take now?
    verify:
      - model: {VERIFIER}
        questions:
          consistent:
            type: noul
            instructions: >-
              The operator proposes: {{{{candidates[decide.choice]}}}}.
              Is it consistent with the situation?
          severity:
            type: score
            instructions: How risky is "{{{{decide.choice}}}}"?
            criteria: [safe, risky, dangerous]
    verdict:
      thresholds:
        consistent: ">= 0"
""")
    yield s
    stop_clean(s)


def test_pipeline_repeated_and_interleaved_gives_the_same_verdict_bytes(pair):
    """P and Q are two situations; the first P and the first Q are the
    baseline. P after Q is interleaved, the second P in a row is an exact
    repeat on the running decider (and verifier)."""
    requests = {"P": PIPELINE_REQUEST, "Q": PIPELINE_OTHER}
    got = {}
    for name in "PQPPQQ":
        status, raw, _ = post(pair.url + "/v1/pipelines/ops", requests[name])
        assert status == 200, raw[:500]
        verdict = json.loads(raw)
        assert verdict["verdict"] == "accepted" and verdict["attempts"][0]["verify"], verdict
        got.setdefault(name, []).append(b"".join(value_bytes(raw, k) + b"\n" for k in
                                                 ("verdict", "choice", "decide", "attempts")))
    assert pair.loads() == {DECIDER: 1, VERIFIER: 1}, "an engine was replaced"
    baseline = {name: answers[0] for name, answers in got.items()}
    assert baseline["P"] != baseline["Q"]
    assert_same("pipeline ops", baseline, got, "in the sequence P Q P P Q Q")


def test_openai_passthrough_repeated_and_interleaved_gives_the_same_choices(pair):
    # prompts long enough that a one-token evaluation of their end rounds
    # differently from the whole batch (a short one, "Name a colour.", does not)
    ticket = ("A customer writes: 'My package never arrived and it has been three weeks.' "
              "Which team should handle it?")
    system = ("You are the on-call assistant for a build farm. Answer in one short sentence, "
              "naming one concrete action.")
    ask_ops = PIPELINE_REQUEST["state"] + " What should I do?"
    messages = {"A": [{"role": "user", "content": ticket}],
                "B": [{"role": "system", "content": system}, {"role": "user", "content": ask_ops}]}
    got = {}
    for name in "AABABB":
        status, raw, _ = post(pair.url + "/v1/chat/completions", {
            "model": DECIDER, "messages": messages[name], "temperature": 0, "max_tokens": 8,
            "logprobs": True, "top_logprobs": 3})
        assert status == 200, raw[:500]
        [choice] = json.loads(raw)["choices"]
        tokens = choice["logprobs"]["content"]
        assert len(tokens) == 8 and all(len(t["top_logprobs"]) == 3 for t in tokens), choice
        got.setdefault(name, []).append(value_bytes(raw, "choices"))
    assert pair.model(DECIDER)["loads"] == 1, "the engine was replaced"
    baseline = {name: answers[0] for name, answers in got.items()}
    assert baseline["A"] != baseline["B"]
    assert_same("chat " + DECIDER, baseline, got, "in the sequence A A B A B B")
