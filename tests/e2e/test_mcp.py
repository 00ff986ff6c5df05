"""tandem as MCP tools for agents (docs/mcp.md), with the official Python MCP
SDK as the client: `tandem mcp` on stdio and POST /mcp on the daemon.

The daemon serves the two fixture decision models on a RAM budget that
holds one at a time (so a pipeline rotates them) and the demo pipeline.
Every tool's schema is checked with jsonschema, every structured result
against its outputSchema, and the answers against the same request on the
HTTP API: a tool must do exactly what its route does."""
import json
import os
import re
import signal
import subprocess
import time

import anyio
import httpx2
import jsonschema
import pytest
from mcp import Client, ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

import urllib.request

from conftest import SANITIZER_REPORT, Serve, fixture_path
from test_pipeline import REQUEST

KEY = "mcp-test-key"
DESCRIPTION = "Pick the operator's response to an incident, then check it is consistent."
QUESTIONS = {"fix": {"type": "choice", "instructions": "Which fix?",
                     "criteria": {"restart": "Restart the service.", "wait": "Wait."}},
             "urgent": {"type": "noul", "instructions": "Is it urgent?"}}


def config(mcp_http=True, extra_pipeline=""):
    demo = open(os.path.join(os.path.dirname(__file__), "../../examples/demo.yaml")).read()
    pipelines = re.sub(r"    description: >-\n(      .*\n)+", f"    description: {DESCRIPTION}\n",
                       demo[demo.index("pipelines:"):], count=1)
    # the decision cache off: the tests watch loads, deadlines and cancellations of real
    # work, and they ask the same pipeline again and again
    return f"""api_keys: [{KEY}]
budget:
  ram: 400MiB
cache:
  max_bytes: 0
limits:
  request_timeout: 300s
allowed_origins: [https://agent.example]
mcp:
  http: {'true' if mcp_http else 'false'}
models:
  decider:
    path: {fixture_path('smollm2-decider.gguf')}
    ctx: 2048
  verifier:
    path: {fixture_path('gemma3-decider.gguf')}
    ctx: 2048
{pipelines}{extra_pipeline}"""


@pytest.fixture(scope="module")
def daemon(tandem_bin, tmp_path_factory):
    s = Serve(tandem_bin, tmp_path_factory.mktemp("mcp"), config())
    yield s
    assert s.stop() == 0, s.log()[-3000:]
    assert not SANITIZER_REPORT.search(s.log()), s.log()[-4000:]


def http_raw(method, url, data=None, headers=None, timeout=300):
    """(status, body bytes, headers) of one request; never raises on HTTP errors."""
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def post(s, path, body, headers=None):
    hs = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json", **(headers or {})}
    status, raw, _ = http_raw("POST", s.url + path, json.dumps(body).encode(), headers=hs,
                              timeout=300)
    return status, json.loads(raw) if raw else None


def unload_all(s):
    for m in ("decider", "verifier"):
        post(s, f"/admin/models/{m}/unload", {})


SANITIZER_LOGS = {}


@pytest.fixture(autouse=True)
def sanitizer_logs(tmp_path):
    """Under `make asan`, each `tandem mcp` (and a private daemon it starts)
    writes any sanitizer report to a file here: none may exist afterwards."""
    where = tmp_path / "sanitizer"
    where.mkdir()
    SANITIZER_LOGS["env"] = {
        "ASAN_OPTIONS": f"detect_leaks=1:abort_on_error=0:log_path={where}/asan",
        "UBSAN_OPTIONS": f"print_stacktrace=1:log_path={where}/ubsan"}
    yield
    reports = {f.name: f.read_text()[:3000] for f in where.iterdir()}
    assert not reports, reports


def mcp_env():
    return {"TANDEM_API_KEY": KEY, **SANITIZER_LOGS["env"]}


def stdio_params(tandem_bin, *args):
    return StdioServerParameters(command=str(tandem_bin), args=["mcp", *args], env=mcp_env())


def check_tools(tools):
    by_name = {t.name: t for t in tools}
    assert set(by_name) == {"decide_decide", "systemone", "status", "feedback"}, by_name
    for t in tools:
        jsonschema.Draft202012Validator.check_schema(t.input_schema)
        jsonschema.Draft202012Validator.check_schema(t.output_schema)
        # feedback keeps labels: the one tool that is not read-only (still idempotent)
        assert t.annotations.read_only_hint is (t.name != "feedback"), t.name
        assert t.annotations.destructive_hint is False and t.annotations.idempotent_hint is True
    assert by_name["decide_decide"].description == DESCRIPTION
    assert by_name["systemone"].input_schema["properties"]["model"]["enum"] == ["decider", "verifier"]
    jsonschema.validate(REQUEST, by_name["decide_decide"].input_schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"state": 3, "candidates": {}}, by_name["decide_decide"].input_schema)
    return by_name


async def call_and_check(session, by_name, name, args, progress=None):
    result = await session.call_tool(name, args, progress_callback=progress)
    assert not result.is_error, result.content
    jsonschema.validate(result.structured_content, by_name[name].output_schema)
    return result


async def exercise(session, s):
    """Every tool once, each compared with its route. Returns the progress messages."""
    init = await session.initialize()
    assert init.protocol_version == "2025-11-25"
    assert init.server_info.name == "tandem"
    by_name = check_tools((await session.list_tools()).tools)
    unload_all(s)  # the call below waits for loads: progress must say so
    seen = []

    async def on_progress(progress, total, message):
        seen.append(message)

    r = await call_and_check(session, by_name, "decide_decide", REQUEST, on_progress)
    status, direct = post(s, "/v1/pipelines/decide", REQUEST)
    assert status == 200
    sc = r.structured_content
    assert (sc["verdict"], sc["choice"]) == (direct["verdict"], direct["choice"])
    assert sc["probabilities"] == direct["decide"]["answers"]["choice"]["probabilities"]
    assert len(sc["checks"]) == 2 and {c["question"] for c in sc["checks"]} == {"consistent", "on_topic"}
    assert all(c["threshold"] == ">= 0.5" for c in sc["checks"])
    text = r.content[0].text
    assert re.match(r"^(accepted: \w+ \(0\.\d\d\)|rejected: .+|escalated: .+); verifier consistent "
                    r"\d\.\d\d(, needs)? [≥] 0\.5, on_topic \d\.\d\d(, needs)? [≥] 0\.5$", text), text

    body = {"model": "verifier", "state": REQUEST["state"], "questions": QUESTIONS}
    r = await call_and_check(session, by_name, "systemone", body)
    status, direct = post(s, "/v1/systemone", body)
    assert status == 200 and r.structured_content["answers"] == direct["answers"]
    assert r.content[0].text.startswith("verifier: fix ")

    r = await call_and_check(session, by_name, "status", {})
    assert {m["name"] for m in r.structured_content["models"]} == {"decider", "verifier"}
    assert "waiting (queue depth" in r.content[0].text
    return seen


def test_stdio_tools_match_their_routes_and_report_loading(daemon, tandem_bin):
    async def main():
        async with stdio_client(stdio_params(tandem_bin, "--url", daemon.url)) as (rd, wr):
            async with ClientSession(rd, wr) as session:
                return await exercise(session, daemon)

    seen = anyio.run(main)
    assert seen and seen[0] == "queued" and any(m.startswith("loading ") for m in seen), seen


def test_http_transport_does_the_same_with_progress_on_a_stream(daemon):
    async def main():
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {KEY}"})
        async with client, streamable_http_client(daemon.url + "/mcp", http_client=client) as (rd, wr):
            async with ClientSession(rd, wr) as session:
                return await exercise(session, daemon)

    seen = anyio.run(main)
    assert seen and seen[0] == "queued" and any(m.startswith("loading ") for m in seen), seen


def audit_statuses(s, route):
    lines = s.audit.read_text().splitlines() if s.audit.exists() else []
    return [json.loads(l)["status"] for l in lines if json.loads(l).get("route") == route]


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_cancel_stops_the_call_on_the_daemon(daemon, tandem_bin, transport):
    """Cancelling abandons the pipeline on the daemon (audited 499), and the
    session goes on serving."""
    async def main():
        if transport == "stdio":
            ctx = stdio_client(stdio_params(tandem_bin, "--url", daemon.url))
        else:
            client = create_mcp_http_client(headers={"Authorization": f"Bearer {KEY}"})
            ctx = streamable_http_client(daemon.url + "/mcp", http_client=client)
        async with ctx as (rd, wr):
            async with ClientSession(rd, wr) as session:
                await session.initialize()
                unload_all(daemon)
                loading = anyio.Event()

                async def on_progress(progress, total, message):
                    if message.startswith("loading"):
                        loading.set()

                async with anyio.create_task_group() as tg:
                    async def call():
                        await session.call_tool("decide_decide", REQUEST, progress_callback=on_progress)
                    tg.start_soon(call)
                    with anyio.fail_after(120):
                        await loading.wait()
                    tg.cancel_scope.cancel()
                r = await session.call_tool("status", {})
                assert not r.is_error

    before = audit_statuses(daemon, "pipeline").count(499)
    anyio.run(main)
    deadline = time.time() + 30
    while audit_statuses(daemon, "pipeline").count(499) == before:
        assert time.time() < deadline, audit_statuses(daemon, "pipeline")
        time.sleep(0.1)


SECOND = """  second:
    description: A second pipeline.
    decide:
      model: decider
      instructions: Which one?
    verify:
      - model: verifier
        questions:
          ok:
            type: noul
            instructions: Is "{{candidates[decide.choice]}}" fine?
    verdict:
      thresholds:
        ok: ">= 0"
"""


def test_reload_changes_the_tools_and_sends_list_changed(tandem_bin, serve_factory):
    """The handshake revisions hear of a reload with a plain notification."""
    s = serve_factory(config())

    async def main():
        changed = anyio.Event()

        async def on_message(message):
            if getattr(message, "method", None) == "notifications/tools/list_changed":
                changed.set()

        async with stdio_client(stdio_params(tandem_bin, "--url", s.url)) as (rd, wr):
            async with ClientSession(rd, wr, message_handler=on_message) as session:
                await session.initialize()
                names = {t.name for t in (await session.list_tools()).tools}
                assert "decide_second" not in names
                s.config.write_text(s.config.read_text() + SECOND)
                s.proc.send_signal(signal.SIGHUP)
                with anyio.fail_after(30):
                    await changed.wait()
                tools = {t.name: t for t in (await session.list_tools()).tools}
                assert tools["decide_second"].description == "A second pipeline."

    anyio.run(main)


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_current_revision_by_default_with_listen_for_list_changed(tandem_bin, serve_factory, transport):
    """The SDK's Client probes server/discover and speaks 2026-07-28: the same
    tools and results, progress on the call, and list_changed on a
    subscriptions/listen stream after a reload."""
    s = serve_factory(config())

    async def main():
        if transport == "stdio":
            connect = Client(stdio_params(tandem_bin, "--url", s.url))
        else:
            http = create_mcp_http_client(headers={"Authorization": f"Bearer {KEY}"})
            connect = Client(streamable_http_client(s.url + "/mcp", http_client=http))
        async with connect as c:
            assert c.protocol_version == "2026-07-28"
            assert c.server_info.name == "tandem"
            by_name = check_tools((await c.list_tools(cache_mode="refresh")).tools)
            seen = []

            async def on_progress(progress, total, message):
                seen.append(message)

            r = await c.call_tool("decide_decide", REQUEST, progress_callback=on_progress)
            assert not r.is_error, r.content
            jsonschema.validate(r.structured_content, by_name["decide_decide"].output_schema)
            status, direct = post(s, "/v1/pipelines/decide", REQUEST)
            assert r.structured_content["probabilities"] == direct["decide"]["answers"]["choice"]["probabilities"]
            assert seen[0] == "queued" and any(m.startswith("loading ") for m in seen), seen
            async with c.listen(tools_list_changed=True) as sub:
                assert sub.honored.tools_list_changed
                s.config.write_text(s.config.read_text() + SECOND)
                s.proc.send_signal(signal.SIGHUP)
                with anyio.fail_after(30):
                    async for event in sub:
                        break
            tools = {t.name for t in (await c.list_tools(cache_mode="refresh")).tools}
            assert "decide_second" in tools

    anyio.run(main)


# --- bad input ----------------------------------------------------------------------------------

class RawStdio:
    """`tandem mcp` driven line by line, without an SDK."""

    def __init__(self, tandem_bin, url):
        self.proc = subprocess.Popen([str(tandem_bin), "mcp", "--url", url], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env={**os.environ, **mcp_env()})

    def send(self, data):
        self.proc.stdin.write(data if isinstance(data, bytes) else data.encode())
        self.proc.stdin.write(b"\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def request(self, id, method, params=None):
        msg = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            msg["params"] = params
        return self.send(json.dumps(msg))

    def close(self):
        self.proc.stdin.close()
        assert self.proc.wait(30) == 0
        return self.proc.stderr.read().decode()


def test_stdio_bad_input_gets_an_error_each_and_serving_goes_on(daemon, tandem_bin):
    io = RawStdio(tandem_bin, daemon.url)
    init = io.request(1, "initialize", {"protocolVersion": "2024-11-05", "capabilities": {},
                                        "clientInfo": {"name": "raw", "version": "0"}})
    assert init["result"]["protocolVersion"] == "2024-11-05"
    r = io.send("this is not json")
    assert r["id"] is None and r["error"]["code"] == -32700
    r = io.send(b'{"jsonrpc":"2.0","id":2,"method":"ping","params":{"x":"' + b"a" * (10 << 20) + b'"}}')
    assert r["id"] is None and r["error"]["code"] == -32600 and "MiB" in r["error"]["message"]
    r = io.send("[" * 200000)
    assert r["error"]["code"] == -32700
    r = io.send(json.dumps([{"jsonrpc": "2.0", "id": 3, "method": "ping"}]))
    assert r["error"]["code"] == -32600
    r = io.request(4, "resources/list")
    assert r["id"] == 4 and r["error"]["code"] == -32601 and "resources/list" in r["error"]["message"]
    r = io.request(5, "tools/call", {"name": "launch_missiles", "arguments": {}})
    assert r["id"] == 5 and r["error"]["code"] == -32602 and "launch_missiles" in r["error"]["message"]
    r = io.request(6, "tools/call", {"name": "decide_decide",
                                     "arguments": {"state": "x", "candidates": "not an object"}})
    assert r["result"]["isError"] is True
    assert r["result"]["content"][0]["text"].startswith('bad argument "candidates": '), r
    r = io.request(7, "tools/call", {"name": "systemone",
                                     "arguments": {"model": "nope", "state": "x", "questions": QUESTIONS}})
    assert r["result"]["isError"] is True and "nope" in r["result"]["content"][0]["text"], r
    r = io.request(8, "tools/call", {"name": "status", "arguments": {"timeout_ms": "soon"}})
    assert r["result"]["isError"] is True and "timeout_ms" in r["result"]["content"][0]["text"]
    r = io.request(9, "tools/call", {"name": "status", "arguments": {"verbose": True}})
    assert r["result"]["content"][0]["text"] == 'unknown argument "verbose": status takes timeout_ms'
    assert io.request(10, "ping") == {"jsonrpc": "2.0", "id": 10, "result": {}}
    stderr = io.close()
    assert "serving MCP on stdio" in stderr


def test_stdio_deadline_and_unreachable_daemon_are_tool_errors(daemon, tandem_bin):
    io = RawStdio(tandem_bin, daemon.url)
    unload_all(daemon)
    r = io.request(1, "tools/call", {"name": "decide_decide", "arguments": {**REQUEST, "timeout_ms": 1}})
    assert r["result"]["isError"] is True
    assert r["result"]["content"][0]["text"].startswith("the deadline passed: "), r
    io.close()
    io = RawStdio(tandem_bin, "http://127.0.0.1:9")
    r = io.request(1, "tools/call", {"name": "status", "arguments": {}})
    assert r["result"]["content"][0]["text"].startswith("tandem did not answer: ")
    assert "no daemon answers at http://127.0.0.1:9" in io.close()


def test_a_full_queue_is_a_tool_error_with_the_wait(tandem_bin, serve_factory):
    """limits.queue_depth: 1 and four pipeline calls at once while the models
    load: the ones refused say so, with the route's Retry-After."""
    s = serve_factory(config().replace("limits:\n", "limits:\n  queue_depth: 1\n"))
    io = RawStdio(tandem_bin, s.url)
    for i in range(4):
        msg = {"jsonrpc": "2.0", "id": i, "method": "tools/call",
               "params": {"name": "decide_decide", "arguments": REQUEST}}
        io.proc.stdin.write(json.dumps(msg).encode() + b"\n")
    io.proc.stdin.flush()
    texts = [json.loads(io.proc.stdout.readline())["result"]["content"][0]["text"] for _ in range(4)]
    full = [t for t in texts if t.startswith("the queue is full: ")]
    assert full and all(re.search(r"; retry in \d+ s$", t) for t in full), texts
    assert len(full) < 4, texts
    io.close()


def test_http_key_origin_and_switch(daemon, serve_factory):
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    body = json.dumps(ping).encode()
    assert http_raw("POST", daemon.url + "/mcp", body, headers=headers)[0] == 401
    wrong = {**headers, "Authorization": "Bearer wrong"}
    assert http_raw("POST", daemon.url + "/mcp", body, headers=wrong)[0] == 401
    ok = {**headers, "Authorization": f"Bearer {KEY}", "Mcp-Session-Id": initialize(daemon)}
    # another page, even on this machine (another port), is not the daemon's own origin
    for origin in ("http://evil.example", "http://localhost:3000", "http://127.0.0.1:3000"):
        status, raw, hs = http_raw("POST", daemon.url + "/mcp", body, headers={**ok, "Origin": origin})
        assert status == 403 and "allowed_origins" in json.loads(raw)["error"]["message"], raw
        assert "Access-Control-Allow-Origin" not in hs
    for origin in (daemon.url, "https://agent.example"):
        status, raw, hs = http_raw("POST", daemon.url + "/mcp", body, headers={**ok, "Origin": origin})
        assert status == 200 and json.loads(raw) == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert hs["Access-Control-Allow-Origin"] == "https://agent.example"
    # the preflight a browser on the allowed origin sends first
    status, _, hs = http_raw("OPTIONS", daemon.url + "/mcp", headers={
        "Origin": "https://agent.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type, mcp-protocol-version"})
    assert status == 204 and hs["Access-Control-Allow-Origin"] == "https://agent.example"
    assert hs["Access-Control-Allow-Methods"] == "POST, DELETE"
    assert hs["Access-Control-Allow-Headers"] == "authorization, content-type, mcp-protocol-version"
    status, raw, _ = http_raw("POST", daemon.url + "/mcp", body, headers={**ok, "MCP-Protocol-Version": "1999-01-01"})
    assert status == 400
    note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
    assert http_raw("POST", daemon.url + "/mcp", note, headers=ok)[0] == 202
    assert http_raw("GET", daemon.url + "/mcp", headers=ok)[0] == 405
    off = serve_factory(config(mcp_http=False))
    status, raw, _ = http_raw("POST", off.url + "/mcp", body, headers=ok)
    assert status == 404 and "mcp.http" in json.loads(raw)["error"]["message"]


# --- sessions (the handshake revisions) ------------------------------------------------------------

def rpc(s, msg, session=None, key=KEY, extra=None):
    """(status, parsed body or None, headers) of one raw POST /mcp."""
    hs = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
          "Authorization": f"Bearer {key}", **(extra or {})}
    if session is not None:
        hs["Mcp-Session-Id"] = session
    status, raw, headers = http_raw("POST", s.url + "/mcp", json.dumps(msg).encode(), headers=hs)
    return status, json.loads(raw) if raw else None, headers


def initialize(s, key=KEY):
    status, body, headers = rpc(s, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}}, key=key)
    assert status == 200 and body["result"]["protocolVersion"] == "2025-11-25", body
    return headers["Mcp-Session-Id"]


def test_a_session_is_required_after_initialize_and_delete_ends_it(daemon):
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    status, body, _ = rpc(daemon, listing)
    assert status == 400 and "Mcp-Session-Id is required" in body["error"]["message"], body
    status, body, _ = rpc(daemon, listing, session="0" * 32)
    assert status == 404 and "initialize again" in body["error"]["message"], body
    a, b = initialize(daemon), initialize(daemon)
    assert a != b and re.fullmatch(r"[0-9a-f]{32}", a)
    for session in (a, b):
        status, body, _ = rpc(daemon, listing, session=session)
        assert status == 200 and len(body["result"]["tools"]) == 4
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert rpc(daemon, note)[0] == 400 and rpc(daemon, note, session=a)[0] == 202
    end = lambda session: http_raw("DELETE", daemon.url + "/mcp", headers={
        "Authorization": f"Bearer {KEY}", **({"Mcp-Session-Id": session} if session else {})})[0]
    assert end(a) == 204 and end(a) == 404 and end(None) == 400
    assert rpc(daemon, listing, session=a)[0] == 404
    assert rpc(daemon, listing, session=b)[0] == 200
    # the stateless current revision needs none
    modern = {"jsonrpc": "2.0", "id": 2, "method": "server/discover", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}}}
    assert rpc(daemon, modern, extra={"MCP-Protocol-Version": "2026-07-28",
                                      "Mcp-Method": "server/discover"})[0] == 200


def test_another_session_cannot_cancel_a_call(daemon):
    """A (the SDK, its own session) runs a pipeline; while it loads, B sends
    notifications/cancelled for every id A may have used, from its own
    session, from none and from a made-up one: A's call still answers, and
    the pipeline is audited 200, not 499."""
    cancels = []

    async def main():
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {KEY}"})
        async with client, streamable_http_client(daemon.url + "/mcp", http_client=client) as (rd, wr):
            async with ClientSession(rd, wr) as session:
                await session.initialize()
                unload_all(daemon)
                loading = anyio.Event()

                async def on_progress(progress, total, message):
                    if message.startswith("loading"):
                        loading.set()

                def send_cancels():
                    b = initialize(daemon)
                    for rid in list(range(0, 16)) + [str(i) for i in range(0, 16)]:
                        note = {"jsonrpc": "2.0", "method": "notifications/cancelled",
                                "params": {"requestId": rid, "reason": "B says so"}}
                        cancels.extend([rpc(daemon, note, session=b)[0], rpc(daemon, note)[0],
                                        rpc(daemon, note, session="f" * 32)[0]])

                async def attack():
                    with anyio.fail_after(120):
                        await loading.wait()
                    await anyio.to_thread.run_sync(send_cancels)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(attack)
                    return await session.call_tool("decide_decide", REQUEST,
                                                   progress_callback=on_progress)

    before = audit_statuses(daemon, "pipeline")
    r = anyio.run(main)
    assert r is not None and not r.is_error, r
    assert set(cancels) == {202, 400, 404}, cancels
    after = audit_statuses(daemon, "pipeline")[len(before):]
    assert after == [200], after


def test_private_daemon_with_config_when_none_listens(tandem_bin, tmp_path):
    from conftest import free_port
    cfg = tmp_path / "tandem.yaml"
    cfg.write_text(f"listen: 127.0.0.1:{free_port()}\nlogs:\n  dir: {tmp_path / 'logs'}\n" + config())

    async def main():
        async with stdio_client(stdio_params(tandem_bin, "--config", str(cfg))) as (rd, wr):
            async with ClientSession(rd, wr) as session:
                await session.initialize()
                tools = {t.name for t in (await session.list_tools()).tools}
                assert tools == {"decide_decide", "systemone", "status", "feedback"}
                r = await session.call_tool("status", {})
                return [m["state"] for m in r.structured_content["models"]]

    assert anyio.run(main) == ["unloaded", "unloaded"]
    out = subprocess.run(["pgrep", "-f", f"serve --config {cfg}"], capture_output=True, text=True)
    assert out.stdout == "", "the private daemon outlived tandem mcp"


def test_usage_errors_exit_2_and_help_names_every_option(tandem_bin, tmp_path):
    run = lambda *a: subprocess.run([str(tandem_bin), "mcp", *a], capture_output=True, text=True,
                                    stdin=subprocess.DEVNULL, timeout=30)
    out = run("--help")
    assert out.returncode == 0 and all(o in out.stdout for o in ("--url", "--config", "--verbose",
                                                                  "TANDEM_API_KEY"))
    assert out.stderr == ""
    out = run("--config", str(tmp_path / "none.yaml"))
    assert out.returncode == 2 and "none.yaml" in out.stderr and out.stdout == ""
    out = run("extra")
    assert out.returncode == 2 and "unexpected argument 'extra'" in out.stderr


def test_a_listen_stream_ends_with_its_result_when_the_daemon_stops(serve_factory):
    import http.client
    s = serve_factory(config())
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}
    body = json.dumps({"jsonrpc": "2.0", "id": "listen-1", "method": "subscriptions/listen",
                       "params": {"notifications": {"toolsListChanged": True}, "_meta": meta}})
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
    conn.request("POST", "/mcp", body, {
        "Authorization": f"Bearer {KEY}", "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "subscriptions/listen"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type") == "text/event-stream"
    frames = []
    s.proc.send_signal(signal.SIGTERM)
    for line in resp.read().decode().splitlines():
        if line.startswith("data: "):
            frames.append(json.loads(line[6:]))
    assert frames[0]["method"] == "notifications/subscriptions/acknowledged"
    assert frames[0]["params"]["notifications"] == {"toolsListChanged": True}
    last = frames[-1]
    assert last["id"] == "listen-1" and last["result"]["resultType"] == "complete"
    assert last["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-1"
    assert s.proc.wait(60) == 0
