"""The metrics text tandem serves parses with the official Prometheus client's
parser: families, types, help, samples and label values all round-trip.

build/tests/prom_dump (tests/prom_dump.c, built by `make e2e`) fills a
registry with the label values given on its command line and prints it.
"""
import os
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.quick  # in `make check` (docs/testing.md)

ROOT = Path(__file__).resolve().parents[2]
PROM_DUMP = Path(os.environ.get("TANDEM_PROM_DUMP", ROOT / "build" / "tests" / "prom_dump"))

# label values that need escaping or look like syntax
TRICKY = ['plain', 'a"quote', 'back\\slash', 'new\nline', '', 'caf\u00e9 \u2603',
          '{x="1"},y', '\\"\\n', 'trailing\\', 'tab\there', '# HELP x y']
BOUNDS = ["0.005", "0.1", "0.5", "1", "2.5", "+Inf"]


@pytest.fixture(scope="module")
def families():
    if not PROM_DUMP.exists():
        pytest.fail(f"{PROM_DUMP} is missing: run `make {PROM_DUMP.relative_to(ROOT)}`")
    out = subprocess.run([str(PROM_DUMP), *TRICKY], capture_output=True, timeout=30)
    assert out.returncode == 0, out.stderr.decode()
    text = out.stdout.decode("utf-8")
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_families_types_and_help(families):
    assert set(families) == {"tandem_up", "tandem_requests", "tandem_resident_bytes",
                             "tandem_latency_seconds"}
    assert families["tandem_up"].type == "gauge"
    assert families["tandem_up"].documentation == "1 while serving; a \\ backslash\nand a newline"
    assert families["tandem_requests"].type == "counter"
    assert families["tandem_requests"].documentation == 'Requests by "model" and route.'
    assert families["tandem_resident_bytes"].type == "gauge"
    assert families["tandem_latency_seconds"].type == "histogram"
    [up] = families["tandem_up"].samples
    assert (up.name, up.labels, up.value) == ("tandem_up", {}, 1.0)


def test_counter_and_gauge_label_values_round_trip(families):
    reqs = families["tandem_requests"].samples
    assert [s.name for s in reqs] == ["tandem_requests_total"] * len(TRICKY)
    assert [s.labels for s in reqs] == [{"model": v, "route": "/v1/x"} for v in TRICKY]
    assert [s.value for s in reqs] == [float(i + 1) for i in range(len(TRICKY))]
    res = families["tandem_resident_bytes"].samples
    assert [(s.labels["model"], s.value) for s in res] == [(v, i + 0.5)
                                                           for i, v in enumerate(TRICKY)]


def test_histogram_buckets_sum_and_count(families):
    samples = families["tandem_latency_seconds"].samples
    per_series = len(BOUNDS) + 2
    assert len(samples) == per_series * len(TRICKY)
    for i, value in enumerate(TRICKY):
        chunk = samples[i * per_series:(i + 1) * per_series]
        obs = i * 0.3
        buckets = chunk[:len(BOUNDS)]
        assert [s.name for s in buckets] == ["tandem_latency_seconds_bucket"] * len(BOUNDS)
        assert [s.labels for s in buckets] == [{"model": value, "le": le} for le in BOUNDS]
        assert [s.value for s in buckets] == [1.0 if obs <= float(le) else 0.0 for le in BOUNDS]
        total, count = chunk[-2], chunk[-1]
        assert (total.name, total.labels) == ("tandem_latency_seconds_sum", {"model": value})
        assert total.value == obs, "numbers round-trip exactly"
        assert (count.name, count.labels, count.value) == (
            "tandem_latency_seconds_count", {"model": value}, 1.0)
