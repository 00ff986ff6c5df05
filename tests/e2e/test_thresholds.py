"""`tandem eval --suggest-thresholds`, `--write-thresholds` and `--apply` on the demo pipeline.

The verifier set tests/data/eval/verify-demo.jsonl holds examples/demo.yaml's verify
questions with gold answers. The real pinned llama-server answers them with the demo's
verifier (Gemma-3) and the choice questions of the shipped set with its decider
(SmolLM2); every suggested cut is recomputed here from the per-question results, the
rewritten config must keep its comments and pass `tandem serve --check`. One test serves
hand-chosen answers from a stub endpoint (tests/e2e/s1stub.py), where the cut, its written
value and an unreachable target are known in advance.
"""
import json
import subprocess

import pytest
import yaml

from conftest import ROOT, LlamaServer, fixture_path
from s1stub import Endpoint
from test_deciders import DECIDER_ARGS
from test_remote import example

VERIFY = ROOT / "tests" / "data" / "eval" / "verify-demo.jsonl"
DECISIONS = ROOT / "tests" / "data" / "eval" / "decisions.jsonl"


def tandem(tandem_bin, *args, timeout=900):
    return subprocess.run([str(tandem_bin), *args], capture_output=True, text=True,
                          timeout=timeout)


def engine(engine_path, tmp_path_factory, name):
    server = LlamaServer(engine_path, fixture_path(name),
                         tmp_path_factory.mktemp("thr") / "llama-server.log",
                         extra_args=DECIDER_ARGS)
    server.start()
    return server


@pytest.fixture(scope="module")
def verifier(engine_path, tmp_path_factory):
    server = engine(engine_path, tmp_path_factory, "gemma3-decider.gguf")
    yield server
    server.kill()


def lines(path, n=None):
    out = [json.loads(l) for l in path.read_text().splitlines() if l.strip()]
    return out[:n] if n else out


def write_set(path, cases):
    path.write_text("".join(json.dumps(c) + "\n" for c in cases))
    return path


def demo_config(tmp_path):
    path = tmp_path / "demo.yaml"
    path.write_text(example("demo.yaml"))
    return path


def p_true(item):
    return item["p"] if item["answer"] is True else 1 - item["p"]


def expected_cut(scores, target):
    """The largest cut (accept score >= v) whose precision reaches target: (v, accepted, right)."""
    best = None
    for v in sorted({s for s, _ in scores}, reverse=True):
        kept = [ok for s, ok in scores if s >= v]
        if sum(kept) / len(kept) >= target:
            best = (v, len(kept), sum(kept))
    return best


def check_group(group, scores, target):
    want = expected_cut(scores, target)
    if want is None:
        assert group["status"] == "unreachable"
        return
    assert group["status"] == "ok", group
    v, accepted, right = want
    t = group["threshold"]
    assert sum(1 for s, _ in scores if s >= t) == accepted, "the written value keeps the cut"
    assert group["accepted"] == accepted and group["answers"] == len(scores)
    assert group["precision"] == pytest.approx(right / accepted)
    assert group["coverage"] == pytest.approx(accepted / len(scores))
    assert t <= v and group["precision"] >= target
    lo, hi = group["interval"]
    assert lo is None or hi is None or lo <= hi


def test_suggest_write_and_apply_on_the_demo_pipeline(tandem_bin, verifier, engine_path,
                                                       tmp_path, tmp_path_factory):
    data = write_set(tmp_path / "verify.jsonl", lines(VERIFY, 16))
    config = demo_config(tmp_path)
    original = config.read_text()
    target = 0.6
    r = tandem(tandem_bin, "eval", "--endpoint", verifier.url, "--data", str(data), "--json",
               "--suggest-thresholds", "--target-precision", str(target),
               "--write-thresholds", "decide", "--apply", str(config))
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    th = s["thresholds"]
    assert th["target_precision"] == target and th["min_answers"] == 6
    assert th["pipeline"] == "decide"
    groups = {g["question"]: g for g in th["questions"]}
    assert set(groups) == {"consistent", "on_topic"}
    for q, g in groups.items():
        scores = [(p_true(i), i["gold"] is True) for i in s["results"] if i["question"] == q]
        assert g["op"] == ">=" and g["key"] == "thresholds"
        check_group(g, scores, target)
    snippet = yaml.safe_load(th["yaml"])
    written = snippet["pipelines"]["decide"]["verdict"]["thresholds"]
    assert written == {q: g["value"] for q, g in groups.items()}

    # --apply: the values changed in place, every comment kept, the old file in .bak
    assert (tmp_path / "demo.yaml.bak").read_text() == original
    text = config.read_text()
    for q, g in groups.items():
        assert f'        {q}: "{g["value"]}"\n' in text
    comments = [l for l in original.splitlines() if l.lstrip().startswith("#") or " # " in l]
    assert comments and all(c in text.splitlines() for c in comments)
    assert len(text.splitlines()) == len(original.splitlines())
    check = tandem(tandem_bin, "serve", "--config", str(config), "--check")
    assert check.returncode == 0, check.stderr

    # the decider's confidence, from the shipped set's choice questions, adds min_confidence
    decider = engine(engine_path, tmp_path_factory, "smollm2-decider.gguf")
    try:
        choice = []
        for c in lines(DECISIONS):
            qs = {k: q for k, q in c["questions"].items() if q["type"] == "choice"}
            if qs:
                choice.append(dict(c, questions=qs,
                                   gold={k: v for k, v in c["gold"].items() if k in qs}))
        data = write_set(tmp_path / "decide.jsonl", choice[:16])
        r = tandem(tandem_bin, "eval", "--endpoint", decider.url, "--data", str(data),
                   "--suggest-thresholds", "--target-precision", "0.5",
                   "--write-thresholds", "decide", "--apply", str(config))
    finally:
        decider.kill()
    assert r.returncode == 0, r.stderr
    assert "min_confidence: " in r.stdout and "decide confidence" in r.stdout
    value = yaml.safe_load(r.stdout[r.stdout.index("# tandem eval --suggest"):])
    mc = value["pipelines"]["decide"]["verdict"]["min_confidence"]
    assert 0 <= mc <= 1
    cfg = yaml.safe_load(config.read_text())
    assert cfg["pipelines"]["decide"]["verdict"]["min_confidence"] == mc
    assert cfg["pipelines"]["decide"]["verdict"]["thresholds"] == written
    check = tandem(tandem_bin, "serve", "--config", str(config), "--check")
    assert check.returncode == 0, check.stderr


def test_a_question_outside_the_pipeline_is_named(tandem_bin, tmp_path):
    config = demo_config(tmp_path)
    data = write_set(tmp_path / "d.jsonl", lines(DECISIONS))
    r = tandem(tandem_bin, "eval", "--endpoint", "http://127.0.0.1:9", "--data", str(data),
               "--write-thresholds", "decide", "--config", str(config))
    assert r.returncode == 1
    assert "question refund is not a verify question of pipeline decide (its noul verify " \
           "questions: consistent, on_topic)" in r.stderr, r.stderr
    assert f"{data}:1:" in r.stderr
    r = tandem(tandem_bin, "eval", "--endpoint", "http://127.0.0.1:9", "--data", str(data),
               "--write-thresholds", "nope", "--config", str(config))
    assert r.returncode == 1 and "has no pipeline of that name" in r.stderr, r.stderr


def test_too_few_cases_say_how_many_are_needed(tandem_bin, tmp_path):
    data = write_set(tmp_path / "few.jsonl", lines(VERIFY, 12))
    r = tandem(tandem_bin, "eval", "--endpoint", "http://127.0.0.1:9", "--data", str(data),
               "--suggest-thresholds")
    assert r.returncode == 1
    assert "too few cases for a precision of 0.95: consistent: 12 cases with a gold answer; " \
           "on_topic: 12 cases with a gold answer; each needs at least 59" in r.stderr, r.stderr


def test_flag_combinations_are_usage_errors(tandem_bin, tmp_path):
    config = demo_config(tmp_path)
    base = ["eval", "--endpoint", "http://127.0.0.1:9", "--data", str(VERIFY)]
    for extra, msg in [(["--apply", str(config)], "--apply"),
                       (["--write-thresholds", "decide"], "needs the config"),
                       (["--config", str(config)], "is read for --write-thresholds"),
                       (["--target-precision", "1.5", "--suggest-thresholds"],
                        "--target-precision 1.5")]:
        r = tandem(tandem_bin, *base, *extra)
        assert r.returncode == 2 and msg in r.stderr, (extra, r.stderr)
    assert config.read_text() == example("demo.yaml")


def test_a_below_threshold_in_the_config_is_suggested_below(tandem_bin, verifier, tmp_path):
    """on_topic written "<= 0.5" in the config: true is the bad answer there, so the cut
    accepts P(true) at or below it and precision counts gold false."""
    config = tmp_path / "demo.yaml"
    config.write_text(example("demo.yaml").replace('on_topic: ">= 0.5"', 'on_topic: "<= 0.5"'))
    data = write_set(tmp_path / "verify.jsonl", lines(VERIFY, 16))
    r = tandem(tandem_bin, "eval", "--endpoint", verifier.url, "--data", str(data), "--json",
               "--target-precision", "0.5", "--write-thresholds", "decide", "--config",
               str(config))
    s = json.loads(r.stdout)
    g = {g["question"]: g for g in s["thresholds"]["questions"]}["on_topic"]
    assert g["op"] == "<="
    items = [i for i in s["results"] if i["question"] == "on_topic"]
    # the same search on -P(true), right when gold is false
    want = expected_cut([(-p_true(i), i["gold"] is False) for i in items], 0.5)
    if want is None:  # the 16 cases hold 4 off-topic ones: the verifier may not find them
        assert g["status"] == "unreachable" and r.returncode == 1
        assert "on_topic: no threshold reaches a precision of 0.5" in r.stderr
        return
    assert r.returncode == 0, r.stderr
    v, accepted, right = want
    assert g["status"] == "ok" and g["value"].startswith("<= ")
    assert float(g["value"][3:]) == g["threshold"] >= -v
    assert sum(1 for i in items if p_true(i) <= g["threshold"]) == accepted
    assert g["accepted"] == accepted and g["precision"] == pytest.approx(right / accepted)
    assert f'on_topic: "{g["value"]}"' in s["thresholds"]["yaml"]


def test_a_bad_compare_file_is_refused_before_anything_is_sent(tandem_bin, tmp_path):
    bad = tmp_path / "before.json"
    bad.write_text('{"format": "tandem-drift/1"}')
    for path, msg in [(bad, "not a tandem eval --json summary"),
                      (tmp_path / "missing.json", "unable to open")]:
        r = tandem(tandem_bin, "eval", "--endpoint", "http://127.0.0.1:9", "--data", str(VERIFY),
                   "--compare", str(path))
        assert r.returncode == 1 and f"tandem eval: --compare: {path}" in r.stderr, r.stderr
        assert msg in r.stderr and "requests" not in r.stdout


def test_hand_computed_cuts_through_a_stub_endpoint(tandem_bin, tmp_path):
    """Answers chosen by hand, served by a stub: at a precision of 0.9 (29 cases needed),
    `q` keeps its seven true answers down to 0.87341 and must be written 0.8734 (0.873
    would let in the false answer at 0.87339); `u`, whose most confident answer is false
    and whose answers then alternate, cannot reach 0.9: its best cut is 0.5 at two."""
    q_scores = [0.99, 0.97, 0.95, 0.93, 0.91, 0.89, 0.87341, 0.87339] + \
        [0.8 - 0.03 * i for i in range(22)]
    q_gold = [True] * 7 + [False] * 23
    u_scores = [0.95 - 0.03 * i for i in range(30)]
    u_gold = [i % 2 == 1 for i in range(30)]
    cases = []
    for i in range(30):
        cases.append({"id": f"c{i}", "state": f"case {i}",
                      "questions": {"q": {"type": "noul", "instructions": "q?"},
                                    "u": {"type": "noul", "instructions": "u?"}},
                      "gold": {"q": q_gold[i], "u": u_gold[i]}})
    data = write_set(tmp_path / "hand.jsonl", cases)

    def answer(req):
        i = int(req["state"].split()[1])
        return 200, {"model": "stub", "answers": {"q": {"type": "noul", "noul": q_scores[i]},
                                                  "u": {"type": "noul", "noul": u_scores[i]}}}
    stub = Endpoint(answer)
    try:
        r = tandem(tandem_bin, "eval", "--endpoint", stub.url, "--data", str(data), "--json",
                   "--suggest-thresholds", "--target-precision", "0.9")
    finally:
        stub.close()
    assert r.returncode == 0, r.stderr
    th = json.loads(r.stdout)["thresholds"]
    assert th["min_answers"] == 29 and "yaml" not in th
    g = {x["question"]: x for x in th["questions"]}
    assert g["q"]["status"] == "ok" and g["q"]["value"] == ">= 0.8734"
    assert g["q"]["threshold"] == 0.8734 and g["q"]["accepted"] == 7
    assert g["q"]["precision"] == 1 and g["q"]["coverage"] == pytest.approx(7 / 30)
    assert g["q"]["answers"] == 30 and g["q"]["right"] == 7
    assert g["u"]["status"] == "unreachable" and "value" not in g["u"]
    assert g["u"]["best"] == {"precision": 0.5, "coverage": pytest.approx(2 / 30),
                              "threshold": pytest.approx(0.92)}
