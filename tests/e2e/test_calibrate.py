"""`tandem calibrate` against the real pinned llama-server.

The fixture is kev-tiny (a 17 MB Kev with random weights and temperature 2.41
for every type), served with the deciders' flags (-fa off: bit-identical
answers on CPU). It answers the shipped set fast, and on seed 1 its fits come
out both ways, which the test needs: one type is kept (score) and the others are
not (their held-out NLL gets worse). The calibrated copy is then served by the
real engine, and every answer must equal the prediction of `--json` to 1e-5,
while the kept type's answers must have moved away from the original's.
"""
import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, LlamaServer, fixture_path, http_raw
from test_deciders import DECIDER_ARGS
from test_eval import chromium

SHIPPED = ROOT / "tests" / "data" / "eval" / "decisions.jsonl"
KEV = "kev-tiny.gguf"
TEMP_KEY = "qwen35.decision.temperature."


def tandem(tandem_bin, *args, timeout=600):
    return subprocess.run([str(tandem_bin), *args], capture_output=True, text=True,
                          timeout=timeout)


def serve(engine_path, model, log_dir):
    return LlamaServer(engine_path, model, log_dir / "llama-server.log", extra_args=DECIDER_ARGS,
                       record=False).start()


@pytest.fixture(scope="module")
def kev(engine_path, tmp_path_factory):
    server = serve(engine_path, fixture_path(KEV), tmp_path_factory.mktemp("kev"))
    yield server
    server.kill()


@pytest.fixture(scope="module")
def calibrated(tandem_bin, kev, tmp_path_factory):
    out = tmp_path_factory.mktemp("cal") / "cal.gguf"
    done = tandem(tandem_bin, "calibrate", str(fixture_path(KEV)), "--endpoint", kev.url,
                  "--data", str(SHIPPED), "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), out


def cases():
    return {c["id"]: c for c in map(json.loads, SHIPPED.read_text().splitlines()) if c}


def served(url, case):
    status, raw = http_raw("POST", url + "/v1/systemone",
                           {"state": case["state"], "questions": case["questions"]}, timeout=300)
    assert status == 200, raw
    return json.loads(raw)["answers"]


def distribution(answer, options, qtype):
    if qtype == "noul":
        return [answer["noul"], 1 - answer["noul"]]
    return [answer["probabilities"][o] for o in options]


def test_fits_are_kept_only_when_held_out_nll_improves(calibrated):
    s, out = calibrated
    assert s["format"] == "tandem-calibrate/1" and s["decision_type"] == "kev"
    assert s["split"] == {"seed": 1, "holdout": 0.3, "held_out_cases": 18,
                          "text": "seed 1, held-out 0.3: 18 of 60 cases"}
    groups = {g["group"]: g for g in s["groups"]}
    assert set(groups) == {"choice", "score", "noul"}
    kept = [g for g in groups.values() if g["kept"]]
    assert [g["group"] for g in kept] == ["score"]
    for g in groups.values():
        assert g["fitted"] and g["t_old"] == pytest.approx(2.41, abs=1e-6)
        assert g["n_train"] + g["n_held"] > 0
        assert (g["nll_after"] < g["nll_before"]) == g["kept"]
        assert g["kept"] or g["note"] == (f"held-out NLL {g['nll_before']:.3f} -> "
                                          f"{g['nll_after']:.3f}")
        assert g["t_new"] == pytest.approx(g["t_old"] / g["a"], rel=1e-5)
    # only the kept type's key changes; the others keep 2.41
    assert list(s["written"]) == [TEMP_KEY + "score"]
    assert s["written"][TEMP_KEY + "score"] == pytest.approx(groups["score"]["t_new"], abs=1e-6)
    assert len(s["predictions"]) == s["questions"] == 80


def test_the_engine_serves_the_predicted_probabilities(calibrated, kev, engine_path, tmp_path):
    s, out = calibrated
    copy = serve(engine_path, out, tmp_path)
    by_id = cases()
    worst, moved = 0.0, {"choice": 0.0, "score": 0.0, "noul": 0.0}
    try:
        answers = {}
        for p in s["predictions"]:
            case = by_id[p["case"]]
            if p["case"] not in answers:
                answers[p["case"]] = (served(copy.url, case), served(kev.url, case))
            new, old = (distribution(a[p["question"]], p["options"], p["type"])
                        for a in answers[p["case"]])
            assert len(new) == len(p["p"])
            worst = max(worst, max(abs(x - y) for x, y in zip(new, p["p"])))
            moved[p["type"]] = max(moved[p["type"]], max(abs(x - y) for x, y in zip(new, old)))
    finally:
        copy.kill()
    assert worst < 1e-5, worst
    assert moved["score"] > 0.01 and moved["choice"] == moved["noul"] == 0.0, moved


def test_eval_compare_shows_before_and_after(tandem_bin, calibrated, kev, engine_path,
                                            tmp_path):
    """`tandem eval --compare` of the original against the copy: the table, --json and the
    report (rendered by headless Chromium) show the kept type's NLL before and after."""
    s, out = calibrated
    before = tmp_path / "before.json"
    done = tandem(tandem_bin, "eval", "--endpoint", kev.url, "--data", str(SHIPPED), "--json")
    assert done.returncode == 0, done.stderr
    before.write_text(done.stdout)
    copy = serve(engine_path, out, tmp_path)
    report = tmp_path / "after.html"
    try:
        args = ["eval", "--endpoint", copy.url, "--data", str(SHIPPED), "--compare",
                str(before)]
        table = tandem(tandem_bin, *args)
        done = tandem(tandem_bin, *args, "--json", "--report", str(report))
    finally:
        copy.kill()
    assert done.returncode == 0 and table.returncode == 0, done.stderr + table.stderr
    after = json.loads(done.stdout)
    was = json.loads(before.read_text())
    assert after["compare"]["file"] == str(before)
    assert after["compare"]["metrics"] == was["metrics"]
    nll = (was["metrics"]["score"]["nll"], after["metrics"]["score"]["nll"])
    assert nll[0] != nll[1] and after["metrics"]["choice"] == was["metrics"]["choice"]
    assert f"score    accuracy" in table.stdout and f"nll {nll[0]:.3f} -> {nll[1]:.3f}" \
        in table.stdout, table.stdout
    dom = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                          "--dump-dom", report.as_uri()], capture_output=True, text=True,
                         timeout=120)
    assert dom.returncode == 0, dom.stderr
    assert "<h2>Before and after</h2>" in dom.stdout
    rows = re.search(r'<table class="compare">(.*?)</table>', dom.stdout, re.S).group(1)
    score = re.search(r"<tr><td>score</td>(.*?)</tr>", rows).group(1)
    cells = re.findall(r"<td>(.*?)</td>", score)
    assert cells[5:7] == [f"{nll[0]:.3f}", f"{nll[1]:.3f}"], cells  # n, acc x2, brier x2
    assert dom.stdout.count("<figcaption>") == 2


def test_inspect_shows_the_provenance(tandem_bin, calibrated):
    s, out = calibrated
    facts = json.loads(tandem(tandem_bin, "inspect", "--json", str(out)).stdout)
    cal = facts["calibration"]
    assert cal["tool"].startswith("tandem calibrate ")
    assert cal["source_sha256"] == hashlib.sha256(fixture_path(KEV).read_bytes()).hexdigest()
    assert cal["data_sha256"] == hashlib.sha256(SHIPPED.read_bytes()).hexdigest()
    assert cal["data"] == "decisions.jsonl"
    assert cal["split"] == "seed 1, held-out 0.3: 18 of 60 cases"
    assert cal["metrics"] == json.loads(json.dumps(s["groups"]))
    temps = facts["decision"]["temperatures"]
    assert temps["score"] == pytest.approx(s["written"][TEMP_KEY + "score"], abs=1e-6)
    assert temps["choice"] == temps["noul"] == pytest.approx(2.41, abs=1e-6)
    human = tandem(tandem_bin, "inspect", str(out)).stdout
    assert "calibration.split                  seed 1, held-out 0.3: 18 of 60 cases" in human
    assert "calibration.score" in human and ", kept" in human
    source = json.loads(tandem(tandem_bin, "inspect", "--json", str(fixture_path(KEV))).stdout)
    assert source["calibration"] is None


def bucketed_set(path):
    """Every shipped choice question twice, as it is (3 to 5 options) and cut to its
    gold and the next option (2): choice answers in two buckets, for bucket fits."""
    lines = []
    for case in cases().values():
        for qid, q in case["questions"].items():
            gold = case.get("gold", {}).get(qid)
            if q["type"] != "choice" or not isinstance(gold, str):
                continue
            keys = list(q["criteria"])
            other = keys[(keys.index(gold) + 1) % len(keys)]
            for name, crit in (("", q["criteria"]),
                               ("-two", {k: v for k, v in q["criteria"].items()
                                         if k in (gold, other)})):
                lines.append(json.dumps({"id": case["id"] + "-" + qid + name,
                                         "state": case["state"],
                                         "questions": {qid: {**q, "criteria": crit}},
                                         "gold": {qid: gold}}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_bucket_fits_and_existing_bucket_keys(tandem_bin, engine_path, tmp_path):
    """A source with a choice.2 key of its own (3.0 beside choice 2.41), bucket fits
    on (--min-bucket 5): whatever is kept, the copy serves the predictions."""
    source = tmp_path / "kev-bucket.gguf"
    assert tandem(tandem_bin, "gguf", "set", str(fixture_path(KEV)), str(source),
                  TEMP_KEY + "choice.2=f32:3.0").returncode == 0
    data = bucketed_set(tmp_path / "buckets.jsonl")
    out = tmp_path / "cal.gguf"
    server = serve(engine_path, source, tmp_path)
    try:
        done = tandem(tandem_bin, "calibrate", str(source), "--endpoint", server.url, "--data",
                      str(data), "--out", str(out), "--min-bucket", "5", "--json")
    finally:
        server.kill()
    assert done.returncode == 0, done.stderr
    s = json.loads(done.stdout)
    groups = {g["group"]: g for g in s["groups"]}
    assert set(groups) == {"choice", "choice.2", "choice.3_5"}
    assert all(g["fitted"] for g in groups.values())
    assert groups["choice.2"]["t_old"] == pytest.approx(
        3.0 / groups["choice"]["a"] if groups["choice"]["kept"] else 3.0, rel=1e-5)
    by_id = {json.loads(l)["id"]: json.loads(l) for l in data.read_text().splitlines()}
    (tmp_path / "copy").mkdir()
    copy = serve(engine_path, out, tmp_path / "copy")
    try:
        worst = 0.0
        for p in s["predictions"]:
            answer = served(copy.url, by_id[p["case"]])[p["question"]]
            got = distribution(answer, p["options"], p["type"])
            worst = max(worst, max(abs(x - y) for x, y in zip(got, p["p"])))
    finally:
        copy.kill()
    assert worst < 1e-5, worst


def test_refusals(tandem_bin, kev, tmp_path):
    model = str(fixture_path(KEV))
    common = ["--endpoint", kev.url, "--data", str(SHIPPED)]
    done = tandem(tandem_bin, "calibrate", model, *common, "--out", model)
    assert done.returncode == 1 and "is the model itself" in done.stderr
    dense = str(fixture_path("dense-3b-shape.gguf"))
    done = tandem(tandem_bin, "calibrate", dense, *common, "--out", str(tmp_path / "d.gguf"))
    assert done.returncode == 1 and "not a decision model (no qwen2.decision.type)" in done.stderr
    lev = tmp_path / "lev.gguf"
    assert tandem(tandem_bin, "gguf", "set", model, str(lev),
                  "qwen35.decision.type=str:lev").returncode == 0
    done = tandem(tandem_bin, "calibrate", str(lev), *common, "--out", str(tmp_path / "l.gguf"))
    assert done.returncode == 1 and "decision type lev is not supported" in done.stderr
    few = tmp_path / "few.jsonl"
    few.write_text("\n".join(SHIPPED.read_text().splitlines()[:6]) + "\n")
    done = tandem(tandem_bin, "calibrate", model, "--endpoint", kev.url, "--data", str(few),
                  "--out", str(tmp_path / "f.gguf"))
    assert done.returncode == 1 and "no question type can be fitted" in done.stderr
    assert "too few answers:" in done.stderr and "a fit needs 10 and 5" in done.stderr
    assert not (tmp_path / "f.gguf").exists()


def test_usage_errors(tandem_bin, tmp_path):
    model = str(fixture_path(KEV))
    data = ["--data", str(SHIPPED), "--out", str(tmp_path / "o.gguf")]
    done = tandem(tandem_bin, "calibrate", model, "--endpoint", "http://x", *data,
                  "--holdout", "2")
    assert done.returncode == 2 and "--holdout 2: expected a number from 0.05 to 0.95" \
        in done.stderr
    done = tandem(tandem_bin, "calibrate", model, "--data", str(SHIPPED))
    assert done.returncode == 2 and "are required" in done.stderr
    done = tandem(tandem_bin, "calibrate", "--endpoint", "http://x", *data)
    assert done.returncode == 2 and "expected exactly one MODEL.gguf" in done.stderr
    assert "MODEL.gguf itself" in tandem(tandem_bin, "calibrate", "--help").stdout


def test_without_an_endpoint_the_model_is_served_privately(tandem_bin, calibrated, tmp_path):
    """No --endpoint: MODEL.gguf itself on a private daemon (file:MODEL.gguf), stopped at
    the end; the fit is the one the engine tandem serves would give."""
    out = tmp_path / "private.gguf"
    done = tandem(tandem_bin, "calibrate", str(fixture_path(KEV)), "--data", str(SHIPPED),
                  "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["endpoint"].startswith("http://127.0.0.1:") and out.exists()
    assert len(summary["groups"]) == len(calibrated[0]["groups"]) > 0
    left = subprocess.run(["pgrep", "-af", "tandem-models-"], capture_output=True, text=True)
    assert left.stdout == "", left.stdout
