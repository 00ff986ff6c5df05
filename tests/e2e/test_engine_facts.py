"""Facts about the pinned engine that tandem relies on (shared/reference/engine.md).

Each test fails loudly if a newer engine changes the behaviour, so an engine
update cannot silently break tandem's planning or API assumptions.
"""
import re
import subprocess

import pytest
from conftest import PINS, http

pytestmark = pytest.mark.quick  # in `make check` (docs/testing.md)


def test_version_reports_the_pinned_build_and_commit(engine_path):
    out = subprocess.run([str(engine_path), "--version"], capture_output=True, text=True,
                         timeout=30, check=True)
    line = (out.stdout + out.stderr).splitlines()[0]
    assert re.fullmatch(r"version: \S+ \(build (\d+), commit (\S+)\)", line), line
    assert f"(build {PINS['ENGINE_BUILD']}, commit {PINS['ENGINE_COMMIT']})" in line


def test_health_says_ok_once_loaded(smollm2_server):
    assert http("GET", smollm2_server.url + "/health") == (200, {"status": "ok"})


def test_systemone_route_exists_and_refuses_non_decision_models(smollm2_server):
    status, body = http("POST", smollm2_server.url + "/v1/systemone", {
        "state": "A customer asks for a refund.",
        "questions": {"angry": {"type": "noul", "instructions": "Is the customer angry?"}}})
    assert status == 501, body
    assert body == {"error": {"code": 501, "message": "This model is not a decision model",
                              "type": "not_supported_error"}}


def test_models_endpoint_describes_the_model(smollm2_server):
    status, body = http("GET", smollm2_server.url + "/v1/models")
    assert status == 200, body
    meta = body["data"][0]["meta"]
    assert meta["n_params"] > 100_000_000  # SmolLM2-135M
    assert meta["size"] > 0


def test_buffer_sizes_are_logged_at_verbosity_4(smollm2_server):
    """The planner's calibration parses these lines; they print only at -lv 4."""
    log = smollm2_server.log_text()
    mib = r"=\s+[0-9.]+ MiB"
    for pattern in (rf"load_tensors:\s+CPU\S* model buffer size {mib}",
                    rf"llama_kv_cache:\s+CPU KV buffer size {mib}",
                    rf"compute buffer size {mib}",
                    rf"CPU\s+output buffer size {mib}"):
        assert re.search(pattern, log), f"no line matching {pattern!r} in the engine log"
