"""The synthesized decision-model fixtures (kev-tiny, laya-tiny) are real to the
engine: the pinned llama-server loads them as decision models and answers
choice, score and noul questions with valid, reproducible probabilities; and
`tandem gguf synth` makes them byte for byte the same every time."""
import json
import math
import os
import subprocess

import pytest

from conftest import ENGINE_SRC, LlamaServer, fixture_path, http, ROOT

pytestmark = pytest.mark.quick  # in `make check` (docs/testing.md)

REQUEST = {
    "state": "A customer writes: my package never arrived and I want my money back.",
    "questions": {
        "route": {"type": "choice", "instructions": "Which team should handle this?",
                  "criteria": {"billing": "payments and refunds", "shipping": "deliveries",
                               "technical": "bugs and outages"}},
        "urgency": {"type": "score", "instructions": "How urgent is it?",
                    "criteria": ["can wait", "this week", "today", "right now"]},
        "angry": {"type": "noul", "instructions": "Is the customer upset?"},
    },
}

SERVE = {  # decision type, extra engine flags (laya: the whole prompt in one micro-batch)
    "kev-tiny.gguf": ("kev", [], 1024),
    "laya-tiny.gguf": ("laya", ["-b", "512", "-ub", "512"], 512),
}


@pytest.fixture(scope="module", params=sorted(SERVE))
def served(request, engine_path, tmp_path_factory):
    kind, extra, ctx = SERVE[request.param]
    server = LlamaServer(engine_path, fixture_path(request.param),
                         tmp_path_factory.mktemp("fixture") / "server.log",
                         extra_args=["-np", "1", *extra], ctx=ctx).start()
    yield kind, server
    server.kill()


def test_loads_as_a_decision_model(served):
    kind, server = served
    assert f"decision model type: {kind}" in server.log_text()


def test_answers_choice_score_and_noul_validly(served):
    _, server = served
    status, body = http("POST", server.url + "/v1/systemone", REQUEST)
    assert status == 200, body
    assert list(body) == ["model", "answers", "usage"]
    answers = body["answers"]
    assert list(answers) == ["route", "urgency", "angry"], "answers follow request order"
    route = answers["route"]
    assert set(route["probabilities"]) == {"billing", "shipping", "technical"}
    assert math.isclose(sum(route["probabilities"].values()), 1.0, abs_tol=1e-6)
    assert route["choice"] == max(route["probabilities"], key=route["probabilities"].get)
    urgency = answers["urgency"]
    probs = [urgency["probabilities"][str(i)] for i in range(4)]
    assert math.isclose(sum(probs), 1.0, abs_tol=1e-6)
    assert math.isclose(urgency["score"], sum(i * p for i, p in enumerate(probs)), abs_tol=1e-6)
    assert 0.0 <= answers["angry"]["noul"] <= 1.0
    assert body["usage"]["input_tokens"] > 0


def test_answers_are_identical_across_runs(served):
    _, server = served
    first = http("POST", server.url + "/v1/systemone", REQUEST)
    second = http("POST", server.url + "/v1/systemone", REQUEST)
    assert json.dumps(first[1]["answers"]) == json.dumps(second[1]["answers"])


def test_the_random_weights_are_not_degenerate(served):
    """Distinct options get distinct probabilities: the readout sees real activations."""
    _, server = served
    _, body = http("POST", server.url + "/v1/systemone", REQUEST)
    assert len(set(body["answers"]["route"]["probabilities"].values())) == 3


@pytest.mark.parametrize("name", ["kev-tiny", "laya-tiny"])
def test_synth_is_deterministic(tandem_bin, name, tmp_path):
    env = dict(os.environ, ENGINE_SRC=str(ENGINE_SRC))
    spec = ROOT / "fixtures" / f"{name}.json"
    for out in ("a.gguf", "b.gguf"):
        subprocess.run([str(tandem_bin), "gguf", "synth", str(spec), str(tmp_path / out)],
                       check=True, env=env, timeout=120)
    a = (tmp_path / "a.gguf").read_bytes()
    assert a == (tmp_path / "b.gguf").read_bytes()
    assert a == fixture_path(f"{name}.gguf").read_bytes()


def test_inspect_shows_the_decision_metadata(tandem_bin):
    kev = json.loads(subprocess.run([str(tandem_bin), "inspect", "--json",
                                     str(fixture_path("kev-tiny.gguf"))],
                                    capture_output=True, text=True, check=True).stdout)
    assert kev["architecture"] == "qwen35"
    assert kev["decision"] == {"type": "kev", "max_head_tokens": None, "block_count": None,
                               "temperatures": {"choice": pytest.approx(2.41),
                                                "score": pytest.approx(2.41),
                                                "noul": pytest.approx(2.41)}}
    assert kev["recurrent"]["full_attention_interval"] == 4
    assert kev["recurrent"]["ssm"]["state_size"] == 16
    assert "systemone" in kev["chat_templates"]
    laya = json.loads(subprocess.run([str(tandem_bin), "inspect", "--json",
                                      str(fixture_path("laya-tiny.gguf"))],
                                     capture_output=True, text=True, check=True).stdout)
    assert laya["attention"]["causal"] is False
    assert laya["decision"]["type"] == "laya" and laya["decision"]["max_head_tokens"] == 192
    assert laya["feed_forward_length"] == [96, 96, 256, 256]
