"""Placement end to end: `tandem plan` chooses where each model runs by the
expected latency of the work (the seed cases on a 6 GiB card, from the
shape stand-ins' headers), and `tandem serve` applies it on this CPU with a
simulated GPU (budget.vram without a GPU): the engines' argv, /v1/status,
/metrics, a pipeline over a CPU-placed verifier without loads, rotation
with read-ahead and lookahead, the cost cache, and bad input."""
import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import cache_root, fixture_path, http, model_file

from test_pipeline import REQUEST, run

A, B = "smollm2-decider", "gemma3-decider"
GIB = 1 << 30


def plan_json(tandem_bin, *args):
    done = subprocess.run([str(tandem_bin), "plan", *map(str, args), "--json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def six_gib(tandem_bin, *models, extra=()):
    return plan_json(tandem_bin, *(fixture_path(m + ".gguf") for m in models), "--vram", "6GiB",
                     "--reserve", "512MiB", "--ctx", 8192, "--no-measured", *extra)


def devices(arrangement):
    return {m["name"].removesuffix(".gguf"): (m["device"], m["ngl"], m["layers"], m["rotates"])
            for m in arrangement["models"]}


# --- tandem plan: the seed cases ------------------------------------------------------------

def test_kev4b_and_laya_both_on_the_gpu(tandem_bin):
    p = six_gib(tandem_bin, "kev-4b-shape", "laya-shape")["placement"]
    d = devices(p["chosen"])
    assert d["kev-4b-shape"] == ("gpu:0", 33, 33, False)
    assert d["laya-shape"] == ("gpu:0", 31, 31, False)
    assert p["simulated"] is (not Path("/dev/nvidia0").exists())
    assert p["rejected"], "the alternatives are listed"
    assert all(r["expected_s"] > p["chosen"]["expected_s"] for r in p["rejected"] if r["fits"])


@pytest.mark.parametrize("kev9b", ["kev-9b-shape", "kev-9b-iq3m-shape"])
def test_kev9b_on_the_gpu_and_laya_on_the_cpu_without_rotation(tandem_bin, kev9b):
    j = six_gib(tandem_bin, kev9b, "laya-shape")
    assert j["verdict"] == "partial", j["reason"]  # Laya on the CPU: nothing rotates
    p = j["placement"]
    d = devices(p["chosen"])
    assert d[kev9b][0] == "gpu:0" and not d[kev9b][3]
    assert d[kev9b][1] * 2 >= d[kev9b][2]  # at least half of Kev's layers on the GPU
    assert d["laya-shape"] == ("cpu", 0, 31, False)
    assert p["chosen"]["work"][0]["loads"] == 0
    assert p["chosen"]["memory"]["gpu:0"] <= j["budget"]["usable"]
    rotation = [r for r in p["rejected"] if any(m["rotates"] for m in r["models"])]
    assert rotation and rotation[0]["work"][0]["loads"] == 2
    assert rotation[0]["expected_s"] > p["chosen"]["expected_s"]
    assert "slower" in rotation[0]["reason"]


def test_kev9b_rotates_when_laya_costs_more_on_the_cpu_than_a_switch(tandem_bin):
    """The one exception: with a long request, Laya's CPU time passes the swap cost."""
    p = six_gib(tandem_bin, "kev-9b-iq3m-shape", "laya-shape",
                extra=("--request-tokens", 8192, "--clients", 16))["placement"]
    d = devices(p["chosen"])
    assert d["laya-shape"][0] == "gpu:0" and d["laya-shape"][3], p["chosen"]["label"]


def test_dense_7b_and_3b_show_rotation_and_the_cpu_with_both_numbers(tandem_bin):
    p = six_gib(tandem_bin, "dense-7b-shape", "dense-3b-shape")["placement"]
    arrangements = [p["chosen"], *p["rejected"]]
    rotate = next(a for a in arrangements if devices(a)["dense-7b-shape"][3])
    cpu = next(a for a in arrangements if devices(a)["dense-3b-shape"][0] == "cpu"
               and devices(a)["dense-7b-shape"] == ("gpu:0", 29, 29, False))
    assert p["chosen"] in (rotate, cpu)
    for a in (rotate, cpu):
        assert a["fits"] and a["expected_s"] > 0 and a["work"][0]["seconds"] == a["expected_s"]
    out = subprocess.run([str(tandem_bin), "plan", fixture_path("dense-7b-shape.gguf"),
                          fixture_path("dense-3b-shape.gguf"), "--vram", "6GiB", "--ctx", "8192",
                          "--no-measured"], capture_output=True, text=True, timeout=60).stdout
    assert f"{rotate['expected_s']:.3f} s" in out and f"{cpu['expected_s']:.3f} s" in out
    assert "chosen:" in out and "rejected (" in out


def test_device_flag_and_work_flag(tandem_bin):
    p = six_gib(tandem_bin, "kev-4b-shape", "laya-shape",
                extra=("--device", "laya-shape.gguf=cpu"))["placement"]
    assert devices(p["chosen"])["laya-shape"][0] == "cpu"
    assert all(devices(r)["laya-shape"][0] == "cpu" for r in p["rejected"])
    p = six_gib(tandem_bin, "kev-4b-shape", "laya-shape", extra=("--work", "models"))["placement"]
    assert [w["name"] for w in p["chosen"]["work"]] == ["kev-4b-shape.gguf", "laya-shape.gguf"]
    done = subprocess.run([str(tandem_bin), "plan", fixture_path("laya-shape.gguf"),
                           "--device", "nope=cpu"], capture_output=True, text=True)
    assert done.returncode == 2 and "no model named 'nope'" in done.stderr
    done = subprocess.run([str(tandem_bin), "plan", fixture_path("laya-shape.gguf"), "--vram",
                           "6GiB", "--device", "laya-shape.gguf=gpu:3"], capture_output=True,
                          text=True)
    assert done.returncode == 2 and "the budget has 1 GPU(s)" in done.stderr, done.stderr


# --- tandem serve on a simulated GPU ----------------------------------------------------------

def serve_config(a_device="auto", b_device="auto", vram="800MiB", extra_b="", tiny_b=False):
    path_b, keys_b = model_file(B, tiny_b)
    return f"""budget:
  vram: {vram}
  reserve: 0
  ram: 4GiB
limits:
  request_timeout: 300s
models:
  {A}:
    path: {fixture_path(A + '.gguf')}
    aliases: [decider]
    ctx: 2048
    keep_alive: forever
    device: {a_device}
  {B}:
    path: {path_b}
    aliases: [verifier]
    {keys_b}
    keep_alive: forever
    device: {b_device}
{extra_b}
pipelines:
  ops:
    decide:
      model: decider
      instructions: Which response should the operator take now?
    verify:
      - model: verifier
        questions:
          consistent:
            type: noul
            instructions: Is "{{{{candidates[decide.choice]}}}}" a sensible step?
    verdict:
      thresholds:
        consistent: ">= 0"
"""


def argv(pid):
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def flag(args, name):
    return args[args.index(name) + 1] if name in args else None


def test_a_cpu_verifier_serves_50_pipelines_without_a_load(serve_factory):
    t0 = time.time()
    # the verifier's placement and loads are checked, never its answers: its tiny stand-in
    s = serve_factory(serve_config(b_device="cpu", tiny_b=True))
    assert "GPU simulated" in s.log()
    assert run(s)[0] == 200
    st = s.status()
    assert st["budget"]["simulated"] is True
    assert [d["device"] for d in st["budget"]["devices"]] == ["gpu:0", "host"]
    a, b = s.model(A), s.model(B)
    assert (a["device"], b["device"]) == ("gpu:0", "cpu")
    args_a, args_b = argv(a["pid"]), argv(b["pid"])
    assert flag(args_a, "-ngl") == str(a["ngl"]) == "31" and "--device" not in args_a
    assert flag(args_b, "-ngl") == "0" and flag(args_b, "--device") == "none"
    # simulated: both compute on the CPU, one request at a time; tandem splits the CPUs it
    # may run on (its affinity: one per pytest-xdist worker, docs/testing.md)
    cores = str(len(os.sched_getaffinity(0)))
    for args in (args_a, args_b):
        assert flag(args, "-t") == flag(args, "-tb") == cores
    assert a["threads"] == b["threads"] == int(cores)
    metrics = http("GET", s.url + "/metrics")[1]
    assert f'tandem_model_device{{model="{A}",device="gpu:0"}} 1' in metrics
    assert f'tandem_model_device{{model="{B}",device="cpu"}} 1' in metrics
    results = [run(s)[0] for _ in range(50)]
    assert results == [200] * 50
    assert s.loads() == {A: 1, B: 1}
    assert s.model(A)["evictions"] == s.model(B)["evictions"] == 0
    s.stop()
    # every engine feeds the cost cache: loads and answers per prompt token
    entries = [json.loads(p.read_text()) for p in (cache_root() / "footprints").glob("cost-*.json")
               if p.stat().st_mtime >= t0]
    mine = [e for e in entries if e["model"] == str(model_file(B, True)[0])]
    assert mine and mine[0]["cpu"]["loads"] >= 1 and mine[0]["cpu"]["tokens"] > 0


def test_rotation_reads_ahead_and_looks_ahead(serve_factory):
    s = serve_factory(serve_config(a_device="gpu", b_device="gpu"))
    assert "rotates" in s.log()
    for _ in range(3):  # evaluated each time, not answered by the decision cache
        assert run(s, headers={"Cache-Control": "no-cache"})[0] == 200
    a, b = s.model(A), s.model(B)
    assert a["loads"] >= 3 and b["loads"] >= 3  # they rotate: a swap per stage
    assert b["lookaheads"] >= 3  # each decide announced its verify stage
    assert b["prefetches"] >= 1 and a["prefetches"] >= 1
    for m in (a, b):
        assert m["swap"]["ready_ms"] is not None and m["swap"]["first_answer_ms"] is not None
    assert a["swap"]["stop_ms"] is not None
    metrics = http("GET", s.url + "/metrics")[1]
    assert f'tandem_model_prefetches_total{{model="{B}"}}' in metrics


def test_a_lookahead_loads_the_verifier_when_memory_allows(serve_factory):
    s = serve_factory(serve_config(vram="4GiB"))
    assert s.loads() == {A: 0, B: 0}
    assert run(s)[0] == 200
    assert s.model(B)["lookaheads"] == 1 and s.loads() == {A: 1, B: 1}


# --- bad input --------------------------------------------------------------------------------

def check(tandem_bin, tmp_path, text):
    cfg = tmp_path / "t.yaml"
    cfg.write_text(text)
    return subprocess.run([str(tandem_bin), "serve", "--config", str(cfg), "--check"],
                          capture_output=True, text=True, timeout=60), cfg


def test_gpu_index_beyond_the_machine_is_a_config_error(tandem_bin, tmp_path):
    done, cfg = check(tandem_bin, tmp_path, serve_config(a_device="gpu:3"))
    assert done.returncode == 2
    line = next(i for i, l in enumerate(cfg.read_text().splitlines(), 1) if "gpu:3" in l)
    assert f"{cfg}:{line}: models.{A}.device: gpu:3, but this machine has one GPU, gpu:0" \
        in done.stderr, done.stderr
    assert "serving" not in done.stderr


def test_cpu_with_ngl_is_a_contradiction(tandem_bin, tmp_path):
    done, cfg = check(tandem_bin, tmp_path, serve_config(b_device="cpu", extra_b="    ngl: 10"))
    assert done.returncode == 2
    assert f"models.{B}.device: cpu contradicts ngl: 10" in done.stderr, done.stderr


def test_a_cpu_model_larger_than_host_ram_does_not_fit(tandem_bin, tmp_path):
    done, _ = check(tandem_bin, tmp_path,
                    serve_config(b_device="cpu").replace("ram: 4GiB", "ram: 100MiB"))
    assert done.returncode == 2
    assert f"models.{B}.device: cpu: does not fit: it needs" in done.stderr, done.stderr
    # the models get budget.ram less the decision cache's cap, and the message says so
    assert "of host RAM, 36.0 MiB is available (after cache.max_bytes, 64.0 MiB)" in done.stderr


def test_gpu_without_a_gpu_or_vram_is_a_config_error(tandem_bin, tmp_path):
    if Path("/dev/nvidia0").exists():
        pytest.skip("a GPU is present")
    done, _ = check(tandem_bin, tmp_path,
                    serve_config(a_device="gpu").replace("  vram: 800MiB\n", ""))
    assert done.returncode == 2
    assert f"models.{A}.device: gpu, but no GPU was found and budget.vram is not set" \
        in done.stderr, done.stderr


def test_the_shipped_kev9b_example_keeps_laya_on_the_cpu(tandem_bin):
    root = Path(__file__).resolve().parents[2]
    j = plan_json(tandem_bin, "--config", root / "examples" / "kev9b-laya-6gb.yaml",
                  "--no-measured")
    d = devices(j["placement"]["chosen"])
    assert d["kev-9b"] == ("gpu:0", 33, 33, False) and d["laya"] == ("cpu", 0, 31, False)
    assert j["placement"]["chosen"]["work"][0] == {
        "name": "decide", "pipeline": True, "seconds": j["placement"]["chosen"]["expected_s"],
        "loads": 0.0}
