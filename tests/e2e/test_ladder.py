"""`tandem quantize --ladder` with the real engine and the real llama-quantize.

The SmolLM2 decider is pinned only as Q4_1, so its reference is made here by
requantizing it to F16 (`tandem quantize ... F16 --allow-requantize`): the F16
file holds exactly the Q4_1 weights, and every rung is measured against it.
The ladder is bounded for `make test`: three rungs (Q8_0, Q4_K_M, Q2_K), no
importance matrix, the first 30 cases of the shipped set. Q2_K must fail the gate (it flips
more than half of the answers the reference is sure of); the recommendation is
the smallest rung that passed, and the rung below it was judged and failed.
Bad input gets one clear error and leaves no file behind.
"""
import json
import math
import os
import resource
import subprocess
import time

import pytest

from conftest import ROOT, fixture_path

SHIPPED = ROOT / "tests" / "data" / "eval" / "decisions.jsonl"
Z = 1.959963984540054


def tandem(tandem_bin, *args, timeout=900, **kw):
    return subprocess.run([str(tandem_bin), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, **kw)


def wilson(k, n):
    """The Wilson 95% interval, written out independently of metrics.c."""
    p = k / n
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n)) / (1 + Z * Z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def first_cases(path, n):
    path.write_text("\n".join(SHIPPED.read_text().splitlines()[:n]) + "\n")
    return path


@pytest.fixture(scope="module")
def f16(tandem_bin, tmp_path_factory):
    out = tmp_path_factory.mktemp("ladder-src") / "smollm2-f16.gguf"
    run = tandem(tandem_bin, "quantize", "--allow-requantize",
                 fixture_path("smollm2-decider.gguf"), out, "F16")
    assert run.returncode == 0, run.stderr[-2000:]
    return out


LADDER = ("--ladder", "Q8_0,Q4_K_M,Q2_K", "--imatrix", "none", "--max-flip-rate", "0.4",
          "--vram", "2GiB")
N_CASES = 30


@pytest.fixture(scope="module")
def ladder(tandem_bin, f16, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ladder")
    out_dir, report = tmp / "rungs", tmp / "ladder.html"
    data = first_cases(tmp / "cases.jsonl", N_CASES)
    t0 = time.monotonic()
    run = tandem(tandem_bin, "quantize", f16, *LADDER, "--data", data, "--out-dir", out_dir,
                 "--json", "--report", report)
    took = time.monotonic() - t0
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(run.stdout), out_dir, report, took, data


def test_the_ladder_finds_where_flips_begin(tandem_bin, ladder, f16):
    s, out_dir, _, took, data = ladder
    questions = sum(len(json.loads(line)["questions"]) for line in data.read_text().splitlines())
    assert s["format"] == "tandem-ladder/1"
    assert s["source"]["type"] == "F16" and s["source"]["path"] == str(f16)
    assert s["data"]["judged"] == s["data"]["cases"] == N_CASES
    assert s["data"]["calibration"] == 0
    ref = s["reference"]
    assert ref["questions"] == questions and 0 < ref["sure"] <= questions
    rungs = {r["type"]: r for r in s["rungs"]}
    assert [r["type"] for r in s["rungs"]] == ["Q8_0", "Q4_K_M", "Q2_K"], "largest first"
    assert s["rungs"][0]["bytes"] > s["rungs"][1]["bytes"] > s["rungs"][2]["bytes"]
    q2 = rungs["Q2_K"]
    assert q2["status"] == "failed", q2
    assert q2["sure_flips"] > q2["sure_compared"] / 3, "Q2_K changes many decisions"
    rec = s["recommendation"]
    assert rec and rec["type"] in ("Q8_0", "Q4_K_M") and not rec["imatrix"]
    chosen = rungs[rec["type"]]
    assert chosen["status"] == "passed" and chosen["sure_ci95"][1] <= 0.4
    below = s["rungs"][[r["type"] for r in s["rungs"]].index(rec["type"]) + 1]
    assert below["status"] == "failed", "the search judged the rung below its choice"
    assert f"The next one down, {below['type']}, failed" in rec["why"]
    assert os.path.exists(rec["path"]) and rec["path"].startswith(str(out_dir))
    for r in s["rungs"]:
        assert r["fits"] and r["vram_alone"] > r["bytes"] and r["vram_pair"] is None
        if r["status"] == "skipped":
            assert r["reason"].startswith("not built: the smaller") and r["path"] is None
            continue
        k, n = r["sure_flips"], r["sure_compared"]
        assert n == ref["sure"] and r["compared"] == ref["questions"]
        lo, hi = wilson(k, n)
        assert r["sure_ci95"] == pytest.approx([lo, hi], abs=1e-9)
        assert r["sure_flip_rate"] == pytest.approx(k / n)
        assert r["flips"] >= k and r["kl_max"] >= r["kl_mean"] > 0
        assert r["seconds"] > 0 and not r["cached"]
    # SmolLM2's 576-wide rows do not divide into 256-blocks: the k-quants fall back
    fb = rungs["Q4_K_M"]["fallbacks"]
    assert fb and all(f["wanted"] in ("q4_K", "q6_K") for f in fb)
    assert {"tensor": "blk.0.attn_q.weight", "wanted": "q4_K", "got": "q5_0"} in fb
    assert rungs["Q8_0"]["fallbacks"] == []
    # the dry run's size is exactly the tensor data of the file built
    for r in s["rungs"]:
        if r["path"]:
            dump = json.loads(tandem(tandem_bin, "gguf", "dump", r["path"]).stdout)
            assert r["bytes"] == sum(t["size"] for t in dump["tensors"]), r["type"]
    print(f"\nSmolLM2 ladder, 3 rungs on {N_CASES} cases: {took:.0f} s; "
          + "; ".join(f"{r['type']} {r['status']} {r['sure_flips']}/{r['sure_compared']}"
                      for r in s["rungs"] if r["sure_flips"] is not None))


def test_built_rungs_carry_their_provenance(tandem_bin, ladder, f16):
    s, _, _, _, _ = ladder
    path = s["recommendation"]["path"]
    info = json.loads(tandem(tandem_bin, "inspect", "--json", path).stdout)
    prov = info["provenance"]
    sha = subprocess.run(["sha256sum", str(f16)], capture_output=True, text=True).stdout.split()[0]
    assert prov["source_sha256"] == sha and prov["type"] == s["recommendation"]["type"]
    assert prov["engine_build"] == 11434 and "no cls.* tensors" in prov["protected"]
    text = tandem(tandem_bin, "inspect", path).stdout
    assert f"provenance.source_sha256           {sha}" in text


def test_a_rerun_resumes_from_the_cache(tandem_bin, ladder, f16):
    s, out_dir, _, took, data = ladder
    t0 = time.monotonic()
    run = tandem(tandem_bin, "quantize", f16, *LADDER, "--data", data, "--out-dir", out_dir,
                 "--write-config")
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert lines[-1] == f"path: {s['recommendation']['path']}"
    assert "recommended: " + s["recommendation"]["path"] in run.stdout
    assert "Q2_K" in run.stdout and "failed" in run.stdout
    # only the reference is served again: every judged rung comes from the cache
    assert time.monotonic() - t0 < took
    assert not list(out_dir.glob("*.part")) and not list(out_dir.glob("*.tmp"))


def test_the_html_report_plots_size_against_flips(ladder):
    s, _, report, _, _ = ladder
    html = report.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html
    assert s["recommendation"]["type"] in html and "nan" not in html.lower()


def test_help_explains_every_option(tandem_bin):
    run = tandem(tandem_bin, "quantize", "--ladder", "--help")
    assert run.returncode == 0
    for opt in ("--ladder [TYPES]", "--data", "--imatrix", "--calibration-share", "--seed",
                "--with", "--config F --model M", "--vram", "--max-flip-rate", "--margin",
                "--repeat", "--out-dir", "--allow-requantize", "--json", "--report",
                "--write-config", "--all", "--plan-only", "--timeout", "--verbose"):
        assert opt in run.stdout, opt


# --- the memory side --------------------------------------------------------------------------

def test_plan_only_lists_what_fits_beside_the_partner(tandem_bin, tmp_path):
    """Kev-9B beside Laya on 6 GiB, on the full-size shape fixtures: nothing is built."""
    run = tandem(tandem_bin, "quantize", fixture_path("kev-9b-shape.gguf"), "--ladder",
                 "Q4_K_M,IQ3_M,Q2_K", "--plan-only", "--with", fixture_path("laya-shape.gguf"),
                 "--vram", "6GiB", "--ctx", "8192", "--json", "--out-dir", tmp_path / "k9")
    assert run.returncode == 0, run.stderr
    s = json.loads(run.stdout)
    assert s["reference"] is None and s["recommendation"] is None
    assert s["source"]["protected"].startswith("1 cls.* matrices")
    r = {x["type"]: x for x in s["rungs"]}
    assert r["Q4_K_M"]["bytes"] > r["IQ3_M"]["bytes"] > r["Q2_K"]["bytes"]
    for x in s["rungs"]:
        assert x["vram_pair"] > x["vram_alone"] > x["bytes"]
        # the rung runs whole on the GPU; the partner goes where the placement search puts it
        assert x["fits"] == (x["vram_alone"] <= s["budget_bytes"])
        assert x["status"] == ("fits" if x["fits"] else "does not fit")
        if x["vram_pair"] <= s["budget_bytes"]:
            assert x["partner_device"] == ["gpu:0"], x
        elif x["fits"]:
            assert x["partner_device"] != ["gpu:0"], x
        else:
            assert x["partner_device"] is None and x["placement"] is None
    assert not r["Q4_K_M"]["fits"] and r["IQ3_M"]["fits"] and r["Q2_K"]["fits"]
    assert r["IQ3_M"]["vram_pair"] > s["budget_bytes"], "co-resident, IQ3_M would not fit"
    assert not list((tmp_path / "k9").glob("*.gguf")), "plan-only builds nothing"


def where(model):
    """A placed model's device as the ladder writes it: "cpu", "gpu:0", "gpu:0 24/31 layers"."""
    if model["device"] != "cpu" and model["ngl"] < model["layers"]:
        return f'{model["device"]} {model["ngl"]}/{model["layers"]} layers'
    return model["device"]


@pytest.mark.parametrize("ctx", [4096, 8192])
def test_the_ladder_places_the_partner_as_tandem_plan_does(tandem_bin, tmp_path, ctx):
    """Kev-9B at IQ3_M beside Laya on a simulated 6 GiB GPU: the two do not fit co-resident,
    but `tandem plan` serves them with nothing rotating, Kev-9B whole on the GPU, and so does
    the ladder now (it used to find only Q2_K). The rung is the IQ3_M file itself, so its
    footprints and costs are tandem plan's to the byte."""
    kev, laya = fixture_path("kev-9b-iq3m-shape.gguf"), fixture_path("laya-shape.gguf")
    common = ("--vram", "6GiB", "--ctx", ctx, "--no-measured", "--json")
    plan = tandem(tandem_bin, "plan", kev, laya, *common)
    assert plan.returncode == 0, plan.stderr
    chosen = json.loads(plan.stdout)["placement"]["chosen"]
    assert chosen["fits"] and not any(m["rotates"] for m in chosen["models"])
    kev_at, laya_at = chosen["models"]
    assert kev_at["device"] == "gpu:0" and kev_at["ngl"] == kev_at["layers"]
    run = tandem(tandem_bin, "quantize", kev, "--ladder", "IQ3_M", "--plan-only", "--with", laya,
                 *common, "--out-dir", tmp_path / "k9")
    assert run.returncode == 0, run.stderr
    s = json.loads(run.stdout)
    (iq3m,) = s["rungs"]
    assert iq3m["vram_pair"] > s["budget_bytes"] >= iq3m["vram_alone"]
    assert iq3m["fits"] and iq3m["status"] == "fits", iq3m["reason"]
    assert iq3m["partner_device"] == [where(laya_at)]
    assert iq3m["placement"] == f"IQ3_M gpu:0, laya-shape.gguf {where(laya_at)}"
    if ctx == 8192:
        assert iq3m["partner_device"] == ["cpu"]
    table = tandem(tandem_bin, "quantize", kev, "--ladder", "IQ3_M", "--plan-only", "--with",
                   laya, *common[:-1], "--out-dir", tmp_path / "k9")
    assert table.returncode == 0, table.stderr
    head = next(line for line in table.stdout.splitlines() if line.startswith("type "))
    row = next(line for line in table.stdout.splitlines() if line.startswith("IQ3_M "))
    assert "partner" in head.split() and f" yes  {where(laya_at)} " in row, row


# --- bad input ------------------------------------------------------------------------------

def test_a_source_below_q8_0_is_refused(tandem_bin, tmp_path):
    run = tandem(tandem_bin, "quantize", fixture_path("smollm2-decider.gguf"), "--ladder",
                 "--data", SHIPPED, "--out-dir", tmp_path / "o")
    assert run.returncode == 1
    assert "stores 63.3 of its 92.0 MiB of matrices as Q4_1" in run.stderr, run.stderr
    assert "--allow-requantize" in run.stderr
    assert not list((tmp_path / "o").glob("*.gguf"))


def test_a_model_that_is_not_a_decision_model_is_refused(tandem_bin, tmp_path):
    run = tandem(tandem_bin, "quantize", fixture_path("dense-3b-shape.gguf"), "--ladder",
                 "--data", SHIPPED, "--out-dir", tmp_path / "o")
    assert run.returncode == 1 and "is not a decision model (no decision.type)" in run.stderr


def test_an_unknown_type_is_a_usage_error(tandem_bin, f16, tmp_path):
    run = tandem(tandem_bin, "quantize", f16, "--ladder", "Q8_0,Q9_X", "--data", SHIPPED,
                 "--out-dir", tmp_path / "o")
    assert run.returncode == 2 and "Q9_X: llama-quantize Q9_X (exit status 1)" in run.stderr


def test_too_few_cases_says_how_many_are_needed(tandem_bin, f16, tmp_path):
    data = first_cases(tmp_path / "five.jsonl", 5)
    run = tandem(tandem_bin, "quantize", f16, "--ladder", "Q8_0,Q2_K", "--imatrix", "none",
                 "--data", data, "--out-dir", tmp_path / "o")
    assert run.returncode == 1, run.stderr
    assert "too few cases" in run.stderr and "needs at least 189" in run.stderr
    assert "raise --max-flip-rate to at least" in run.stderr
    assert not list((tmp_path / "o").glob("*.gguf")), "nothing is built before the check"


def test_questions_the_model_cannot_answer(tandem_bin, f16, tmp_path):
    row = json.loads(SHIPPED.read_text().splitlines()[0])
    row["state"] = "word " * 12000  # past SmolLM2's 8192-token context
    data = tmp_path / "long.jsonl"
    data.write_text(json.dumps(row) + "\n")
    run = tandem(tandem_bin, "quantize", f16, "--ladder", "Q8_0", "--imatrix", "none",
                 "--data", data, "--out-dir", tmp_path / "o")
    assert run.returncode == 1
    assert "cannot answer the questions of" in run.stderr and "context" in run.stderr, run.stderr


def limit_file_size(max_bytes):
    def apply():
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))
    return apply


def test_a_full_disk_fails_the_rung_and_leaves_no_partial_file(tandem_bin, f16, tmp_path):
    """RLIMIT_FSIZE stands in for a full disk: llama-quantize is stopped mid-write."""
    data = first_cases(tmp_path / "eight.jsonl", 8)
    out = tmp_path / "o"
    run = tandem(tandem_bin, "quantize", f16, "--ladder", "Q8_0", "--imatrix", "none",
                 "--max-flip-rate", "0.6", "--data", data, "--out-dir", out, "--json",
                 preexec_fn=limit_file_size(64 << 20))
    assert run.returncode == 1, run.stderr
    s = json.loads(run.stdout)
    (rung,) = s["rungs"]
    assert rung["status"] == "error" and "llama-quantize Q8_0 (exit status" in rung["reason"]
    assert s["recommendation"] is None
    assert not list(out.glob("*.gguf")) and not list(out.glob("*.part"))


def test_an_engine_that_crashes_on_a_rung(tandem_bin, f16, engine_path, tmp_path):
    """A wrapper stands in for an engine that dies on one file: that rung is an
    error with the engine's last log line, and the ladder goes on."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("llama-quantize", "llama-imatrix"):
        (bin_dir / tool).symlink_to(engine_path.parent / tool)
    wrapper = bin_dir / "llama-server"
    wrapper.write_text(
        "#!/bin/sh\n# a test stand-in for the engine; it serves /v1/systemone through the real one\n"
        'case "$*" in *-Q4_K_M.gguf*) echo "simulated engine crash on Q4_K_M" >&2; exit 3;; esac\n'
        f'exec "{engine_path}" "$@"\n')
    wrapper.chmod(0o755)
    data = first_cases(tmp_path / "twelve.jsonl", 12)
    run = tandem(tandem_bin, "--llama-server", wrapper, "quantize", f16, "--ladder",
                 "Q8_0,Q4_K_M,Q2_K", "--imatrix", "none", "--max-flip-rate", "0.6", "--data",
                 data, "--out-dir", tmp_path / "o", "--json")
    s = json.loads(run.stdout)
    rungs = {r["type"]: r for r in s["rungs"]}
    assert rungs["Q4_K_M"]["status"] == "error", rungs["Q4_K_M"]
    assert "simulated engine crash on Q4_K_M" in rungs["Q4_K_M"]["reason"]
    assert rungs["Q8_0"]["status"] in ("passed", "failed", "skipped")
    assert rungs["Q2_K"]["status"] in ("passed", "failed"), "the ladder went on"


# --- Kev and Laya: the decision head is kept as stored ------------------------------------------

def cls_types(tandem_bin, path):
    dump = json.loads(tandem(tandem_bin, "gguf", "dump", path).stdout)
    return {t["name"]: t["type"] for t in dump["tensors"] if t["name"].startswith("cls.")}


@pytest.mark.parametrize("fixture", ["kev-tiny.gguf", "laya-tiny.gguf"])
def test_tiny_ladders_protect_the_decision_head(tandem_bin, fixture, tmp_path):
    src = fixture_path(fixture)
    run = tandem(tandem_bin, "quantize", src, "--ladder", "Q8_0,Q4_0", "--all", "--data",
                 SHIPPED, "--margin", "0", "--max-flip-rate", "0.5", "--out-dir", tmp_path / "o",
                 "--json")
    assert run.returncode in (0, 1), run.stderr
    s = json.loads(run.stdout)
    assert s["source"]["type"] == "Q8_0" and "cls.* matrices" in s["source"]["protected"]
    # the importance matrix: built for Kev, or one line saying why the engine cannot
    im = s["imatrix"]
    assert im is not None, "Q4_0 is at 4 bits: auto asks for a matrix"
    if "unavailable" in im:
        assert "\n" not in im["unavailable"] and len(im["unavailable"]) > 20
        assert f"no importance matrix: {im['unavailable']}" in run.stderr
    judged = [r for r in s["rungs"] if r["status"] in ("passed", "failed")]
    assert {r["type"] for r in judged} == {"Q8_0", "Q4_0"}, s["rungs"]
    stored = cls_types(tandem_bin, src)
    assert stored and all(t == "F32" for t in stored.values())
    for r in judged:
        assert cls_types(tandem_bin, r["path"]) == stored, r["type"]
        assert r["sure_compared"] == r["compared"] == s["reference"]["questions"]
    print(f"\n{fixture}: imatrix {im}; "
          + "; ".join(f"{r['type']}{'+imatrix' if r['imatrix'] else ''} {r['status']} "
                      f"{r['flips']}/{r['compared']}" for r in judged))
