"""`tandem plan`: the seed scenarios on a 6 GiB card, the JSON contract, the
footprint cache fed by a real engine run, and bad input.

The full-size models are the sparse shape stand-ins (docs/fixtures.md): real
tensor tables and metadata, so the planner sees exactly what it would see for
the published files. docs/planner-accuracy.md checks the arithmetic against
the engine's own buffers; these tests check the decisions built on it."""
import json
import os
import subprocess

import pytest

from conftest import MODELS, PINS, LlamaServer, fixture_path

pytestmark = pytest.mark.quick  # in `make check` (docs/testing.md)

GIB = 1 << 30
MIB = 1 << 20
PARTS = ("weights", "kv", "recurrent", "compute", "output", "overhead")


def plan(tandem_bin, *args, check=True, preexec_fn=None):
    done = subprocess.run([str(tandem_bin), "plan", *map(str, args)], capture_output=True,
                          text=True, timeout=30, preexec_fn=preexec_fn)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def plan_json(tandem_bin, *args, preexec_fn=None):
    return json.loads(plan(tandem_bin, *args, "--json", preexec_fn=preexec_fn).stdout)


def six_gib(tandem_bin, *models, ctx=8192):
    return plan_json(tandem_bin, *models, "--vram", "6GiB", "--reserve", "512MiB", "--ctx", ctx,
                     "--no-measured")


def test_7b_and_3b_rotate_on_6gib(tandem_bin):
    """They rotate where long prompts from many clients make the CPU dearer than a load."""
    pair = (fixture_path("dense-7b-shape.gguf"), fixture_path("dense-3b-shape.gguf"))
    j = plan_json(tandem_bin, *pair, "--vram", "6GiB", "--reserve", "512MiB", "--ctx", 8192,
                  "--no-measured", "--request-tokens", 8192, "--clients", 16)
    assert j["verdict"] == "rotate", j["reason"]
    assert all(m["rotates"] for m in j["placement"]["chosen"]["models"])
    assert all(m["fits_alone"] for m in j["models"])
    assert j["need"]["gpu"] > j["budget"]["usable"] == 6 * GIB - 512 * MIB
    assert j["headroom"] < 0
    # the per-process overhead is counted once per model
    assert all(m["gpu"]["overhead"] > 0 for m in j["models"])


def on_one_cpu():
    """Runs the child on one CPU of ours: the planner's CPU speed is an estimate per core
    (times the CPUs tandem may run on), so a test of where the CPU wins fixes the count."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def test_7b_and_3b_without_rotation_are_partial(tandem_bin):
    """One short request at a time, the 3B answers sooner on one CPU core than after a load."""
    pair = (fixture_path("dense-7b-shape.gguf"), fixture_path("dense-3b-shape.gguf"))
    j = plan_json(tandem_bin, *pair, "--vram", "6GiB", "--reserve", "512MiB", "--ctx", 8192,
                  "--no-measured", "--request-tokens", 128, preexec_fn=on_one_cpu)
    assert j["verdict"] == "partial", j["reason"]
    assert "dense-3b-shape.gguf runs on the CPU, so that nothing rotates" in j["reason"]
    assert "together they need" in j["reason"]  # why it had to give something up
    assert "(rotates)" in j["alternative"]


def test_kev4b_and_laya_co_resident_with_8k_context(tandem_bin):
    j = six_gib(tandem_bin, fixture_path("kev-4b-shape.gguf"), fixture_path("laya-shape.gguf"))
    assert j["verdict"] == "co-resident", j["reason"]
    kev, laya = j["models"]
    assert kev["decision_type"] == "kev" and laya["decision_type"] == "laya"
    assert kev["n_ctx"] == 8192 and kev["max_ctx"] >= 8192
    assert kev["ngl"] == kev["n_layer"] + 1  # every layer, the output layer included
    assert laya["n_ctx"] == 512  # an encoder runs at its window, whatever --ctx says
    assert j["headroom"] == j["budget"]["usable"] - j["need"]["gpu"] > 0
    assert kev["gpu"]["recurrent"] > 0 and kev["gpu"]["kv"] > 0 and laya["gpu"]["kv"] == 0


@pytest.mark.parametrize("kev9b", ["kev-9b-shape.gguf", "kev-9b-iq3m-shape.gguf"])
def test_kev9b_and_laya_not_co_resident(tandem_bin, kev9b):
    j = six_gib(tandem_bin, fixture_path(kev9b), fixture_path("laya-shape.gguf"))
    assert j["verdict"] != "co-resident", j["reason"]
    assert j["verdict"] in ("rotate", "partial")
    assert j["alternative"], "the best alternative must be named"
    assert kev9b in j["reason"] + j["alternative"] or "together" in j["reason"]
    assert "laya-shape.gguf" in j["alternative"] or kev9b in j["alternative"]


def test_partial_offload_counts_layers_and_slowdown(tandem_bin):
    j = six_gib(tandem_bin, fixture_path("kev-9b-shape.gguf"))
    kev = j["models"][0]
    assert j["verdict"] == "partial"
    assert 0 < kev["ngl"] < kev["n_layer"] + 1
    assert kev["slowdown"] in ("mild", "heavy", "severe")
    assert kev["gpu"]["total"] <= j["budget"]["usable"] < kev["gpu"]["total"] + kev["host"]["weights"]
    assert j["need"]["gpu"] == kev["gpu"]["total"] and j["headroom"] >= 0
    # asked for one more layer, the planner says it does not fit and keeps the maximum
    more = plan_json(tandem_bin, fixture_path("kev-9b-shape.gguf"), "--vram", "6GiB",
                     "--ctx", 8192, "--no-measured", "--ngl", kev["ngl"] + 1)
    assert not more["models"][0]["fits_alone"]
    assert more["verdict"] == "partial" and more["models"][0]["ngl"] == kev["ngl"]


def test_gpu_layers_follow_the_engine_rule(tandem_bin):
    """-ngl 1 offloads only the output layer; token embeddings never leave the host."""
    path = fixture_path("dense-3b-shape.gguf")
    none = plan_json(tandem_bin, path, "--vram", "24GiB", "--ngl", 0, "--ctx", 2048)["models"][0]
    one = plan_json(tandem_bin, path, "--vram", "24GiB", "--ngl", 1, "--ctx", 2048)["models"][0]
    full = plan_json(tandem_bin, path, "--vram", "24GiB", "--ctx", 2048)["models"][0]
    assert none["gpu"]["weights"] == 0 and none["gpu"]["kv"] == 0
    assert 0 < one["gpu"]["weights"] < full["gpu"]["weights"]
    assert one["gpu"]["kv"] == 0  # no repeating layer on the GPU yet
    assert full["host"]["weights"] > 0  # the token embeddings
    # Qwen2.5-3B ties its output to the token embeddings: the GPU gets its own copy
    assert full["gpu"]["weights"] == none["host"]["weights"]
    untied = fixture_path("dense-7b-shape.gguf")  # Qwen2.5-7B has output.weight
    none = plan_json(tandem_bin, untied, "--vram", "24GiB", "--ngl", 0, "--ctx", 2048)["models"][0]
    full = plan_json(tandem_bin, untied, "--vram", "24GiB", "--ctx", 2048)["models"][0]
    assert full["gpu"]["weights"] + full["host"]["weights"] == none["host"]["weights"]


def test_json_contract(tandem_bin, smollm2_path):
    j = plan_json(tandem_bin, smollm2_path, "--cpu", "--ctx", 4096)
    assert set(j) >= {"budget", "verdict", "reason", "alternative", "need", "headroom", "models",
                      "engine_build"}
    assert j["budget"]["device"] == "host" and j["engine_build"] == int(PINS["ENGINE_BUILD"])
    m = j["models"][0]
    for dev in ("gpu", "host"):
        assert set(m[dev]) == set(PARTS) | {"total"}
        assert m[dev]["total"] == sum(m[dev][p] for p in PARTS)
    assert m["total"] == m["gpu"]["total"] + m["host"]["total"]
    assert m["gpu"]["total"] == 0  # a CPU engine
    assert set(m["sources"]) == set(PARTS)
    assert m["settings"]["ctx"] == 4096 and m["settings"]["cache_type_k"] == "F16"


def test_table_names_every_part_and_the_verdict(tandem_bin):
    out = plan(tandem_bin, fixture_path("kev-4b-shape.gguf"), fixture_path("laya-shape.gguf"),
               "--vram", "6GiB", "--ctx", 8192).stdout
    for word in ("weights", "KV", "recurrent", "compute", "overhead", "total", "headroom",
                 "verdict: co-resident", "kev-4b-shape.gguf", "laya-shape.gguf"):
        assert word in out, out


def test_measured_footprint_from_a_real_engine_run(tandem_bin, engine_path, tmp_path):
    """The harness records every engine it starts; plan then prefers the measurement."""
    model = MODELS / PINS["SMOLLM2_GGUF"]
    server = LlamaServer(engine_path, model, tmp_path / "engine.log", ctx=3072,
                         extra_args=["-np", "2", "-fa", "off", "--no-repack"])
    server.start()
    server.stop()
    args = [model, "--cpu", "--ctx", 3072, "--parallel", 2, "--flash-attn", "off"]
    measured = plan_json(tandem_bin, *args)["models"][0]
    modelled = plan_json(tandem_bin, *args, "--no-measured")["models"][0]
    assert measured["sources"]["compute"] == "measured"
    assert modelled["sources"]["compute"] == "model"
    log = server.log_text()
    kv_mib = float(log.split("CPU KV buffer size =")[1].split("MiB")[0])
    assert measured["host"]["kv"] == round(kv_mib * MIB)
    assert modelled["host"]["kv"] == measured["host"]["kv"]  # the KV arithmetic is exact
    # a different setting has no measurement
    other = plan_json(tandem_bin, model, "--cpu", "--ctx", 3328, "--parallel", 2,
                      "--flash-attn", "off")["models"][0]
    assert other["sources"]["compute"] == "model"


def test_bad_input_gets_a_clear_error(tandem_bin, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 16)
    done = plan(tandem_bin, bad, check=False)
    assert done.returncode == 1 and "bad.gguf: offset" in done.stderr, done.stderr
    done = plan(tandem_bin, fixture_path("laya-shape.gguf"), "--vram", "6 bananas", check=False)
    assert done.returncode == 2 and "--vram" in done.stderr and "6 bananas" in done.stderr
    done = plan(tandem_bin, fixture_path("laya-shape.gguf"), "--cache-type-k", "q9", check=False)
    assert done.returncode == 2 and "--cache-type-k" in done.stderr
    done = plan(tandem_bin, check=False)
    assert done.returncode == 2 and "usage" in done.stderr


def test_footprint_record_errors(tandem_bin, smollm2_path, tmp_path):
    log = tmp_path / "quiet.log"
    log.write_text("main: loading model\nsrv  load_model: done\n")  # an engine below -lv 4
    done = subprocess.run([str(tandem_bin), "footprint", "record", str(smollm2_path), str(log),
                           "--", "-c", "2048"], capture_output=True, text=True)
    assert done.returncode == 1 and "-lv 4" in done.stderr, done.stderr
    done = subprocess.run([str(tandem_bin), "footprint", "record", str(smollm2_path), str(log),
                           "--", "-ctk", "q9"], capture_output=True, text=True)
    assert done.returncode == 2 and "-ctk" in done.stderr, done.stderr
    done = subprocess.run([str(tandem_bin), "footprint", "record", str(smollm2_path)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "usage" in done.stderr


def test_plan_a_config(tandem_bin, tmp_path):
    """--config plans the models of a tandem.yaml, highest priority first, with its budget."""
    cfg = tmp_path / "tandem.yaml"
    cfg.write_text(f"""
budget: {{vram: 6GiB, reserve: 512MiB}}
models:
  laya:
    path: {fixture_path("laya-shape.gguf")}
  kev:
    path: {fixture_path("kev-4b-shape.gguf")}
    ctx: 8192
    priority: 10
""")
    j = plan_json(tandem_bin, "--config", cfg, "--no-measured")
    assert [m["name"] for m in j["models"]] == ["kev", "laya"]
    assert j["budget"]["usable"] == 6 * GIB - 512 * MIB and j["verdict"] == "co-resident"
    assert j["models"][0]["n_ctx"] == 8192
    shipped = plan(tandem_bin, "--config", "examples/tandem.yaml").stdout
    assert "smollm2-decider" in shipped and "verdict:" in shipped
    cfg.write_text("models:\n  kev:\n    ctx: 8k\n    path: x.gguf\n")
    done = plan(tandem_bin, "--config", cfg, check=False)
    assert done.returncode == 1
    assert f"{cfg}:3: models.kev.ctx: expected an integer, got \"8k\"" in done.stderr, done.stderr


def chosen_verdict(j):
    """The verdict that the chosen placement stands for (docs/planner.md, Verdicts)."""
    chosen = j["placement"]["chosen"]
    if not chosen["fits"]:
        return "does not fit"
    if any(m["rotates"] for m in chosen["models"]):
        return "rotate"
    if any(m["device"] == "cpu" or m["ngl"] < m["layers"] for m in chosen["models"]):
        return "partial"
    return "co-resident"


@pytest.mark.parametrize("models, ctx", [
    (("kev-9b-iq3m-shape.gguf", "laya-shape.gguf"), 4096),
    (("kev-9b-iq3m-shape.gguf", "laya-shape.gguf"), 8192),
    (("kev-9b-shape.gguf", "laya-shape.gguf"), 4096),
    (("kev-9b-shape.gguf", "laya-shape.gguf"), 8192),
    (("kev-4b-shape.gguf", "laya-shape.gguf"), 8192),
    (("dense-7b-shape.gguf", "dense-3b-shape.gguf"), 8192),
    (("kev-9b-shape.gguf",), 8192),
])
def test_one_verdict_with_the_placement(tandem_bin, models, ctx):
    """The verdict line and the JSON verdict are the placement's answer, in the table too."""
    args = [*map(fixture_path, models), "--vram", "6GiB", "--reserve", "512MiB", "--ctx", ctx,
            "--no-measured"]
    j = plan_json(tandem_bin, *args)
    assert j["verdict"] == chosen_verdict(j), (j["reason"], j["placement"]["chosen"]["label"])
    lines = plan(tandem_bin, *args).stdout.splitlines()
    assert f"verdict: {j['verdict']}: {j['reason']}" in lines
    assert f"chosen: {j['placement']['chosen']['label']}" in lines


def test_kev9b_iq3m_and_laya_at_4k_is_partial_as_placed(tandem_bin):
    """Kev-9B IQ3_M + Laya on 6 GiB at ctx 4096, nothing measured: the placement cuts Laya to
    the layers that fit beside Kev, so nothing rotates; the verdict says so, not `rotate`."""
    args = [fixture_path("kev-9b-iq3m-shape.gguf"), fixture_path("laya-shape.gguf"), "--vram",
            "6GiB", "--reserve", "512MiB", "--ctx", 4096, "--no-measured"]
    j = plan_json(tandem_bin, *args)
    kev, laya = j["placement"]["chosen"]["models"]
    assert not kev["rotates"] and not laya["rotates"]
    assert kev["device"] == laya["device"] == "gpu:0" and kev["ngl"] == kev["layers"]
    assert 0 < laya["ngl"] < laya["layers"]
    assert j["verdict"] == "partial"
    assert (f"laya-shape.gguf keeps {laya['ngl']} of {laya['layers']} layers on gpu:0"
            in j["reason"]), j["reason"]
    assert "nothing rotates" in j["reason"]
    # the alternative is the runner-up, and it is not the arrangement chosen
    assert j["alternative"].startswith(j["placement"]["rejected"][0]["label"] + ": slower")
    out = plan(tandem_bin, *args).stdout
    verdict = next(line for line in out.splitlines() if line.startswith("verdict:"))
    assert verdict.startswith("verdict: partial: laya-shape.gguf keeps"), verdict
    # the memory table above is unchanged: every model at its requested settings
    assert j["headroom"] < 0 and all(m["fits_alone"] for m in j["models"])
