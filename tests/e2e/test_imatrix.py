"""`tandem imatrix` on the decision fixtures, with the real engine, its
llama-imatrix and its llama-quantize.

The rendered text is kept (--text-out) and checked against what the engine
renders (the template's special tokens, the state of each calibration case)
and against the split, recomputed here from its documented rule
(src/eval/evalset.h), so the C split and its description cannot drift
apart. Failures must give one clear line, exit 1 (2 for usage), and leave no
file behind: neither at --out nor in the temporary folder (TMPDIR points
into the test's folder to check that). Small calibration shares keep the
whole file under a minute on two cores.
"""
import json
import os
import subprocess

import pytest

from conftest import ENGINE, ROOT, fixture_path

SHIPPED = ROOT / "tests" / "data" / "eval" / "decisions.jsonl"
QUANTIZE = ENGINE.parent / "llama-quantize"

M64 = (1 << 64) - 1


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def fnv1a64(s):
    h = 0xCBF29CE484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


def calibration(case_id, seed, share):
    """evalset_split_case, as src/eval/evalset.h documents it."""
    if share >= 1:
        return True
    u = mix64((fnv1a64(case_id) + mix64(seed)) & M64)
    return (u >> 11) * 2.0 ** -53 < share


def cases(path=SHIPPED):
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()]


def run(tandem_bin, tmp_path, *args, cwd=None):
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return subprocess.run([str(tandem_bin), *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=cwd)


def dump(tandem_bin, path):
    out = subprocess.run([str(tandem_bin), "gguf", "dump", str(path)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return {kv["key"]: kv.get("value") for kv in json.loads(out.stdout)["kv"]}


def assert_nothing_left(tmp_path, *outs):
    for out in outs:
        assert not out.exists(), f"{out} was left behind"
    assert list((tmp_path / "tmp").iterdir()) == [], "the temporary folder was not removed"


def one_error_line(stderr):
    lines = [l for l in stderr.splitlines() if l.startswith("tandem imatrix: ")]
    return lines[-1][len("tandem imatrix: "):]


def test_smollm2_matrix_renders_the_template_and_feeds_llama_quantize(tandem_bin, tmp_path):
    model = fixture_path("smollm2-decider.gguf")
    out, text = tmp_path / "smol.imatrix.gguf", tmp_path / "smol.txt"
    r = run(tandem_bin, tmp_path, "imatrix", model, "--data", SHIPPED, "--out", out,
            "--calibration-share", "0.15", "--seed", "3", "--text-out", text)
    assert r.returncode == 0, r.stderr
    everything = cases()
    used = [c for c in everything if calibration(c["id"], 3, 0.15)]
    held = [c for c in everything if not calibration(c["id"], 3, 0.15)]
    assert f"{len(everything)} case(s): {len(used)} for calibration, {len(held)} held out" \
        in r.stderr
    prompts = sum(len(c["questions"]) for c in used)
    assert f"wrote {out}: {len(used)} case(s), {prompts} prompt(s)" in r.stdout

    # the engine's rendering: the systemone template with its special tokens, each
    # calibration case's state and question, no held-out state
    rendered = text.read_text()
    assert rendered.count("<|im_start|>assistant\n") == prompts
    assert rendered.count("<|im_end|>") == 2 * prompts
    for c in used:
        assert c["state"] in rendered
        for q in c["questions"].values():
            assert q["instructions"] in rendered
    used_states = {c["state"] for c in used}
    for c in held:
        if c["state"] not in used_states:
            assert c["state"] not in rendered

    kv = dump(tandem_bin, out)
    assert kv["general.type"] == "imatrix"
    assert kv["imatrix.datasets"] == [str(SHIPPED)]
    assert kv["tandem.imatrix.cases"] == len(used)
    assert kv["tandem.imatrix.seed"] == 3
    assert kv["tandem.imatrix.calibration_share"] == pytest.approx(0.15)
    inspect = subprocess.run([str(tandem_bin), "inspect", str(out)], capture_output=True,
                             text=True, timeout=60)
    assert inspect.returncode == 0, inspect.stderr
    assert "GGUF v3" in inspect.stdout

    q = subprocess.run([str(QUANTIZE), "--allow-requantize", "--imatrix", str(out), str(model),
                        str(tmp_path / "q.gguf"), "Q4_K_M"], capture_output=True, text=True,
                       timeout=120)
    assert q.returncode == 0, q.stderr[-2000:]
    assert f"imatrix datasets=['{SHIPPED}']" in q.stdout + q.stderr
    assert "importance matrix entries" in q.stdout + q.stderr
    assert dump(tandem_bin, tmp_path / "q.gguf")["quantize.imatrix.dataset"] == str(SHIPPED)
    assert_nothing_left(tmp_path)


@pytest.mark.parametrize("name, marks", [
    ("kev-tiny.gguf", ["<|fim_prefix|>", "<|fim_middle|>", "<|box_start|>", "<|fim_suffix|>"]),
    ("laya-tiny.gguf", ["[CLS]", "[SEP]", "[MASK]"]),
])
def test_kev_and_laya_get_a_matrix(tandem_bin, tmp_path, name, marks):
    """kev (pointer head) and laya (an encoder with a scorer) run in the engine's
    embedding mode; llama-imatrix computes their matrices with -b equal to -c
    (see src/engine/engine_imatrix.c)."""
    out, text = tmp_path / "m.imatrix.gguf", tmp_path / "m.txt"
    r = run(tandem_bin, tmp_path, "imatrix", fixture_path(name), "--data", SHIPPED,
            "--out", out, "--calibration-share", "0.3", "--text-out", text)
    assert r.returncode == 0, r.stderr
    rendered = text.read_text()
    for mark in marks:
        assert mark in rendered
    kv = dump(tandem_bin, out)
    assert kv["general.type"] == "imatrix"
    assert kv["imatrix.chunk_count"] >= 2
    assert_nothing_left(tmp_path)


def test_the_default_output_goes_beside_the_caller(tandem_bin, tmp_path):
    r = run(tandem_bin, tmp_path, "imatrix", fixture_path("laya-tiny.gguf"), "--data",
            SHIPPED, "--calibration-share", "0.2", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "laya-tiny.imatrix.gguf").exists()


def test_an_audit_log_is_read_as_requests(tandem_bin, tmp_path):
    log = tmp_path / "audit.jsonl"
    lines = []
    for i, c in enumerate(cases()[:12]):
        body = json.dumps({"state": c["state"], "questions": c["questions"]})
        lines.append({"time": "2026-01-01T00:00:00Z", "request_id": f"req-{i}",
                      "route": "systemone", "method": "POST", "status": 200,
                      "request_body": body})
    lines.append({"time": "2026-01-01T00:00:01Z", "request_id": "req-x", "route": "chat",
                  "method": "POST", "status": 200, "request_body": "{}"})
    log.write_text("".join(json.dumps(l) + "\n" for l in lines))
    text = tmp_path / "audit.txt"
    r = run(tandem_bin, tmp_path, "imatrix", fixture_path("kev-tiny.gguf"), "--data", log,
            "--out", tmp_path / "a.gguf", "--calibration-share", "1", "--text-out", text)
    assert r.returncode == 0, r.stderr
    assert "audit log: 1 line(s) gave no case" in r.stderr
    assert "12 case(s): 12 for calibration, 0 held out" in r.stderr
    assert cases()[11]["state"] in text.read_text()


def test_a_model_the_tool_cannot_handle_is_said_in_one_line(tandem_bin, tmp_path):
    """llama-imatrix aborting on a GGML_ASSERT (what Laya's add_eos would do without
    tandem's override) is TANDEM_ERR_UNSUPPORTED: one line naming the model and the
    assert, exit 1, nothing left. The tool is a stand-in beside the real server."""
    engine = tmp_path / "engine"
    engine.mkdir()
    (engine / "llama-server").symlink_to(ENGINE)
    tool = engine / "llama-imatrix"
    tool.write_text("#!/bin/sh\n"
                    "while [ \"$1\" != -o ]; do shift; done; echo partial > \"$2\"\n"
                    "echo '0.00.100.000 I compute_imatrix: tokenizing the input ..'\n"
                    "echo '/src/tools/imatrix/imatrix.cpp:1429: "
                    "GGML_ASSERT(!llama_vocab_get_add_eos(vocab)) failed' >&2\n"
                    "echo '#0  0x00007f in __GI___wait4 ()'\n"
                    "kill -ABRT $$\n")
    tool.chmod(0o755)
    out = tmp_path / "laya.imatrix.gguf"
    r = run(tandem_bin, tmp_path, "--llama-server", engine / "llama-server", "imatrix",
            fixture_path("laya-tiny.gguf"), "--data", SHIPPED, "--out", out)
    assert r.returncode == 1, r.stderr
    assert one_error_line(r.stderr) == (
        "laya-tiny.gguf: llama-imatrix cannot compute an importance matrix for this model "
        "(modern-bert encoder, decision type laya): "
        "imatrix.cpp:1429: GGML_ASSERT(!llama_vocab_get_add_eos(vocab)) failed")
    assert_nothing_left(tmp_path, out)


def test_a_question_the_model_cannot_answer_gives_the_engine_message(tandem_bin, tmp_path):
    options = {f"opt{i}": f"option number {i}" for i in range(60)}
    data = tmp_path / "many.jsonl"
    data.write_text(json.dumps({"id": "too-many", "state": "pick one", "questions": {
        "pick": {"type": "choice", "instructions": "Which?", "criteria": options}}}) + "\n")
    out = tmp_path / "m.gguf"
    r = run(tandem_bin, tmp_path, "imatrix", fixture_path("smollm2-decider.gguf"), "--data",
            data, "--out", out, "--calibration-share", "1")
    assert r.returncode == 1
    assert one_error_line(r.stderr) == (
        f"{data}:1: case too-many, question pick: smollm2-decider.gguf cannot answer it "
        "(HTTP 400): questions.pick: too many options (60), this model supports at most 52")
    assert_nothing_left(tmp_path, out)


def strip_key(tandem_bin, tmp_path, name, key):
    out = tmp_path / f"no-key-{name}"
    r = subprocess.run([str(tandem_bin), "gguf", "rm", str(fixture_path(name)), str(out), key],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.parametrize("case", ["missing data", "missing model", "empty set",
                                  "no calibration case", "not a decision model",
                                  "no systemone template", "bad JSON"])
def test_bad_inputs_fail_clearly(tandem_bin, tmp_path, case):
    data, model = SHIPPED, fixture_path("laya-tiny.gguf")
    if case == "missing data":
        data = tmp_path / "nope.jsonl"
        want = f"{data}: cannot open: No such file or directory"
    elif case == "missing model":
        model = tmp_path / "nope.gguf"
        want = f"{model}: cannot read: No such file or directory"
    elif case == "empty set":
        data = tmp_path / "empty.jsonl"
        data.write_text("\n")
        want = f"{data}: no cases (the file is empty or only blank lines)"
    elif case == "no calibration case":
        data = tmp_path / "three.jsonl"
        data.write_text("".join(json.dumps(c) + "\n" for c in cases()[:3]))
        assert not any(calibration(c["id"], 0, 0.01) for c in cases()[:3])
        want = "no calibration case: raise --calibration-share or add cases"
    elif case == "not a decision model":
        model = strip_key(tandem_bin, tmp_path, "laya-tiny.gguf", "modern-bert.decision.type")
        want = (f"{model.name}: not a decision model (no modern-bert.decision.type); an importance "
                "matrix is built from /v1/systemone requests")
    elif case == "no systemone template":
        model = strip_key(tandem_bin, tmp_path, "laya-tiny.gguf",
                          "tokenizer.chat_template.systemone")
        want = (f"{model.name}: decision model without tokenizer.chat_template.systemone: "
                "the engine cannot render its requests")
    else:
        data = tmp_path / "bad.jsonl"
        data.write_text('{"id": "x", "state": "s"}\n')
        want = f'{data}:1: missing "questions"'
    out = tmp_path / "o.gguf"
    share = "0.01" if case == "no calibration case" else "0.2"
    r = run(tandem_bin, tmp_path, "imatrix", model, "--data", data, "--out", out,
            "--calibration-share", share)
    assert r.returncode == 1, r.stderr
    assert one_error_line(r.stderr) == want
    assert_nothing_left(tmp_path, out)


@pytest.mark.parametrize("args, want", [
    (["--data", "DATA", "--calibration-share", "0"],
     "--calibration-share: expected 0 < X <= 1, got '0'"),
    (["--data", "DATA", "--calibration-share", "1.5"],
     "--calibration-share: expected 0 < X <= 1, got '1.5'"),
    (["--data", "DATA", "--seed", "-1"], "--seed: expected a non-negative integer, got '-1'"),
    (["--data", "DATA", "--out", "MODEL"], "refusing to overwrite an input"),
    (["--data", "DATA", "--text-out", "DATA"], "refusing to overwrite an input"),
    ([], "--data SET.jsonl is required"),
])
def test_usage_errors_exit_2(tandem_bin, tmp_path, args, want):
    model = fixture_path("laya-tiny.gguf")
    args = [{"MODEL": str(model), "DATA": str(SHIPPED)}.get(a, a) for a in args]
    r = run(tandem_bin, tmp_path, "imatrix", model, *args)
    assert r.returncode == 2
    assert want in r.stderr


def test_help_explains_every_option(tandem_bin, tmp_path):
    r = run(tandem_bin, tmp_path, "imatrix", "--help")
    assert r.returncode == 0
    for flag in ["--data", "--out", "--calibration-share", "--seed", "--text-out",
                 "--verbose", "--help"]:
        assert flag in r.stdout
