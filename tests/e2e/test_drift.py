"""`tandem drift` and `tandem quantize` on the real SmolLM2 decider.

The pinned engine's llama-quantize (built beside llama-server by
scripts/build-engine.sh) re-encodes the Q4_1 fixture, through `tandem
quantize`, as Q8_0 and as Q4_0. No higher-precision SmolLM2 file is pinned, so
both are requantized from Q4_1 (--allow-requantize): Q8_0 then carries Q4_1's
weights almost exactly (a near-identity control), while Q4_0 is a different
4-bit code and really changes the weights. Drift must be small for the first
and clearly larger for the second. (k-quants such as Q3_K do not fit
SmolLM2's 576-wide rows, so llama-quantize would fall back on most tensors.)
"""
import json
import math
import subprocess

import pytest

from conftest import ROOT, LlamaServer, fixture_path
from test_deciders import DECIDER_ARGS

SHIPPED = ROOT / "tests" / "data" / "eval" / "decisions.jsonl"


def tandem(tandem_bin, *args, timeout=600):
    return subprocess.run([str(tandem_bin), *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def servers(tandem_bin, engine_path, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("drift")
    src = fixture_path("smollm2-decider.gguf")
    files = {"q4_1": src}
    for kind in ("Q8_0", "Q4_0"):
        out = tmp / f"smollm2-decider-{kind.lower()}.gguf"
        run = tandem(tandem_bin, "quantize", "--allow-requantize", str(src), str(out), kind)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        assert run.stdout.rstrip().endswith(f"tandem quantize: wrote {out} ({kind})")
        files[kind.lower()] = out
    started = {}
    try:
        for name, path in files.items():
            started[name] = LlamaServer(engine_path, path, tmp / f"{name}.log",
                                        extra_args=DECIDER_ARGS).start()
        yield started
    finally:
        for s in started.values():
            s.kill()


def drift(tandem_bin, ref, cand, *extra, data=SHIPPED):
    out = tandem(tandem_bin, "drift", "--ref", ref.url, "--cand", cand.url, "--data",
                 str(data), "--model-ref", "q4_1", "--json", *extra)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def far(tandem_bin, servers):
    """The whole shipped set, Q4_1 against Q4_0, with the default margin: read by two tests."""
    return drift(tandem_bin, servers["q4_1"], servers["q4_0"], "--top", "5")


def test_quantize_refuses_to_overwrite_its_input(tandem_bin, tmp_path):
    src = fixture_path("smollm2-decider.gguf")
    out = tandem(tandem_bin, "quantize", str(src), str(src), "Q8_0")
    assert out.returncode == 2 and "OUT must differ from IN" in out.stderr


def test_quantized_files_keep_the_decision_metadata(servers):
    for name in ("q8_0", "q4_0"):
        assert "decision model type: openjev" in servers[name].log_text(), name


def test_drift_q4_1_against_q8_0_and_q4_0(tandem_bin, servers, far):
    near = drift(tandem_bin, servers["q4_1"], servers["q8_0"])
    for s in (near, far):
        assert s["format"] == "tandem-drift/1"
        assert s["kl_direction"] == "KL(ref || cand), nats"
        assert s["compared"] == s["questions"] >= 75 and s["skipped"] == 0
        assert s["errors"] == [] and s["ref"]["errors"] == s["cand"]["errors"] == 0
        assert set(s["by_type"]) == {"choice", "score", "noul"}
        assert sum(t["compared"] for t in s["by_type"].values()) == s["compared"]
        assert s["flips"] == sum(not r["agree"] for r in s["results"])
        assert 0 <= s["flip_rate"] <= 1 and s["kl_max"] >= s["kl_mean"] >= 0
        assert s["ref"]["accuracy"] is not None and s["cand"]["accuracy"] is not None
    assert near["kl_mean"] > 0, "a requantized model answers differently"
    assert far["kl_mean"] > 3 * near["kl_mean"], (near["kl_mean"], far["kl_mean"])
    assert far["max_dp_max"] > near["max_dp_max"]
    assert len(far["worst"]) == 5
    assert far["worst"][0]["kl"] == far["kl_max"]
    assert [w["kl"] for w in far["worst"]] == sorted((w["kl"] for w in far["worst"]),
                                                     reverse=True)
    print(f"\nQ4_1 vs Q8_0: flip rate {near['flip_rate']:.3f} ({near['flips']}/"
          f"{near['compared']}), KL mean {near['kl_mean']:.3g} max {near['kl_max']:.3g}, "
          f"max |dp| {near['max_dp_max']:.3g}; accuracy {near['ref']['accuracy']:.3f} -> "
          f"{near['cand']['accuracy']:.3f}")
    print(f"Q4_1 vs Q4_0: flip rate {far['flip_rate']:.3f} ({far['flips']}/"
          f"{far['compared']}), KL mean {far['kl_mean']:.3g} max {far['kl_max']:.3g}, "
          f"max |dp| {far['max_dp_max']:.3g}; accuracy {far['ref']['accuracy']:.3f} -> "
          f"{far['cand']['accuracy']:.3f}")


def test_drift_table(tandem_bin, servers, tmp_path):
    data = tmp_path / "few.jsonl"
    data.write_text("\n".join(SHIPPED.read_text().splitlines()[:5]) + "\n")
    out = tandem(tandem_bin, "drift", "--ref", servers["q4_1"].url, "--cand",
                 servers["q4_0"].url, "--data", str(data), "--top", "3")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert text.startswith(f"tandem drift: {data}, 5 cases")
    assert "ref : http://127.0.0.1:" in text and "cand: http://127.0.0.1:" in text
    assert "overall" in text and "worst questions by KL:" in text
    assert "(KL(ref || cand) in nats" in text


def test_drift_counts_flips_where_the_reference_was_sure(tandem_bin, servers, far, tmp_path):
    """--margin: the flips among answers whose top-two margin in the reference is
    at least M, with Wilson 95% intervals; a near-tie flips on rounding alone."""
    z = 1.959963984540054

    def wilson(k, n):
        p = k / n
        c, h = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        return [max(0.0, (c - h) / (1 + z * z / n)), min(1.0, (c + h) / (1 + z * z / n))]

    s = far
    assert s["margin"] == 0.1 and s["repeat"] == 1 and s["unstable"] == 0
    sure = [r for r in s["results"] if r["sure"]]
    assert s["sure_compared"] == len(sure) and 0 < len(sure) < s["compared"]
    assert s["sure_flips"] == sum(not r["agree"] for r in sure) <= s["flips"]
    assert s["flip_ci95"] == pytest.approx(wilson(s["flips"], s["compared"]), abs=1e-9)
    assert s["sure_ci95"] == pytest.approx(wilson(s["sure_flips"], len(sure)), abs=1e-9)
    # for two options (noul) the top-two margin is 2 p_top - 1
    for r in s["results"]:
        if r["type"] == "noul":
            assert r["sure"] == (abs(2 * r["ref_p"] - 1) >= 0.1 - 1e-12), r
    # the two extremes hold on any data: six cases (with flips) keep them cheap
    few = tmp_path / "few.jsonl"
    few.write_text("\n".join(SHIPPED.read_text().splitlines()[:6]) + "\n")
    every = drift(tandem_bin, servers["q4_1"], servers["q4_0"], "--margin", "0", data=few)
    assert every["flips"] > 0, "the extremes are shown on a subset with flips"
    assert every["sure_compared"] == every["compared"] and every["sure_flips"] == every["flips"]
    none = drift(tandem_bin, servers["q4_1"], servers["q4_0"], "--margin", "1", data=few)
    assert none["sure_compared"] == 0 and none["sure_ci95"] is None


def test_drift_repeat_measures_the_noise(tandem_bin, servers, tmp_path):
    data = tmp_path / "few.jsonl"
    data.write_text("\n".join(SHIPPED.read_text().splitlines()[:6]) + "\n")
    out = tandem(tandem_bin, "drift", "--ref", servers["q4_1"].url, "--cand",
                 servers["q4_0"].url, "--data", str(data), "--repeat", "3", "--json")
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    assert s["repeat"] == 3 and s["ref_noise"]["compared"] == s["compared"]
    assert s["ref_noise"]["flips"] == 0, "one engine answers a repeat alike"
    for r in s["results"]:
        assert r["flipped_repeats"] in (0, 3), "the engine is deterministic"
        assert r["agree"] == (r["flipped_repeats"] == 0)
    table = tandem(tandem_bin, "drift", "--ref", servers["q4_1"].url, "--cand",
                   servers["q4_0"].url, "--data", str(data), "--repeat", "2").stdout
    assert "flips where the reference was sure (top-two margin >= 0.1): " in table
    assert "the reference against itself (noise): 0 of" in table
    assert "unstable (changed in some repeats, not most): 0" in table
