"""tandem's metric formulas against an independent numpy computation.

Random decision cases are answered by an in-process stub endpoint with random
distributions (Dirichlet draws, some with exact zeros), so the whole real path
runs: dataset loading, HTTP through libcurl, answer parsing, the C metrics and
the JSON output. numpy recomputes every number from the same distributions
with the formulas of docs/eval.md; Brier, ECE, KL and the rest must agree to
1e-9. No engine is needed.
"""
import json
import subprocess

import numpy as np
import pytest

from s1stub import Endpoint, answer

TOL = 1e-9
BINS = 15
LOW = 0.6


def random_cases(rng, n_cases):
    cases = []
    for i in range(n_cases):
        questions, gold = {}, {}
        for j in range(int(rng.integers(1, 4))):
            kind = ["choice", "score", "noul"][int(rng.integers(3))]
            qid = f"q{j}"
            if kind == "choice":
                k = int(rng.integers(2, 7))
                q = {"type": "choice", "instructions": "Pick one.",
                     "criteria": {f"opt{m}": None for m in range(k)}}
                keys = list(q["criteria"])
            elif kind == "score":
                k = int(rng.integers(2, 11))
                q = {"type": "score", "instructions": "Rate it.",
                     "criteria": [f"level {m}" for m in range(k)]}
                keys = list(range(k))
            else:
                k = 2
                q = {"type": "noul", "instructions": "Yes or no?", "criteria": None}
                keys = [True, False]
            questions[qid] = q
            g = int(rng.integers(k))
            if rng.random() < 0.2:  # a target distribution with a unique maximum
                t = rng.dirichlet(np.ones(k))
                t = t / t.sum()
                names = list(q["criteria"]) if kind == "choice" else \
                    ([str(m) for m in range(k)] if kind == "score" else ["true", "false"])
                target = {names[m]: float(t[m]) for m in range(k)}
                target[names[-1]] = 1.0 - sum(float(t[m]) for m in range(k - 1))
                if target[names[-1]] < 0:
                    target[names[-1]] = 0.0
                gold[qid] = {"answer": keys[g], "target": target}
            elif rng.random() < 0.9:
                gold[qid] = keys[g]
        cases.append({"id": f"case-{i}", "state": f"state of case {i}",
                      "questions": questions, "gold": gold})
    return cases


def random_dist(rng, k, alpha, zeros=True):
    p = rng.dirichlet(np.full(k, alpha))
    if zeros and k > 2 and rng.random() < 0.1:
        p[int(rng.integers(k))] = 0.0
        p = p / p.sum()
    return [float(x) for x in p]


def random_answers(rng, cases, alpha_choices=(0.3, 1.0, 5.0)):
    table = {}
    for c in cases:
        ans = {}
        for qid, q in c["questions"].items():
            if q["type"] == "noul":
                ans[qid] = answer(q, [float(rng.random())])
            else:
                k = len(q["criteria"])
                alpha = alpha_choices[int(rng.integers(len(alpha_choices)))]
                ans[qid] = answer(q, random_dist(rng, k, alpha))
        table[c["state"]] = ans
    return table


def stub_for(table):
    return Endpoint(lambda req: (200, {"model": "stub", "answers": table[req["state"]],
                                       "usage": {"input_tokens": 1, "output_tokens": 0}}))


def dist_of(q, a):
    """The probability vector tandem scores, in option order (noul: [p, 1 - p])."""
    if q["type"] == "noul":
        return np.array([a["noul"], 1.0 - a["noul"]])
    keys = list(q["criteria"]) if q["type"] == "choice" else \
        [str(i) for i in range(len(q["criteria"]))]
    return np.array([a["probabilities"][k] for k in keys])


def gold_of(q, g):
    names = list(q["criteria"]) if q["type"] == "choice" else None
    plain = g["answer"] if isinstance(g, dict) else g
    if q["type"] == "choice":
        index = names.index(plain)
    elif q["type"] == "score":
        index = plain
    else:
        index = 0 if plain else 1
    target = None
    if isinstance(g, dict) and "target" in g:
        keys = names if q["type"] == "choice" else \
            ([str(i) for i in range(len(q["criteria"]))] if q["type"] == "score"
             else ["true", "false"])
        target = np.array([g["target"].get(k, 0.0) for k in keys])
    return index, target


def numpy_metrics(cases, table):
    groups = {name: {"p": [], "gold": [], "target": [], "score": []}
              for name in ("overall", "choice", "score", "noul")}
    for c in cases:
        for qid, q in c["questions"].items():
            if qid not in c["gold"]:
                continue
            p = dist_of(q, table[c["state"]][qid])
            gold, target = gold_of(q, c["gold"][qid])
            for name in ("overall", q["type"]):
                grp = groups[name]
                grp["p"].append(p)
                grp["gold"].append(gold)
                grp["target"].append(target)
                grp["score"].append(q["type"] == "score")
    out = {}
    for name, grp in groups.items():
        n = len(grp["p"])
        top = np.array([int(np.argmax(p)) for p in grp["p"]])
        conf = np.array([p[t] for p, t in zip(grp["p"], top)])
        correct = top == np.array(grp["gold"])
        brier = np.array([
            np.sum((p - (t if t is not None else np.eye(len(p))[g])) ** 2)
            for p, g, t in zip(grp["p"], grp["gold"], grp["target"])])
        bins = np.minimum(np.floor(conf * BINS).astype(int), BINS - 1)
        ece = sum(np.sum(bins == b) / n * abs(correct[bins == b].mean() - conf[bins == b].mean())
                  for b in range(BINS) if np.any(bins == b))
        nll = np.array([
            -np.sum(y[y > 0] * np.log(np.maximum(p[y > 0], 1e-12)))
            for p, y in ((p, t if t is not None else np.eye(len(p))[g])
                         for p, g, t in zip(grp["p"], grp["gold"], grp["target"]))])
        mae = [abs(np.dot(np.arange(len(p)), p) - g)
               for p, g, s in zip(grp["p"], grp["gold"], grp["score"]) if s]
        out[name] = {"n": n, "accuracy": correct.mean(), "brier": brier.mean(), "ece": ece,
                     "nll": nll.mean(), "conf": conf, "correct": correct,
                     "low_confidence_rate": np.mean(conf < LOW), "mean_confidence": conf.mean(),
                     "mae": np.mean(mae) if mae else None,
                     "bins": np.bincount(bins, minlength=BINS)}
    return out


def numpy_selective(conf, correct, target_risk):
    """The risk-coverage curve cut after each distinct confidence (ties together), its
    area as the mean over answers of their cut's risk, and the coverage at a risk."""
    order = np.argsort(-conf, kind="stable")
    conf, wrong = conf[order], ~correct[order]
    levels = np.unique(conf)[::-1]
    kept = np.array([np.sum(conf >= c) for c in levels])
    risk = np.array([np.sum(wrong[:k]) / k for k in kept])
    per_answer = np.repeat(risk, np.diff(np.concatenate([[0], kept])))
    ok = risk <= target_risk
    coverage = kept[ok].max() / len(conf) if ok.any() else 0.0
    return {"coverage": kept / len(conf), "risk": risk, "threshold": levels,
            "aurc": per_answer.mean(), "coverage_at_target_risk": coverage}


def check_selective(got, overall):
    sel = got["selective"]
    want = numpy_selective(overall["conf"], overall["correct"], sel["target_risk"])
    assert sel["target_risk"] == 0.05
    assert abs(sel["aurc"] - want["aurc"]) < TOL, (sel["aurc"], want["aurc"])
    assert abs(sel["coverage_at_target_risk"] - want["coverage_at_target_risk"]) < TOL
    assert len(sel["curve"]) == len(want["risk"]) > 10
    for pt, c, r, t in zip(sel["curve"], want["coverage"], want["risk"], want["threshold"]):
        assert abs(pt["coverage"] - c) < TOL and abs(pt["risk"] - r) < TOL
        assert abs(pt["threshold"] - t) < TOL
    iv = got["intervals"]
    assert iv["resamples"] == 1000 and iv["seed"] == 1
    for key, point in (("accuracy", got["metrics"]["overall"]["accuracy"]),
                       ("ece", got["metrics"]["overall"]["ece"]),
                       ("coverage_at_target_risk", sel["coverage_at_target_risk"])):
        lo, hi = iv[key]
        assert lo <= hi and lo - 0.05 <= point <= hi + 0.05, (key, lo, point, hi)
    lo, hi = iv["accuracy"]  # the binomial standard error of the accuracy, roughly
    se = np.sqrt(overall["accuracy"] * (1 - overall["accuracy"]) / len(overall["conf"]))
    assert 2 * se < hi - lo < 6 * se, (lo, hi, se)


def run_json(tandem_bin, *args):
    out = subprocess.run([str(tandem_bin), *args, "--json"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr + out.stdout[-2000:]
    return json.loads(out.stdout)


@pytest.mark.parametrize("seed", [1, 2])
def test_eval_metrics_match_numpy(tandem_bin, tmp_path, seed):
    rng = np.random.default_rng(seed)
    cases = random_cases(rng, 150)
    data = tmp_path / "random.jsonl"
    data.write_text("".join(json.dumps(c) + "\n" for c in cases))
    table = random_answers(rng, cases)
    stub = stub_for(table)
    try:
        got = run_json(tandem_bin, "eval", "--endpoint", stub.url, "--data", str(data),
                       "--concurrency", "4", "--low-confidence", str(LOW))
    finally:
        stub.close()
    want = numpy_metrics(cases, table)
    assert got["requests"] == {"total": 150, "ok": 150, "errors": 0, "cases_answered": 150}
    for name, w in want.items():
        g = got["metrics"][name]
        assert g["n"] == w["n"] > 0, name
        for key in ("accuracy", "brier", "nll", "ece", "low_confidence_rate", "mean_confidence"):
            assert abs(g[key] - w[key]) < TOL, (name, key, g[key], w[key])
        if w["mae"] is None:
            assert g["mae"] is None
        else:
            assert abs(g["mae"] - w["mae"]) < TOL, (name, g["mae"], w["mae"])
    assert [b["n"] for b in got["reliability"]] == list(want["overall"]["bins"])
    check_selective(got, want["overall"])
    # the numbers are not degenerate: calibration is imperfect, answers spread over bins
    assert want["overall"]["ece"] > 0.01
    assert sum(1 for n in want["overall"]["bins"] if n) >= 8
    # per-question Brier of every scored question
    for r in got["results"]:
        case = cases[int(r["case"].split("-")[1])]
        q = case["questions"][r["question"]]
        if r["question"] not in case["gold"]:
            assert r["gold"] is None and r["brier"] is None
            continue
        p = dist_of(q, table[case["state"]][r["question"]])
        g, t = gold_of(q, case["gold"][r["question"]])
        y = t if t is not None else np.eye(len(p))[g]
        assert abs(r["brier"] - np.sum((p - y) ** 2)) < TOL


def test_drift_kl_matches_numpy(tandem_bin, tmp_path):
    rng = np.random.default_rng(7)
    cases = random_cases(rng, 120)
    for c in cases:
        c.pop("gold")
    data = tmp_path / "random.jsonl"
    data.write_text("".join(json.dumps(c) + "\n" for c in cases))
    ref_table = random_answers(rng, cases)
    cand_table = random_answers(rng, cases)
    ref, cand = stub_for(ref_table), stub_for(cand_table)
    try:
        got = run_json(tandem_bin, "drift", "--ref", ref.url, "--cand", cand.url, "--data",
                       str(data), "--top", "5")
    finally:
        ref.close()
        cand.close()
    kls, dps, agree, hit_epsilon = [], [], [], False
    per_question = {(r["case"], r["question"]): r for r in got["results"]}
    for c in cases:
        for qid, q in c["questions"].items():
            p = dist_of(q, ref_table[c["state"]][qid])
            r = dist_of(q, cand_table[c["state"]][qid])
            mask = p > 0
            hit_epsilon |= bool(np.any(mask & (r == 0)))
            kl = float(np.sum(p[mask] * np.log(p[mask] / np.maximum(r[mask], 1e-12))))
            kls.append(max(kl, 0.0))
            dps.append(float(np.max(np.abs(p - r))))
            agree.append(int(np.argmax(p)) == int(np.argmax(r)))
            g = per_question[(c["id"], qid)]
            assert abs(g["kl"] - kls[-1]) < TOL, (c["id"], qid, g["kl"], kls[-1])
            assert abs(g["max_dp"] - dps[-1]) < TOL
            assert g["agree"] == agree[-1]
    assert got["compared"] == len(kls) and got["skipped"] == 0
    assert abs(got["kl_mean"] - np.mean(kls)) < TOL
    assert abs(got["kl_max"] - np.max(kls)) < TOL
    assert abs(got["max_dp_mean"] - np.mean(dps)) < TOL
    assert abs(got["flip_rate"] - (1 - np.mean(agree))) < TOL
    assert hit_epsilon, "no candidate zero met a positive reference probability"
    worst = sorted(kls, reverse=True)[:5]
    assert [w["kl"] for w in got["worst"]] == pytest.approx(worst, abs=TOL)
