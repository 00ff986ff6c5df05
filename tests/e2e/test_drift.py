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


def drift(tandem_bin, ref, cand, *extra):
    out = tandem(tandem_bin, "drift", "--ref", ref.url, "--cand", cand.url, "--data",
                 str(SHIPPED), "--model-ref", "q4_1", "--json", *extra)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_quantize_refuses_to_overwrite_its_input(tandem_bin, tmp_path):
    src = fixture_path("smollm2-decider.gguf")
    out = tandem(tandem_bin, "quantize", str(src), str(src), "Q8_0")
    assert out.returncode == 2 and "OUT must differ from IN" in out.stderr


def test_quantized_files_keep_the_decision_metadata(servers):
    for name in ("q8_0", "q4_0"):
        assert "decision model type: openjev" in servers[name].log_text(), name


def test_drift_q4_1_against_q8_0_and_q4_0(tandem_bin, servers):
    near = drift(tandem_bin, servers["q4_1"], servers["q8_0"])
    far = drift(tandem_bin, servers["q4_1"], servers["q4_0"], "--top", "5")
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
