"""`tandem serve` end to end: the real engine, the fixture decision models, and
the real TypeSafe and OpenAI Python SDKs as clients.

Budgets are host RAM (no GPU here): SmolLM2 plans to about 185 MiB and
Gemma-3 to about 305 MiB at ctx 2048, so 2 GiB holds both and 400 MiB only
one at a time."""
import json
import os
import re
import signal
import socket
import threading
import time
import urllib.request

import pytest
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families
from typesafe_sdk import TypeSafeClient

from conftest import fixture_path, http, http_raw, model_file, rotating_budget

A, B = "smollm2-decider", "gemma3-decider"


def config(budget="2GiB", extra="", a_extra="", limits="", tiny=False):
    (path_a, keys_a), (path_b, keys_b) = model_file(A, tiny), model_file(B, tiny)
    return f"""budget:
  ram: {budget}
defaults:
  model: {A}
limits:
  request_timeout: 120s
{limits}
{extra}
models:
  {A}:
    path: {path_a}
    aliases: [decider]
    {keys_a}
    flash_attn: false
{a_extra}
  {B}:
    path: {path_b}
    aliases: [verifier]
    {keys_b}
    flash_attn: false
"""


def choice(state, model=None):
    body = {"state": state,
            "questions": {"act": {"type": "choice", "instructions": "What should the operator do?",
                                  "criteria": {"reduce": "reduce concurrency",
                                               "stop": "stop non-critical jobs",
                                               "nothing": "change nothing"}}}}
    if model:
        body["model"] = model
    return body


def long_chat(url, model=A, tokens=400, timeout=120):
    body = {"model": model, "max_tokens": tokens, "temperature": 0,
            "messages": [{"role": "user", "content": "Write a very long story about a lighthouse."}]}
    return http("POST", url + "/v1/chat/completions", body, timeout=timeout)


def wait_for(cond, timeout=60):
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, "condition not reached in time"
        time.sleep(0.02)


def audit_lines(s):
    return [json.loads(line) for line in s.audit.read_text().splitlines()]


def error_shape(body, status):
    assert body["error"]["code"] == status
    assert body["error"]["message"] and body["error"]["type"]
    assert body["detail"] == {"error_type": body["error"]["type"],
                              "message": body["error"]["message"]}


# --- real clients -----------------------------------------------------------------------------

def test_typesafe_sdk_system_one_and_models(serve_factory):
    s = serve_factory(config())
    # first requests load the engines: allow more than the SDK's 10 s default on a busy machine
    client = TypeSafeClient(api_key="any-token", base_url=s.url, model="decider", timeout=120)
    # a state over 1 KiB: the SDK sends it zstd-compressed when zstd is available
    state = "The build farm is at 97% memory and the queue keeps growing. " * 30
    r = client.system_one(state=state, questions={
        "act": {"type": "choice", "instructions": "What now?",
                "criteria": {"reduce": "reduce concurrency", "stop": "stop jobs"}},
        "urgent": {"type": "noul", "instructions": "Is this urgent?"},
        "level": {"type": "score", "instructions": "How bad?", "criteria": ["fine", "bad", "awful"]}})
    act = r.answers["act"]
    assert act.choice in ("reduce", "stop")
    assert abs(sum(act.probabilities.values()) - 1) < 1e-6
    assert 0 <= r.answers["urgent"].noul <= 1
    assert r.usage.input_tokens > 0
    assert r.request_id
    names = [m.name for m in client.models.list().models]
    assert A in names and B in names and "jev-latest" in names
    # jev-latest (the SDK's default) goes to defaults.model
    r2 = TypeSafeClient(api_key="x", base_url=s.url, timeout=120).system_one(
        state="disk full", questions={"u": {"type": "noul", "instructions": "urgent?"}})
    assert r2.model == A


def test_zstd_request_body(serve_factory):
    from backports import zstd
    s = serve_factory(config())
    body = json.dumps(choice("memory pressure " * 100)).encode()
    req = urllib.request.Request(s.url + "/v1/systemone", zstd.compress(body), method="POST",
                                 headers={"Content-Type": "application/json",
                                          "Content-Encoding": "zstd"})
    st, answer = _send(req)
    assert st == 200 and answer["answers"]["act"]["choice"]
    req = urllib.request.Request(s.url + "/v1/systemone", b"\x28\xb5\x2f\xfd garbage",
                                 method="POST", headers={"Content-Type": "application/json",
                                                         "Content-Encoding": "zstd"})
    st, err = _send(req)
    assert st == 400 and "zstd" in err["error"]["message"]
    req = urllib.request.Request(s.url + "/v1/systemone", body, method="POST",
                                 headers={"Content-Type": "application/json",
                                          "Content-Encoding": "br"})
    st, err = _send(req)
    assert st == 415 and "Content-Encoding" in err["error"]["message"]


def test_openai_sdk_streamed_chat_and_models(serve_factory):
    s = serve_factory(config())
    client = OpenAI(base_url=s.url + "/v1", api_key="unused")
    ids = [m.id for m in client.models.list().data]
    assert ids == [A, B]
    stream = client.chat.completions.create(model=A, stream=True, max_tokens=16,
                                            messages=[{"role": "user", "content": "Say hello"}])
    chunks = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
    assert len(chunks) >= 2, chunks
    full = client.chat.completions.create(model="decider", max_tokens=8,
                                          messages=[{"role": "user", "content": "Say hello"}])
    assert full.choices[0].message.content


def test_request_id_echoed_or_generated(serve_factory):
    s = serve_factory(config())
    st, body, h = s.systemone(choice("x"), {"x-typesafe-request-id": "abc-123"})
    assert st == 200 and h["x-typesafe-request-id"] == "abc-123"
    assert h["X-Tandem-Queue-Position"] == "0" and h["X-Tandem-Model"] == A
    st, body, h = s.systemone(choice("y"))  # a new decision: "x" again would be a cache hit
    assert h["x-typesafe-request-id"].startswith("req_")
    assert list(body) == ["model", "answers", "usage"]  # passed through unchanged


# --- residency ---------------------------------------------------------------------------------

def test_both_resident_200_alternating_requests_zero_loads(serve_factory):
    s = serve_factory(config("2GiB", tiny=True))
    for m in (A, B):
        assert s.systemone(choice("warm", m))[0] == 200
    assert s.loads() == {A: 1, B: 1}
    for i in range(200):
        st, body, _ = s.systemone(choice(f"case {i}", (A, B)[i % 2]))
        assert st == 200, body
    assert s.loads() == {A: 1, B: 1}
    assert all(m["evictions"] == 0 and m["state"] == "resident" for m in s.status()["models"])


def test_rotation_groups_alternating_clients(serve_factory):
    # it counts loads, never a probability: the tiny stand-ins, on a budget that rotates them
    s = serve_factory(config(rotating_budget(serve_factory, lambda b: config(b, tiny=True)),
                             tiny=True))
    n, results = 20, []

    def client(model):
        for i in range(n):
            t = time.time()
            st, body, _ = s.systemone(choice(f"case {i}", model), {"X-Tandem-Timeout-Ms": "30000"})
            results.append((st, time.time() - t, body))

    threads = [threading.Thread(target=client, args=(m,)) for m in (A, B)]
    [t.start() for t in threads]
    [t.join(180) for t in threads]
    assert len(results) == 2 * n
    assert all(st == 200 for st, _, _ in results), [b for st, _, b in results if st != 200][:3]
    loads = sum(s.loads().values())
    print(f"rotation: {2 * n} alternating requests, {loads} loads")
    assert loads <= 2 * n // 4  # well below one per request (16 per group by default)
    # only one model is ever resident at once on this budget
    assert sum(m["state"] == "resident" for m in s.status()["models"]) <= 1


@pytest.mark.alone  # bounds wall-clock time
def test_deadline_while_other_model_busy_gives_504_on_time(serve_factory):
    s = serve_factory(config("400MiB", limits="  queue_depth: 8"))
    assert s.systemone(choice("warm", A))[0] == 200
    worker = threading.Thread(target=long_chat, args=(s.url,))
    worker.start()
    wait_for(lambda: s.model(A)["running"] == 1)
    t = time.time()
    st, body, _ = s.systemone(choice("x", A), {"X-Tandem-Timeout-Ms": "700"})
    took = time.time() - t
    # B must load first (after A's turn), and its expected load does not fit 300 ms: 504 at once
    t = time.time()
    st_b, body_b, _ = s.systemone(choice("x", B), {"X-Tandem-Timeout-Ms": "300"})
    took_b = time.time() - t
    worker.join()
    assert st == 504, body
    error_shape(body, 504)
    assert body["error"]["timing"]["queued_ms"] >= 500
    assert 0.6 <= took < 2.0
    msg = body["error"]["message"]
    assert "while queued" in msg, msg
    # how long it ran, and what this model's answers take, to choose a deadline by
    ran = int(re.search(r"the request ran (\d+) ms", msg).group(1))
    assert 600 <= ran < 2000, msg
    assert re.search(r"its last answer took \d+ ms", msg), msg
    assert st_b == 504 and "must load first" in body_b["error"]["message"], body_b
    assert took_b < 0.3


# --- faults -----------------------------------------------------------------------------------

def test_kill9_mid_request_gives_502_then_reload(serve_factory):
    s = serve_factory(config())
    assert s.systemone(choice("warm"))[0] == 200
    pid = s.model(A)["pid"]
    threading.Timer(0.5, os.kill, (pid, signal.SIGKILL)).start()
    st, body = long_chat(s.url)
    assert st == 502, body
    error_shape(body, 502)
    assert body["error"]["type"] == "engine_failed"  # a generation is never resent
    assert A in body["error"]["message"] and "signal 9" in body["error"]["message"]
    st, body, _ = s.systemone(choice("after"))
    assert st == 200
    m = s.model(A)
    assert m["loads"] == 2 and m["crashes"] == 1 and m["pid"] != pid
    lines = audit_lines(s)  # every line parses
    assert [l["status"] for l in lines if l["route"] in ("chat", "systemone")][-2:] == [502, 200]


def test_bad_input_gets_documented_errors_and_daemon_stays_up(serve_factory):
    s = serve_factory(config(limits="  queue_depth: 2\n  max_body: 64KiB"))
    st, raw = http_raw("POST", s.url + "/v1/systemone")  # empty body
    assert st == 400
    req = urllib.request.Request(s.url + "/v1/systemone", b"{not json", method="POST",
                                 headers={"Content-Type": "application/json"})
    st, body = _send(req)
    assert st == 400 and "not valid JSON" in body["error"]["message"]
    error_shape(body, 400)
    st, body = http("POST", s.url + "/v1/systemone",
                    {"state": "x", "questions": {"q": {"type": "choice", "instructions": "i",
                                                       "criteria": ["a"]}}})
    assert st == 400 and body["error"]["param"] == "questions.q.criteria"
    big = {"state": "x" * 70000, "questions": {"q": {"type": "noul", "instructions": "i"}}}
    st, body = http("POST", s.url + "/v1/systemone", big)
    assert st == 413
    error_shape(body, 413)
    st, body = http("POST", s.url + "/v1/systemone", {**choice("x"), "model": "nope"})
    assert st == 400 and body["error"]["type"] == "model_not_found"
    st, body = http("GET", s.url + "/v1/nothing")
    assert st == 404
    error_shape(body, 404)
    # queue full: one running (a long chat on the only slot), two queued, the next is refused
    assert s.systemone(choice("warm"))[0] == 200
    got = []
    threads = [threading.Thread(target=lambda: got.append(long_chat(s.url, tokens=200)[0]))]
    threads[0].start()
    wait_for(lambda: s.model(A)["running"] == 1)
    for i in range(2):  # two different decisions: identical ones would wait as one
        threads.append(threading.Thread(
            target=lambda i=i: got.append(s.systemone(choice(f"q{i}"))[0])))
        threads[-1].start()
    wait_for(lambda: s.model(A)["queued"] == 2)
    st, body, h = s.systemone(choice("one too many"))
    assert st == 429, body
    error_shape(body, 429)
    assert int(h["Retry-After"]) >= 1   # computed from the work ahead (docs/serve.md)
    [t.join() for t in threads]
    assert sorted(got) == [200, 200, 200]
    assert http("GET", s.url + "/health")[0] == 200


def _send(req):
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_client_disconnect_frees_the_slot(serve_factory):
    s = serve_factory(config())
    assert s.systemone(choice("warm"))[0] == 200
    body = json.dumps({"model": A, "max_tokens": 2000, "temperature": 0,
                       "messages": [{"role": "user", "content": "Write a very long story."}]})
    sock = socket.create_connection(("127.0.0.1", s.port))
    sock.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
    wait_for(lambda: s.model(A)["running"] == 1)
    sock.close()
    t = time.time()
    st, _, _ = s.systemone(choice("next"))
    assert st == 200 and time.time() - t < 10
    assert any(l["status"] == 499 for l in audit_lines(s))


def dribble_until_closed(sock, data, every=0.25, limit=10):
    """Sends data a byte every `every` s (then waits) until the server closes
    sock; returns the seconds that took, or None past limit."""
    t0 = time.time()
    sock.settimeout(every)
    for i in range(10**6):
        if time.time() - t0 > limit:
            return None
        try:
            if i < len(data):
                sock.send(data[i:i + 1])
            if sock.recv(4096) == b"":
                return time.time() - t0
        except socket.timeout:
            continue
        except OSError:  # reset, or a send after the close
            return time.time() - t0


@pytest.mark.alone  # bounds wall-clock time
def test_slow_headers_are_cut_at_the_header_timeout(serve_factory):
    """libevent's read timeout restarts with each byte; the header timeout
    must bound the whole read (slowloris), and after an answer on a kept-alive
    connection the idle timeout plus the header timeout bound the next one."""
    s = serve_factory(config(limits="  header_timeout: 1s\n  idle_timeout: 2s"))
    head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Pad: a\r\n" * 100 + b"\r\n"
    fresh = dribble_until_closed(socket.create_connection(("127.0.0.1", s.port)), head)
    assert fresh is not None and 0.9 < fresh < 1.9, fresh
    kept = socket.create_connection(("127.0.0.1", s.port))
    kept.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert kept.recv(4096).startswith(b"HTTP/1.1 200")
    after = dribble_until_closed(kept, head)
    assert after is not None and 2.9 < after < 3.9, after
    # a client that sends its request whole is served as before
    assert http("GET", s.url + "/health")[0] == 200


def test_a_stream_that_pauses_past_the_header_timeout_is_not_cut(serve_factory):
    """libevent reads a connection during a streamed answer (to see a close)
    under its read timeout; a pause in the stream longer than that (here the
    engine SIGSTOPped for 2.5 s against a 1 s header timeout) must not cut it."""
    s = serve_factory(config(limits="  header_timeout: 1s"))
    assert s.systemone(choice("warm"))[0] == 200
    pid = s.model(A)["pid"]
    body = json.dumps({"model": A, "max_tokens": 60, "temperature": 0, "stream": True,
                       "messages": [{"role": "user", "content": "Count to twenty."}]}).encode()
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                 b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    got = sock.recv(65536)
    assert got.startswith(b"HTTP/1.1 200"), got[:200]
    os.kill(pid, signal.SIGSTOP)
    time.sleep(2.5)
    os.kill(pid, signal.SIGCONT)
    while b"0\r\n\r\n" not in got[-16:]:
        chunk = sock.recv(65536)
        assert chunk, "the stream was cut"
        got += chunk
    sock.close()
    assert b"data: [DONE]" in got
    assert [l["status"] for l in audit_lines(s) if l["route"] == "chat"] == [200]


def test_auth_with_api_keys(serve_factory):
    s = serve_factory(config(extra="api_keys: [k-one, k-two]"))
    assert http("GET", s.url + "/health")[0] == 200  # no key needed
    st, body, h = s.systemone(choice("x"))
    assert st == 401 and h["WWW-Authenticate"] == "Bearer"
    error_shape(body, 401)
    assert s.systemone(choice("x"), {"Authorization": "Bearer k-on"})[0] == 401
    assert s.systemone(choice("x"), {"Authorization": "Bearer k-two"})[0] == 200
    client = TypeSafeClient(api_key="k-one", base_url=s.url, timeout=120)
    assert client.models.list().models


# --- observability and control --------------------------------------------------------------------

def test_status_metrics_and_admin(serve_factory):
    s = serve_factory(config())
    st = s.status()
    assert [m["state"] for m in st["models"]] == ["unloaded", "unloaded"]
    st, body = http("POST", s.url + f"/admin/models/{B}/load")
    assert st == 202
    for _ in range(200):
        if s.model(B)["state"] == "resident":
            break
        time.sleep(0.05)
    m = s.model(B)
    assert m["state"] == "resident" and m["measured"]["host_bytes"] > 0
    assert s.systemone(choice("x", B))[0] == 200
    st, raw = http_raw("GET", s.url + "/metrics")
    fams = {f.name: f for f in text_string_to_metric_families(raw.decode())}
    loads = {x.labels["model"]: x.value for x in fams["tandem_model_loads"].samples
             if x.name == "tandem_model_loads_total"}
    assert loads[B] == 1
    reqs = [x for x in fams["tandem_requests"].samples
            if x.labels.get("route") == "systemone" and x.labels.get("status") == "200"]
    assert reqs and reqs[0].value == 1
    assert "tandem_queue_wait_seconds" in fams
    assert http("POST", s.url + f"/admin/models/{B}/unload")[0] == 202
    for _ in range(200):
        if s.model(B)["state"] == "unloaded":
            break
        time.sleep(0.05)
    assert s.model(B)["state"] == "unloaded"
    assert http("POST", s.url + "/admin/models/nope/load")[0] == 404


def test_sigterm_drains_in_flight_and_leaves_no_engine(serve_factory):
    # a grace long enough for the 100-token chat even on a loaded machine
    s = serve_factory(config(extra="shutdown:\n  grace: 300s"))
    assert s.systemone(choice("warm"))[0] == 200
    pid = s.model(A)["pid"]
    out = []
    worker = threading.Thread(target=lambda: out.append(long_chat(s.url, tokens=100)))
    worker.start()
    wait_for(lambda: s.model(A)["running"] == 1)
    s.proc.send_signal(signal.SIGTERM)
    worker.join(60)
    assert out and out[0][0] == 200  # finished during the drain
    assert s.proc.wait(60) == 0
    assert not os.path.exists(f"/proc/{pid}")


def test_sighup_reloads_keys_and_keeps_serving(serve_factory):
    s = serve_factory(config())
    assert s.systemone(choice("x"))[0] == 200
    s.config.write_text(s.config.read_text().replace("defaults:", "api_keys: [new-key]\ndefaults:"))
    s.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "SIGHUP: reloaded" in s.log())
    assert s.systemone(choice("x"))[0] == 401
    assert s.systemone(choice("x"), {"Authorization": "Bearer new-key"})[0] == 200
    s.config.write_text("listen: [broken\n")
    s.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "keeping the running config" in s.log())
    assert s.systemone(choice("x"), {"Authorization": "Bearer new-key"})[0] == 200
    assert "keeping the running config" in s.log()


def test_check_reports_config_errors(tandem_bin, tmp_path):
    import subprocess
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"models:\n  m:\n    path: {fixture_path(A + '.gguf')}\n    ctx: 8k\n")
    r = subprocess.run([str(tandem_bin), "serve", "--config", str(bad), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert f"{bad}:4: models.m.ctx: expected" in r.stderr
    good = tmp_path / "good.yaml"
    good.write_text(config())
    r = subprocess.run([str(tandem_bin), "serve", "--config", str(good), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text(config("100MiB"))
    r = subprocess.run([str(tandem_bin), "serve", "--config", str(tiny), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "models." in r.stderr


def test_admin_load_evicts_an_idle_model_then_loads(serve_factory):
    s = serve_factory(config("400MiB"))
    assert s.systemone(choice("warm", A))[0] == 200
    time.sleep(0.2)  # past the grouping linger: A is idle
    st, body = http("POST", s.url + f"/admin/models/{B}/load")
    assert st == 202, body
    for _ in range(300):
        if s.model(B)["state"] == "resident":
            break
        time.sleep(0.05)
    assert s.model(B)["state"] == "resident" and s.model(A)["state"] == "unloaded"
    assert s.model(A)["evictions"] == 1


def test_eviction_takes_the_lowest_priority_before_the_least_recently_used(serve_factory):
    """Three models on a budget that holds any two: the third's load evicts
    the idle model of lowest priority, although the other one was used less
    recently (plain LRU would evict that one)."""
    C = "kev-tiny"
    def three(budget):
        return config(budget, a_extra="    priority: 0") .replace(
            f"  {B}:\n", f"  {B}:\n    priority: 5\n") + f"""  {C}:
    path: {fixture_path(C + '.gguf')}
    ctx: 512
    priority: 5
"""
    probe = serve_factory(three("8GiB"))
    planned = {m["name"]: m["planned"]["host_bytes"] for m in probe.status()["models"]}
    probe.stop()
    sizes = sorted(planned.values())
    budget = sizes[1] + sizes[2] + sizes[0] // 2  # any two fit, never three
    assert budget < sum(sizes)
    s = serve_factory(three(f"{budget}B"))
    assert s.systemone(choice("first", B))[0] == 200
    assert s.systemone(choice("then", A))[0] == 200  # B is now the least recently used
    time.sleep(0.2)  # past the grouping linger: both idle
    assert s.systemone(choice("third", C))[0] == 200
    st = {m["name"]: m for m in s.status()["models"]}
    assert st[A]["state"] == "unloaded" and st[A]["evictions"] == 1
    assert st[B]["state"] == "resident" and st[B]["evictions"] == 0
    assert st[C]["state"] == "resident"


def test_shipped_examples_check_and_serve(tandem_bin, tmp_path):
    import subprocess
    from conftest import ROOT, free_port
    for name in ("tandem.yaml", "demo.yaml", "kev-laya-6gb.yaml", "kev9b-laya-6gb.yaml"):
        r = subprocess.run([str(tandem_bin), "serve", "--config", str(ROOT / "examples" / name),
                            "--check"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    port = free_port()
    p = subprocess.Popen([str(tandem_bin), "serve", "--config", str(ROOT / "examples/tandem.yaml"),
                          "--listen", f"127.0.0.1:{port}"], stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: p.poll() is not None or _health(url) == 200)
        assert p.poll() is None
        st, body = http("POST", url + "/v1/systemone", choice("x", "decider"), timeout=120)
        assert st == 200 and body["model"], body
    finally:
        p.terminate()
        assert p.wait(60) == 0


def _health(url):
    try:
        return http("GET", url + "/health", timeout=2)[0]
    except OSError:
        return None
