"""`tandem --version` and `tandem doctor` print true facts about this machine."""
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import PINS

pytestmark = pytest.mark.quick  # in `make check` (docs/testing.md)


def run(tandem_bin, *args, env=None):
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run([str(tandem_bin), *args], capture_output=True, text=True,
                          timeout=60, env=full_env)


def meminfo_gib(key):
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / (1024 * 1024)
    raise KeyError(key)


def test_version_names_tandem_and_the_engine(tandem_bin, engine_path):
    out = run(tandem_bin, "--version")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"tandem {PINS['TANDEM_VERSION']}"
    assert lines[1] == (f"engine (pinned): llama.cpp build {PINS['ENGINE_BUILD']}, "
                        f"commit {PINS['ENGINE_COMMIT']}")
    assert lines[2] == (f"engine (in use): llama.cpp build {PINS['ENGINE_BUILD']}, "
                        f"commit {PINS['ENGINE_COMMIT']}, at {engine_path}")


def test_doctor_reports_engine_models_ram_and_gpu(tandem_bin, engine_path, smollm2_path):
    out = run(tandem_bin, "doctor")
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert f"engine   ok    {engine_path} (from cache)" in text
    assert f"llama.cpp build {PINS['ENGINE_BUILD']}, commit {PINS['ENGINE_COMMIT']}" in text
    assert "serves /v1/systemone: yes" in text
    assert smollm2_path.name in text and PINS["GEMMA3_GGUF"] in text
    total, avail = map(float, re.search(
        r"RAM ([0-9.]+) GiB total, ([0-9.]+) GiB available", text).groups())
    assert abs(total - meminfo_gib("MemTotal")) < 0.1
    assert abs(avail - meminfo_gib("MemAvailable")) < 1.0
    has_nvml = any(Path(d, "libnvidia-ml.so.1").exists()
                   for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"))
    if not has_nvml:
        assert "gpu      none  no NVIDIA GPU: libnvidia-ml.so.1 not found" in text
    assert text.rstrip().endswith("doctor: ready")


def test_doctor_rejects_an_engine_older_than_b11361(tandem_bin, tmp_path):
    old = tmp_path / "llama-server"
    old.write_text("#!/bin/sh\necho 'version: 0.4.0 (build 9000, commit 0123abc)' >&2\n")
    old.chmod(0o755)
    out = run(tandem_bin, "doctor", env={"TANDEM_LLAMA_SERVER": str(old)})
    assert out.returncode == 1
    assert f"engine   FAIL  {old} (from TANDEM_LLAMA_SERVER)" in out.stdout
    assert "build 9000, older than b11361, the first that serves /v1/systemone" in out.stdout


def test_llama_server_flag_beats_the_environment(tandem_bin, engine_path, tmp_path):
    missing = tmp_path / "nope"
    out = run(tandem_bin, "--llama-server", str(missing), "doctor",
              env={"TANDEM_LLAMA_SERVER": str(engine_path)})
    assert out.returncode == 1
    assert f"{missing}: no executable llama-server here (from --llama-server)" in out.stdout
    out = run(tandem_bin, "doctor", "--llama-server", str(engine_path))
    assert out.returncode == 0, out.stdout


def test_help_and_usage_errors(tandem_bin):
    assert "usage: tandem" in run(tandem_bin, "--help").stdout
    assert "usage: tandem doctor" in run(tandem_bin, "doctor", "--help").stdout
    bad = run(tandem_bin, "frobnicate")
    assert bad.returncode == 2 and "unknown command 'frobnicate'" in bad.stderr
    assert run(tandem_bin, "doctor", "--bogus").returncode == 2
    assert run(tandem_bin).returncode == 2
