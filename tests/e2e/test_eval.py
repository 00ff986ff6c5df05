"""`tandem eval` against the real pinned llama-server on the SmolLM2 decider.

One llama-server per module (with -fa off, bit-identical answers on CPU, see
test_deciders.py) answers the shipped set tests/data/eval/decisions.jsonl.
Wrapper endpoints in front of it (tests/e2e/s1stub.py) inject what a real
deployment can do: noisy or alternating answers, which --repeat must catch,
and HTTP errors, which must be counted per case. The HTML report is rendered
by headless Chromium.
"""
import json
import random
import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path

import pytest

from conftest import ROOT, LlamaServer, fixture_path
from s1stub import Endpoint, forward
from test_deciders import DECIDER_ARGS

SHIPPED = ROOT / "tests" / "data" / "eval" / "decisions.jsonl"
SVG_NS = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def smollm2(engine_path, tmp_path_factory):
    server = LlamaServer(engine_path, fixture_path("smollm2-decider.gguf"),
                         tmp_path_factory.mktemp("eval") / "llama-server.log",
                         extra_args=DECIDER_ARGS)
    server.start()
    yield server
    server.kill()


def tandem(tandem_bin, *args, timeout=600):
    return subprocess.run([str(tandem_bin), *args], capture_output=True, text=True,
                          timeout=timeout)


def subset(tmp_path, n, name="subset.jsonl"):
    lines = [l for l in SHIPPED.read_text().splitlines() if l.strip()][:n]
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def shipped_run(tandem_bin, smollm2, tmp_path_factory):
    """One eval of the whole shipped set, with the HTML report, shared by the tests."""
    out_dir = tmp_path_factory.mktemp("report")
    report = out_dir / "report.html"
    out = tandem(tandem_bin, "eval", "--endpoint", smollm2.url, "--model", "smollm2-decider",
                 "--data", str(SHIPPED), "--report", str(report), "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout), report


def test_eval_on_the_shipped_set_reports_real_numbers(shipped_run):
    s, _ = shipped_run
    assert s["format"] == "tandem-eval/1"
    assert s["cases"] == 60 and s["questions"] == s["scored_questions"] >= 75
    assert s["requests"] == {"total": 60, "ok": 60, "errors": 0, "cases_answered": 60}
    assert s["errors"] == []
    m = s["metrics"]
    assert set(m) == {"overall", "choice", "score", "noul"}
    assert m["overall"]["n"] == s["questions"]
    assert sum(m[t]["n"] for t in ("choice", "score", "noul")) == m["overall"]["n"]
    for name, row in m.items():
        assert set(row) == {"n", "accuracy", "brier", "nll", "ece", "low_confidence_rate",
                            "mean_confidence", "mae"}
        assert row["nll"] > 0
        assert row["n"] > 0
        assert 0 <= row["accuracy"] <= 1 and 0 <= row["ece"] <= 1
        assert 0 < row["brier"] < 2 and 0 <= row["low_confidence_rate"] <= 1
        assert (row["mae"] is None) == (name in ("choice", "noul"))
    assert m["score"]["mae"] > 0
    assert len(s["reliability"]) == 15
    assert sum(b["n"] for b in s["reliability"]) == m["overall"]["n"]
    assert s["stability"]["verdict"] == "not measured"
    sel, iv = s["selective"], s["intervals"]
    assert sel["target_risk"] == 0.05 and 0 < sel["aurc"] < 1
    assert 0 <= sel["coverage_at_target_risk"] <= 1 and len(sel["curve"]) > 5
    assert sel["curve"][-1]["coverage"] == 1
    assert abs(sel["curve"][-1]["risk"] - (1 - m["overall"]["accuracy"])) < 1e-12
    assert iv["resamples"] == 1000 and iv["seed"] == 1
    assert iv["accuracy"][0] < m["overall"]["accuracy"] < iv["accuracy"][1]
    assert len(s["results"]) == s["questions"]
    r = s["results"][0]
    assert set(r) == {"case", "question", "type", "gold", "answer", "p", "correct", "brier",
                      "answered", "max_dp", "flips"}
    print("\nsmollm2-decider on the shipped set: " + ", ".join(
        f"{t} n={m[t]['n']} acc={m[t]['accuracy']:.3f} brier={m[t]['brier']:.3f} "
        f"ece={m[t]['ece']:.3f}" for t in m))


def test_table_output(tandem_bin, smollm2, tmp_path):
    out = tandem(tandem_bin, "eval", "--endpoint", smollm2.url, "--data", str(subset(tmp_path, 4)))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("tandem eval: ") and "4 cases" in lines[0]
    assert re.match(r"type +n +accuracy +brier +nll +ece +low-conf +mean-conf +mae$", lines[2])
    assert re.match(r"overall +\d+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ ", lines[3])
    assert re.search(r"^selective: AURC [0-9.]+; coverage at risk <= 0.050: [0-9.]+ "
                     r"\[[0-9.]+, [0-9.]+\]", out.stdout, re.M)
    assert re.search(r"^95% intervals \(1000 bootstrap resamples, seed 1\): accuracy [0-9.]+ "
                     r"\[[0-9.]+, [0-9.]+\], ECE", out.stdout, re.M)
    assert "stability: not measured" in out.stdout
    assert "errors: none (4 requests answered)" in out.stdout
    assert out.stderr == "", "no progress line when stderr is not a terminal"


def test_repeat_5_is_deterministic_on_cpu(tandem_bin, smollm2, tmp_path):
    out = tandem(tandem_bin, "eval", "--endpoint", smollm2.url, "--data",
                 str(subset(tmp_path, 12)), "--repeat", "5", "--json")
    assert out.returncode == 0, out.stderr
    st = json.loads(out.stdout)["stability"]
    assert st["verdict"] == "deterministic", st
    assert st["repeat"] == 5 and st["questions_identical"] == st["questions_measured"] > 12
    assert st["max_dp"] == 0 and st["flips"] == 0 and st["unstable"] == []


def test_injected_nondeterminism_is_caught(tandem_bin, smollm2, tmp_path):
    """Every second answer to the same case through this proxy gets noise, and
    choice answers have their two most probable options swapped: --repeat must
    say so."""
    seen = {}

    def noisy(req):
        status, body = forward(smollm2.url, req)
        n = seen[req["state"]] = seen.get(req["state"], 0) + 1
        if n % 2 == 0:
            rnd = random.Random(n)
            for a in body["answers"].values():
                if a["type"] == "noul":
                    a["noul"] = min(1.0, max(0.0, a["noul"] + rnd.uniform(-0.05, 0.05)))
                    continue
                probs = a["probabilities"]
                keys = sorted(probs, key=probs.get, reverse=True)
                if a["type"] == "choice":
                    probs[keys[0]], probs[keys[1]] = probs[keys[1]], probs[keys[0]]
                else:
                    eps = min(probs[keys[1]], 0.01)
                    probs[keys[0]] += eps
                    probs[keys[1]] -= eps
        return status, body

    proxy = Endpoint(noisy)
    try:
        out = tandem(tandem_bin, "eval", "--endpoint", proxy.url, "--data",
                     str(subset(tmp_path, 6)), "--repeat", "3")
        js = tandem(tandem_bin, "eval", "--endpoint", proxy.url, "--data",
                    str(subset(tmp_path, 6)), "--repeat", "3", "--json")
    finally:
        proxy.close()
    assert out.returncode == 0, out.stderr
    assert "stability: nondeterministic over 3 repeats" in out.stdout, out.stdout
    st = json.loads(js.stdout)["stability"]
    assert st["verdict"] == "nondeterministic"
    assert st["questions_identical"] < st["questions_measured"]
    assert st["flips"] > 0 and st["questions_with_flips"] > 0 and st["max_dp"] > 0
    flipped = [u for u in st["unstable"] if u["flips"]]
    assert flipped and all(sum(u["answers"].values()) == 3 for u in flipped)
    assert all(len(u["answers"]) == 2 for u in flipped)


def test_endpoint_errors_are_counted_per_case(tandem_bin, smollm2, tmp_path):
    data = subset(tmp_path, 8)
    cases = [json.loads(l) for l in data.read_text().splitlines()]
    broken = {cases[2]["state"]: (500, {"error": {"code": 500, "message": "injected failure",
                                                  "type": "server_error"}}),
              cases[5]["state"]: (502, b"<html>bad gateway</html>")}

    def faulty(req):
        if req["state"] in broken:
            return broken[req["state"]]
        return forward(smollm2.url, req)

    proxy = Endpoint(faulty)
    try:
        out = tandem(tandem_bin, "eval", "--endpoint", proxy.url, "--data", str(data),
                     "--repeat", "2", "--json")
        table = tandem(tandem_bin, "eval", "--endpoint", proxy.url, "--data", str(data))
    finally:
        proxy.close()
    assert out.returncode == 1, "failed requests make the exit status 1"
    s = json.loads(out.stdout)
    assert s["requests"] == {"total": 16, "ok": 12, "errors": 4, "cases_answered": 6}
    errs = sorted((e["case"], e["repeat"], e["line"], e["http_status"]) for e in s["errors"])
    assert errs == [(cases[2]["id"], 1, 3, 500), (cases[2]["id"], 2, 3, 500),
                    (cases[5]["id"], 1, 6, 502), (cases[5]["id"], 2, 6, 502)]
    msgs = {e["case"]: e["error"] for e in s["errors"]}
    assert msgs[cases[2]["id"]] == "HTTP 500: injected failure"
    assert msgs[cases[5]["id"]].startswith("HTTP 502: HTTP 502 with a body that is not JSON")
    assert s["stability"]["verdict"] == "incomplete"
    answered = sum(len(c["questions"]) for i, c in enumerate(cases) if i not in (2, 5))
    assert s["metrics"]["overall"]["n"] == 2 * answered
    assert table.returncode == 1
    assert "errors: 2 of 8 requests failed" in table.stdout
    assert f"case {cases[2]['id']} (line 3), repeat 1: HTTP 500: injected failure" in table.stdout


def test_unreachable_endpoint_is_an_error_per_case(tandem_bin, tmp_path):
    from conftest import free_port
    out = tandem(tandem_bin, "eval", "--endpoint", f"http://127.0.0.1:{free_port()}",
                 "--data", str(subset(tmp_path, 3)), "--json", "--retries", "0")
    assert out.returncode == 1
    s = json.loads(out.stdout)
    assert s["requests"]["errors"] == 3 and s["metrics"]["overall"]["n"] == 0
    assert all("onnect" in e["error"] for e in s["errors"]), s["errors"]


def test_malformed_dataset_lines_name_file_line_and_field(tandem_bin, tmp_path):
    good = SHIPPED.read_text().splitlines()[0]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([
        good,
        '{"id": "x", "state": "s", "questions": {"q": {"type": "choose", "instructions": "i"}}}',
        "",
        good.replace('"route-refund"', '"second"').replace('"billing", "refund"', '"bills", "refund"'),
        "{not json",
        good,
    ]) + "\n")
    out = tandem(tandem_bin, "eval", "--endpoint", "http://127.0.0.1:9", "--data", str(bad))
    assert out.returncode == 1
    assert out.stdout == ""
    assert out.stderr.splitlines() == [
        f'{bad}:2: questions.q.type: must be "choice", "score" or "noul"',
        f'{bad}:4: gold.route: "bills" is not an option of question route '
        f'(billing, shipping, technical, account)',
        f"{bad}:5: invalid JSON at column 4: string or '}}' expected near 'not'",
        f'{bad}:6: id: "route-refund" is already the id of line 1',
    ]


REQUIRED = "--data FILE and --endpoint (or --config F --model M) are required"


def test_usage_errors(tandem_bin, tmp_path):
    data = str(subset(tmp_path, 1))
    out = tandem(tandem_bin, "eval", "--config", "tandem.yaml", "--data", data)
    assert out.returncode == 2 and REQUIRED in out.stderr
    out = tandem(tandem_bin, "eval", "--endpoint", "http://x", "--data", data, "--repeat", "0")
    assert out.returncode == 2 and "--repeat 0: expected an integer from 1 to 1000" in out.stderr
    out = tandem(tandem_bin, "eval", "--data", data)
    assert out.returncode == 2 and REQUIRED in out.stderr


def private_config(tmp_path):
    cfg = tmp_path / "tandem.yaml"
    cfg.write_text(f"""listen: 127.0.0.1:0
logs:
  dir: {tmp_path / 'logs'}
models:
  decider:
    path: {fixture_path('smollm2-decider.gguf')}
    ctx: 2048
""")
    return cfg


def test_endpoint_forms_are_checked_before_anything_starts(tandem_bin, tmp_path):
    data = str(subset(tmp_path, 1))
    cfg = str(private_config(tmp_path))
    cases = [
        (("drift", "--ref", "config:decider", "--cand", "http://x"),
         "--ref config:decider: config:MODEL needs --config FILE"),
        (("drift", "--ref", "config:nope", "--cand", "http://x", "--config", cfg),
         f'--ref config:nope: {cfg} declares no model "nope"'),
        (("drift", "--ref", "http://x", "--cand", f"file:{tmp_path}/none.gguf"),
         f"--cand file:{tmp_path}/none.gguf: No such file or directory"),
        (("drift", "--ref", "ftp://x", "--cand", "http://x"),
         "--ref ftp://x: expected an http:// or https:// URL, config:MODEL or file:PATH"),
        (("eval", "--endpoint", "decider"),
         "--endpoint decider: expected an http:// or https:// URL, config:MODEL or file:PATH"),
        (("calibrate", str(fixture_path("kev-tiny.gguf")), "--endpoint", "config:decider",
          "--out", str(tmp_path / "o.gguf")),
         "--endpoint config:decider: this command takes a URL or file:PATH"),
    ]
    for args, want in cases:
        out = tandem(tandem_bin, *args, "--data", data)
        assert out.returncode == 2 and want in out.stderr, (args, out.stderr)


def engines_of(cfg_dir):
    """llama-server processes whose log or slot folder is under cfg_dir."""
    out = subprocess.run(["pgrep", "-af", "llama-server"], capture_output=True, text=True).stdout
    return [l for l in out.splitlines() if str(cfg_dir) in l]


def test_eval_and_drift_start_the_model_privately_and_stop_it(tandem_bin, tmp_path):
    """eval --config F --model M, and drift between file:PATH and config:M naming the
    same file: two private daemons, the same answers to the byte (0 flips, KL 0)."""
    data = str(subset(tmp_path, 4))
    cfg = private_config(tmp_path)
    out = tandem(tandem_bin, "eval", "--config", str(cfg), "--model", "decider", "--data", data,
                 "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["model"] == "decider" and summary["metrics"]["overall"]["n"] == 6
    assert summary["errors"] == []
    out = tandem(tandem_bin, "drift", "--ref", f"file:{fixture_path('smollm2-decider.gguf')}",
                 "--cand", "config:decider", "--config", str(cfg), "--data", data, "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["ref"]["model"] == "smollm2-decider" and d["cand"]["model"] == "decider"
    assert d["compared"] == 6 and d["flips"] == 0 and d["kl_max"] == 0 and d["max_dp_max"] == 0, d
    assert not engines_of(tmp_path), "an engine outlived its command"


# --- the HTML report in headless Chromium -----------------------------------------

def png_pixels(path):
    """Decodes an 8-bit RGB/RGBA PNG (what Chromium writes) into (w, h, rows of bytes)."""
    raw = Path(path).read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w = 8, b"", None
    while pos < len(raw):
        n, kind = struct.unpack(">I4s", raw[pos:pos + 8])
        chunk = raw[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, color = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and color in (2, 6), (depth, color)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + n
    data = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f, line = data[y * (stride + 1)], bytearray(data[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


def chromium():
    path = shutil.which("chromium")
    if not path:
        pytest.fail("chromium is missing: run `make deps` (scripts/install-deps.sh)")
    return path


def test_html_report_renders_in_headless_chromium(shipped_run, tmp_path):
    summary, report = shipped_run
    html = report.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<script" not in html
    assert "http://" not in html.replace(summary["endpoint"], "").replace(
        "http://www.w3.org/2000/svg", ""), "the report must be self-contained"
    svgs = re.findall(r"<svg\b.*?</svg>", html, re.S)
    assert len(svgs) == 3
    reliability, histogram, risk_coverage = (ET.fromstring(s) for s in svgs)  # well-formed XML
    # one point per cut of the risk-coverage curve, and a line between neighbours
    curve = summary["selective"]["curve"]
    assert len(risk_coverage.findall(f"{SVG_NS}circle")) == len(curve)
    assert "Selective prediction" in html and "AURC" in html
    non_empty = [b for b in summary["reliability"] if b["n"]]
    # one bar and one point per non-empty bin, besides the plot background
    assert len(reliability.findall(f"{SVG_NS}circle")) == len(non_empty) > 0
    assert len(reliability.findall(f"{SVG_NS}rect")) == 1 + len(non_empty)
    assert len(histogram.findall(f"{SVG_NS}rect")) == 1 + len(non_empty)
    labels = [t.text for t in histogram.findall(f"{SVG_NS}text")]
    assert all(str(b["n"]) in labels for b in non_empty), "counts are drawn"

    shot = tmp_path / "report.png"
    out = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                          "--hide-scrollbars", f"--screenshot={shot}", "--window-size=1000,1200",
                          report.as_uri()], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert shot.stat().st_size > 10000
    w, h, bpp, rows = png_pixels(shot)
    assert (w, h) == (1000, 1200)
    colors = {row[x:x + 3] for row in rows[::4] for x in range(0, w * bpp, 4 * bpp)}
    assert len(colors) > 20, "the screenshot is blank"
    bar_blue, bar_green = bytes((0x6f, 0xa8, 0xdc)), bytes((0x93, 0xc4, 0x7d))
    assert bar_blue in colors, "no reliability bars were painted"
    assert bar_green in colors, "no histogram bars were painted"

    dom = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                          "--dump-dom", report.as_uri()], capture_output=True, text=True,
                         timeout=120)
    assert dom.returncode == 0, dom.stderr
    assert dom.stdout.count("<svg") == 3
    assert dom.stdout.count("<circle") == len(non_empty) + len(curve)
