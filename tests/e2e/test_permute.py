"""`tandem eval --permute K`, the option-order test, on the real SmolLM2 decider.

The fixture is a tiny chat model with a known position bias: asked its choice
questions in shuffled orders, it picks the option in the middle positions (B,
C) far more often than a content-driven model would, and A and D almost never
(docs/eval.md, "Option-order test"). The test asks a subset of the shipped
choice cases in 3 seeded orders, checks that the bias shows with a tiny
p-value, that the numbers agree with each other and with an independent
chi-square computation, and that the HTML report's permutation table renders
in headless Chromium with the same counts.
"""
import json
import math
import re
import subprocess

import pytest

from test_eval import SHIPPED, chromium, smollm2, tandem  # noqa: F401 (smollm2: a fixture)

CHOICE_CASES = 16  # 16 cases + 48 permuted requests: well under a minute on 2 cores


def choice_cases(path, n):
    """Writes the first n shipped cases that have a choice question to path."""
    lines = [l for l in SHIPPED.read_text().splitlines()
             if l.strip() and any(q["type"] == "choice"
                                  for q in json.loads(l)["questions"].values())]
    path.write_text("\n".join(lines[:n]) + "\n")
    return path


def chi2_sf(x, df):
    """P(X >= x) for the chi-square distribution, by the closed forms of integer df."""
    h = x / 2
    if df % 2 == 0:
        return math.exp(-h) * sum(h ** i / math.factorial(i) for i in range(df // 2))
    return math.erfc(math.sqrt(h)) + math.exp(-h) * sum(
        h ** (i - 0.5) / math.gamma(i + 0.5) for i in range(1, (df - 1) // 2 + 1))


@pytest.fixture(scope="module")
def permuted(tandem_bin, smollm2, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("permuted")
    data = choice_cases(tmp / "choice.jsonl", CHOICE_CASES)
    report = tmp / "report.html"
    out = tandem(tandem_bin, "eval", "--endpoint", smollm2.url, "--data", str(data),
                 "--permute", "3", "--bootstrap", "0", "--json", "--report", str(report))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout), report, data


def test_permute_3_reports_the_smollm2_letter_bias(permuted):
    s, _, _ = permuted
    pm = s["permutation"]
    n_choice = s["metrics"]["choice"]["n"]
    assert pm["k"] == 3 and pm["seed"] == 1
    assert pm["choice_questions"] == n_choice >= CHOICE_CASES
    assert pm["requests"] == {"total": 3 * CHOICE_CASES, "ok": 3 * CHOICE_CASES, "errors": 0}
    assert pm["orders_asked"] == 3 * n_choice and pm["orders_failed"] == 0
    assert pm["errors"] == []
    rows = {r["label"]: r for r in pm["positions"]}
    assert list(rows) == ["A", "B", "C", "D"]
    print("positions:", {k: (r["chosen"], round(r["expected"], 2)) for k, r in rows.items()},
          "chi-square", pm["chi_square"], "p", pm["p_value"], "flip rate", pm["flip_rate"])
    # the bias: B is chosen far above its uniform share, A far below; no chance result
    assert pm["p_value"] < 1e-3
    assert rows["B"]["rate"] > 1.5 * rows["B"]["uniform_rate"]
    assert rows["A"]["rate"] < 0.5 * rows["A"]["uniform_rate"]
    # a position-bound model changes its answer with the order
    assert pm["flip_rate"] > 0.3 and pm["mean_abs_dp"] > 0.02


def test_permutation_numbers_agree(permuted):
    s, _, data = permuted
    pm = s["permutation"]
    asked = pm["orders_asked"]
    rows = pm["positions"]
    assert sum(r["chosen"] for r in rows) == asked
    assert sum(r["expected"] for r in rows) == pytest.approx(asked, abs=1e-9)
    for j, r in enumerate(rows):
        assert r["position"] == j and r["label"] == "ABCD"[j]
        assert r["rate"] == pytest.approx(r["chosen"] / asked, abs=1e-12)
        assert r["uniform_rate"] == pytest.approx(r["expected"] / asked, abs=1e-12)
    # E_j = sum over asked orders of 1/n: 3 orders of each question, by its option count
    n_opts = [len(q["criteria"]) for l in data.read_text().splitlines()
              for q in json.loads(l)["questions"].values() if q["type"] == "choice"]
    assert len(n_opts) == pm["choice_questions"]
    for j, r in enumerate(rows):
        assert r["expected"] == pytest.approx(sum(3 / n for n in n_opts if n > j), abs=1e-9)
    chi2 = sum((r["chosen"] - r["expected"]) ** 2 / r["expected"] for r in rows)
    assert pm["chi_square"] == pytest.approx(chi2, rel=1e-12)
    assert pm["df"] == len(rows) - 1
    assert pm["p_value"] == pytest.approx(chi2_sf(chi2, pm["df"]), rel=1e-8, abs=1e-300)
    flipped = pm["flipped"]
    assert sum(f["flips"] for f in flipped) == pm["flips"]
    assert pm["flip_rate"] == pytest.approx(pm["flips"] / asked, abs=1e-12)
    assert all(1 <= f["flips"] <= f["orders"] == 3 and 0 < f["max_dp"] <= 1 for f in flipped)
    assert 0 < pm["mean_abs_dp"] <= max(f["max_dp"] for f in flipped)


def test_report_shows_the_permutation_table_in_chromium(permuted):
    s, report, _ = permuted
    dom = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                          "--dump-dom", report.as_uri()], capture_output=True, text=True,
                         timeout=120)
    assert dom.returncode == 0, dom.stderr
    assert "<h2>Option order</h2>" in dom.stdout
    table = re.search(r'<table class="permutation">(.*?)</table>', dom.stdout, re.S)
    assert table, "no permutation table in the rendered page"
    cells = [re.findall(r"<td>(.*?)</td>", row)
             for row in re.findall(r"<tr>(.*?)</tr>", table.group(1))[1:]]
    pm = s["permutation"]
    assert [(c[0], int(c[1])) for c in cells] == [(r["label"], r["chosen"])
                                                   for r in pm["positions"]]
    assert f"Flip rate {pm['flip_rate']:.3f}" in dom.stdout


def test_orders_are_seeded(tandem_bin, smollm2, tmp_path):
    """The same seed asks the same orders (the decider is deterministic with -fa off),
    and the table says what --json says."""
    data = choice_cases(tmp_path / "few.jsonl", 3)
    args = ["eval", "--endpoint", smollm2.url, "--data", str(data), "--permute", "2",
            "--seed", "7", "--bootstrap", "0"]
    first = tandem(tandem_bin, *args, "--json")
    assert first.returncode == 0, first.stderr
    pm = json.loads(first.stdout)["permutation"]
    table = tandem(tandem_bin, *args)
    assert table.returncode == 0, table.stderr
    line = (f"option order: 2 permutations of {pm['choice_questions']} choice questions, "
            f"{pm['orders_asked']} answered: flip rate {pm['flip_rate']:.3f}, "
            f"mean |dp| {pm['mean_abs_dp']:.3f}")
    assert line in table.stdout, table.stdout
    rates = " ".join(f"{r['label']} {r['rate']:.2f}" for r in pm["positions"])
    assert f"chosen position: {rates} (uniform " in table.stdout


def test_a_set_without_choice_questions_is_refused(tandem_bin, tmp_path):
    data = tmp_path / "noul.jsonl"
    data.write_text(json.dumps({"id": "n", "state": "disk 97% full",
                                "questions": {"full": {"type": "noul",
                                                       "instructions": "Is the disk full?"}},
                                "gold": {"full": True}}) + "\n")
    out = tandem(tandem_bin, "eval", "--endpoint", "http://127.0.0.1:9", "--data", str(data),
                 "--permute", "3", "--bootstrap", "0")  # refused before anything is sent
    assert out.returncode == 1
    assert (f"tandem eval: --permute: {data} has no choice question: the option-order test "
            "reorders the options of choice questions") in out.stderr
