"""One node's gateway contract and remote models, end to end (docs/scale-out.md).

Real `tandem serve` daemons on the fixture decision models. Where a refusing or
slow upstream is needed, a few lines of Python stand in for it (RefusingUpstream):
a fixture that answers what a real server would in that failure, never the
thing under test. Fleets behind Envoy and HAProxy are in test_scaleout.py."""
import json
import re
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import FIXTURES, ROOT, fixture_path, http
from fleet import get, metric, post

pytestmark = pytest.mark.quick  # in `make check` (docs/testing.md)

A, B = "smollm2-decider", "gemma3-decider"
NODE_GAUGES = ("tandem_requests_waiting", "tandem_requests_running", "tandem_slots_busy_ratio",
               "tandem_queue_capacity", "tandem_ready")
PIPELINE_REQUEST = json.loads((ROOT / "examples/requests/pressure.json").read_text())


def local(extra="", model_extra="", limits=""):
    return f"""budget:
  ram: 2GiB
limits:
  request_timeout: 120s
{limits}
{extra}
models:
  {A}:
    path: {fixture_path(A + '.gguf')}
    aliases: [decider]
    ctx: 2048
{model_extra}
"""


def choice(model=A, state="The build server swaps; eight jobs run."):
    return {"model": model, "state": state,
            "questions": {"act": {"type": "choice", "instructions": "What should the operator do?",
                                  "criteria": {"reduce": "reduce concurrency",
                                               "stop": "stop non-critical jobs",
                                               "nothing": "change nothing"}}}}


def example(name, upstream=None):
    """An example config's text without its listen line, fixture paths resolved."""
    text = (ROOT / "examples" / name).read_text()
    text = re.sub(r"(?m)^listen:.*\n", "", text)
    text = text.replace("${XDG_CACHE_HOME}/tandem/fixtures/", f"{FIXTURES}/")
    if upstream:
        text = text.replace("http://127.0.0.1:8092", upstream)
    return text


class RefusingUpstream:
    """A /v1/systemone server that is healthy but refuses every request with
    `status` (a busy node), recording what it was sent."""

    def __init__(self, status=503):
        self.seen = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def reply(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self.reply(200, {"status": "ok"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.seen.append((dict(self.headers), body))
                self.reply(status, {"error": {"code": status, "type": "unavailable_error",
                                              "message": "busy"}})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_node_headers_probes_and_typed_gauges(serve_factory):
    s = serve_factory(local("api_keys: [sekret]\nnode:\n  id: node-a\nmetrics:\n  compat: vllm"))
    assert get(s.url + "/livez")[0] == 200
    status, text, _ = get(s.url + "/metrics")          # no key needed by default
    assert status == 200
    fam = {f.name: f for f in text_string_to_metric_families(text)}
    for name in NODE_GAUGES + ("vllm:num_requests_waiting", "vllm:num_requests_running",
                               "vllm:kv_cache_usage_perc"):
        assert fam[name].type == "gauge", name
        assert [x.labels for x in fam[name].samples] == [{}], name
    assert metric(text, "tandem_queue_capacity") == 64
    assert metric(text, "tandem_ready") == 1
    a = post(s.url + "/v1/systemone", choice("decider"),
             {"Authorization": "Bearer sekret", "x-request-id": "trace-42"})
    assert a.status == 200, a
    assert a.headers["x-request-id"] == "trace-42" and a.node == "node-a"
    assert re.fullmatch(r"TEXT application_utilization=[0-9.e-]+, "
                        r"named_metrics\.requests_waiting=\d+", a.headers["endpoint-load-metrics"])
    audit = [json.loads(x) for x in s.audit.read_text().splitlines()]
    assert any(a["request_id"] == "trace-42" and a["status"] == 200 for a in audit)
    models = json.loads(get(s.url + "/v1/models", {"Authorization": "Bearer sekret"})[1])
    assert {m["id"]: m["status"] for m in models["data"]} == {A: "resident"}
    assert post(s.url + "/v1/systemone", choice()).status == 401   # the API still needs its key


def test_metrics_can_require_the_key(serve_factory):
    s = serve_factory(local("api_keys: [sekret]\nmetrics:\n  require_key: true"))
    assert get(s.url + "/metrics")[0] == 401
    assert get(s.url + "/metrics", {"Authorization": "Bearer sekret"})[0] == 200
    assert get(s.url + "/health")[0] == 200 and get(s.url + "/livez")[0] == 200


def test_drain_admits_during_the_delay_then_refuses(serve_factory):
    s = serve_factory(local(model_extra="    pin: true"), drain_delay=3000)
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    status, text, h = get(s.url + "/health")
    assert status == 503 and "draining" in text
    assert h["x-envoy-immediate-health-check-fail"] == "true"
    assert get(s.url + "/livez")[0] == 200
    a = post(s.url + "/v1/systemone", choice())   # still admitted
    assert a.status == 200, a
    assert s.proc.wait(30) == 0                      # then it refuses, finishes and exits


def test_full_queue_is_429_with_a_computed_retry_after(serve_factory):
    s = serve_factory(local(limits="  queue_depth: 1", model_extra="    pin: true"))
    results = []

    def one(i):
        results.append(post(s.url + "/v1/systemone", choice(state=f"case {i}: disk at 9{i}%")))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    refused = [a for a in results if a.status == 429]
    assert refused and len(refused) < 6, results
    for a in refused:
        assert a.json()["error"]["type"] == "queue_full"
        assert int(a.headers["retry-after"]) >= 1
    text = get(s.url + "/metrics")[1]
    assert metric(text, "tandem_rejections_total", model=A, reason="queue_full") == len(refused)


def test_remote_model_fails_over_and_keeps_the_request_id(serve_factory):
    node = serve_factory(local())
    busy = RefusingUpstream(503)
    try:
        front = serve_factory(f"""limits:
  request_timeout: 120s
  health_interval: 200ms
models:
  {A}:
    upstream: [{busy.url}, {node.url}]
    aliases: [decider]
""")
        a = post(front.url + "/v1/systemone", choice("decider"), {"x-request-id": "via-front"})
        assert a.status == 200, a
        assert a.json()["answers"]["act"]["choice"] in ("reduce", "stop", "nothing")
        assert a.headers["x-tandem-attempts"] == "2" and a.headers["x-tandem-upstream"] == node.url
        headers, sent = busy.seen[0]
        assert sent["model"] == A                    # the alias became the upstream's name
        assert headers["x-request-id"] == "via-front"
        assert 0 < int(headers["x-envoy-expected-rq-timeout-ms"]) <= 120000
        audit = [json.loads(x) for x in front.audit.read_text().splitlines()]
        rec = next(a for a in audit if a["request_id"] == "via-front")
        assert rec["upstream"] == node.url and rec["attempts"] == 2
        assert any(json.loads(x)["request_id"] == "via-front"
                   for x in node.audit.read_text().splitlines())
        text = get(front.url + "/metrics")[1]
        assert metric(text, "tandem_upstream_requests_total", model=A, upstream=busy.url,
                      code="503") == 1
        assert metric(text, "tandem_upstream_up", model=A, upstream=node.url) == 1
    finally:
        busy.close()


def test_local_decide_remote_verify_example_matches_one_node(serve_factory):
    verifier_node = serve_factory(example("demo.yaml"))
    front = serve_factory(example("local-decide-remote-verify.yaml", verifier_node.url))
    a = post(front.url + "/v1/pipelines/decide", PIPELINE_REQUEST, timeout=300)
    assert a.status == 200, a
    b = post(verifier_node.url + "/v1/pipelines/decide", PIPELINE_REQUEST, timeout=300)
    assert b.status == 200, b
    split, whole = a.json(), b.json()
    assert split["verdict"] == whole["verdict"] and split["choice"] == whole["choice"]
    stages = {s["stage"]: s["model"] for s in split["timing"]["stages"]}
    assert stages["decide"] == "decider" and "verifier" in stages.values()
    audit = [json.loads(x) for x in verifier_node.audit.read_text().splitlines()]
    assert any(a["route"] == "systemone" and a["model"] == "verifier" for a in audit)
