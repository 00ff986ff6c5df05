"""The label-logit decider fixtures, served for real.

scripts/make-fixtures.sh turns the two real instruct models into openjev
decision models by adding metadata only (decision type + a "systemone"
template, see docs/fixtures.md). Here the pinned llama-server serves each one
and we check the /v1/systemone contract (shape, probabilities, determinism,
errors) and measure accuracy on the hand-written easy set
tests/data/decider-easy.jsonl.
"""
import json

import pytest

from conftest import ROOT, LlamaServer, fixture_path, http_raw

EASY = ROOT / "tests" / "data" / "decider-easy.jsonl"

# name -> (fixture file, must beat chance on the easy set?)
# Gemma-3-270M answers "A" to everything (likely the base model), so its
# accuracy is reported, not asserted. SmolLM2 beats chance on the easy set, but
# mostly by its own letter bias; the position-balanced test below shows both
# at chance. See docs/fixtures.md, "Deciders from real models".
DECIDERS = {
    "smollm2": ("smollm2-decider.gguf", True),
    "gemma3": ("gemma3-decider.gguf", False),
}

TIMEOUT = 300

# -fa off: on CPU, flash attention makes the logits depend on how the prompt is
# split between the cached prefix and the new batch, so a question answered from
# a cold cache differs (by ~0.03 in p) from the same question answered warm.
# Without it the answers are bit-identical whatever the cache holds.
# test_flash_attention_cold_vs_warm pins down the default behaviour.
DECIDER_ARGS = ["-c", "2048", "-np", "1", "-fa", "off"]


def post_raw(url, body):
    return http_raw("POST", url, body, timeout=TIMEOUT)


def answers_json(raw):
    """The exact bytes of the "answers" value inside a raw response body."""
    doc = json.loads(raw)
    start = raw.index(b'"answers":') + len(b'"answers":')
    # the server writes model, answers, usage in that order, compactly
    end = raw.index(b',"usage":', start)
    piece = raw[start:end]
    assert json.loads(piece) == doc["answers"]
    return piece


@pytest.fixture(scope="module", params=list(DECIDERS))
def decider(request, engine_path, tmp_path_factory):
    name = request.param
    path = fixture_path(DECIDERS[name][0])
    server = LlamaServer(engine_path, path, tmp_path_factory.mktemp(name) / "llama-server.log",
                         extra_args=DECIDER_ARGS)
    server.start()
    server.name = name
    yield server
    server.kill()


MIXED = {
    "state": "The customer writes: 'My package never arrived and it has been three weeks.'",
    "questions": {
        "route": {"type": "choice", "instructions": "Which team should handle this message?",
                  "criteria": {"billing": "payments and refunds",
                               "shipping": "deliveries and lost parcels",
                               "technical": "bugs and login problems",
                               "sales": None}},
        "upset": {"type": "score", "instructions": "How upset is the customer?",
                  "criteria": ["calm", "a bit annoyed", "angry", "furious"]},
        "lost": {"type": "noul", "instructions": "Does the customer say the package did not arrive?",
                 "criteria": None},
    },
}


def test_loads_as_openjev(decider):
    log = decider.log_text()
    assert "decision model type: openjev" in log, decider.log_tail()


def test_mixed_request_is_valid_and_deterministic(decider):
    status, raw = post_raw(decider.url + "/v1/systemone", MIXED)
    assert status == 200, raw
    body = json.loads(raw)
    assert list(body) == ["model", "answers", "usage"]
    answers = body["answers"]
    assert list(answers) == ["route", "upset", "lost"]

    route = answers["route"]
    assert route["type"] == "choice"
    probs = route["probabilities"]
    assert list(probs) == list(MIXED["questions"]["route"]["criteria"])
    assert abs(sum(probs.values()) - 1) < 1e-5
    assert all(0 <= p <= 1 for p in probs.values())
    assert route["choice"] == max(probs, key=probs.get)
    assert 0 <= route["confidence"] <= 1

    upset = answers["upset"]
    assert upset["type"] == "score"
    levels = MIXED["questions"]["upset"]["criteria"]
    assert upset["legend"] == {str(i): d for i, d in enumerate(levels)}
    sp = upset["probabilities"]
    assert list(sp) == [str(i) for i in range(len(levels))]
    assert abs(sum(sp.values()) - 1) < 1e-5
    assert abs(upset["score"] - sum(i * sp[str(i)] for i in range(len(levels)))) < 1e-6
    assert 0 <= upset["confidence"] <= 1

    lost = answers["lost"]
    assert lost["type"] == "noul" and set(lost) == {"type", "noul"}
    assert 0 <= lost["noul"] <= 1

    assert body["usage"]["output_tokens"] == 0
    assert body["usage"]["input_tokens"] > 0

    status2, raw2 = post_raw(decider.url + "/v1/systemone", MIXED)
    assert status2 == 200, raw2
    assert answers_json(raw2) == answers_json(raw), "the same request gave different answers"
    print(f"\n{decider.name}: {answers_json(raw).decode()}")


def test_too_many_options_is_a_clear_400(decider):
    body = {"state": "x", "questions": {"pick": {
        "type": "choice", "instructions": "Pick one.",
        "criteria": {f"option{i}": None for i in range(60)}}}}
    status, raw = post_raw(decider.url + "/v1/systemone", body)
    assert status == 400, raw
    msg = json.loads(raw)["error"]["message"]
    assert "questions.pick" in msg and "60" in msg and "at most 52" in msg, msg


def test_bad_score_levels_is_a_clear_400(decider):
    body = {"state": "x", "questions": {"rate": {
        "type": "score", "instructions": "Rate it.", "criteria": ["only one level"]}}}
    status, raw = post_raw(decider.url + "/v1/systemone", body)
    assert status == 400, raw
    assert "questions.rate" in json.loads(raw)["error"]["message"]


def load_easy():
    cases = [json.loads(line) for line in EASY.read_text().splitlines() if line.strip()]
    assert len(cases) >= 20
    return cases


def top_answer(question, answer):
    kind = question["type"]
    if kind == "choice":
        return answer["choice"]
    if kind == "noul":
        return answer["noul"] >= 0.5
    probs = answer["probabilities"]
    return int(max(probs, key=probs.get))


def n_options(question):
    return {"choice": lambda q: len(q["criteria"]), "noul": lambda q: 2,
            "score": lambda q: len(q["criteria"])}[question["type"]](question)


def test_accuracy_on_easy_set(decider):
    hits, chance, per_type, misses = [], [], {}, []
    for case in load_easy():
        status, raw = post_raw(decider.url + "/v1/systemone",
                               {"state": case["state"], "questions": case["questions"]})
        assert status == 200, (case["id"], raw)
        answers = json.loads(raw)["answers"]
        for qid, q in case["questions"].items():
            ok = top_answer(q, answers[qid]) == case["gold"][qid]
            hits.append(ok)
            chance.append(1 / n_options(q))
            per_type.setdefault(q["type"], []).append(ok)
            if not ok:
                misses.append(f"{case['id']}.{qid}")
    acc = sum(hits) / len(hits)
    base = sum(chance) / len(chance)
    breakdown = ", ".join(f"{t} {sum(v)}/{len(v)}" for t, v in sorted(per_type.items()))
    print(f"\n{decider.name}: accuracy {acc:.2f} on {len(hits)} questions "
          f"(chance {base:.2f}; {breakdown}); missed: {' '.join(misses) or 'none'}")
    if DECIDERS[decider.name][1]:
        assert acc > base, f"{decider.name} is not better than chance ({acc:.2f} <= {base:.2f})"


def rotations(criteria):
    keys = list(criteria)
    return [{k: criteria[k] for k in keys[i:] + keys[:i]} for i in range(len(keys))]


def test_position_balanced_choice_accuracy(decider):
    """Small models prefer some letters whatever the question (Gemma-3-270M
    answers A almost always). Asking every choice question once per cyclic
    rotation of its options puts the gold option at every letter equally, so
    this number is free of the easy set's gold-position mix. Reported only."""
    hits, chance, p_gold = [], [], []
    for case in load_easy():
        for qid, q in case["questions"].items():
            if q["type"] != "choice":
                continue
            questions = {f"{qid}.r{i}": dict(q, criteria=crit)
                         for i, crit in enumerate(rotations(q["criteria"]))}
            status, raw = post_raw(decider.url + "/v1/systemone",
                                   {"state": case["state"], "questions": questions})
            assert status == 200, (case["id"], raw)
            for answer in json.loads(raw)["answers"].values():
                hits.append(answer["choice"] == case["gold"][qid])
                p_gold.append(answer["probabilities"][case["gold"][qid]])
                chance.append(1 / len(q["criteria"]))
    acc = sum(hits) / len(hits)
    print(f"\n{decider.name}: position-balanced choice accuracy {acc:.2f} on {len(hits)} "
          f"rotated questions (chance {sum(chance) / len(chance):.2f}); "
          f"mean p(gold) {sum(p_gold) / len(p_gold):.3f}")


def test_flash_attention_cold_vs_warm(engine_path, tmp_path):
    """With the default flash attention (auto = on, on CPU), repeats on a warm
    cache are byte-identical, and the cold first answer is close to them."""
    server = LlamaServer(engine_path, fixture_path(DECIDERS["smollm2"][0]),
                         tmp_path / "llama-server.log", extra_args=["-c", "2048", "-np", "1"])
    server.start()
    try:
        bodies = []
        for _ in range(3):
            status, raw = post_raw(server.url + "/v1/systemone", MIXED)
            assert status == 200, raw
            bodies.append(raw)
    finally:
        server.kill()
    assert answers_json(bodies[1]) == answers_json(bodies[2])
    cold, warm = (json.loads(b)["answers"] for b in bodies[:2])
    diff = max(abs(cold[q]["probabilities"][k] - warm[q]["probabilities"][k])
               for q in ("route", "upset") for k in cold[q]["probabilities"])
    diff = max(diff, abs(cold["lost"]["noul"] - warm["lost"]["noul"]))
    print(f"\nflash attention on: cold vs warm max |dp| = {diff:.4f}")
    assert diff < 0.1
