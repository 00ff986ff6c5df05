#!/usr/bin/env python3
"""Writes the fuzz targets' seeds into DIR/<target>/ (deterministic).

gguf: tiny valid files from the Python gguf package's writer covering every
value type, string arrays and several tensor types; the header of each real
test model and engine vocab file, cut to --max-len bytes; and the malformed
regression files from tests/data/gguf.
config: tests/data/config/*.yaml and examples/*.yaml.
s1: the bodies of tests/data/s1/cases.jsonl.
tmpl: the texts of tests/data/tmpl/compile.jsonl.
http: raw HTTP/1.1 requests, valid and invalid (the head check's refusals
among them), for every route of
tests/fuzz/fuzz_http.c's daemon (its models decider, verifier and writer,
pipeline decide, key fuzz-key), and every s1 body as a POST /v1/systemone.
head: the http seeds, and heads at the edges of tests/fuzz/fuzz_head.c's
parser (bare LF lines, folded lines, control bytes, odd request lines).
mcp: MCP messages for tests/fuzz/fuzz_mcp.c's session (pipeline decide,
decision models decider and verifier): the handshake at each revision,
tools/list, tools/call of each tool (each with the route's answer as more
members of the same message, which the target also reads as the answer),
cancellation, the current revision's requests in their envelope
(server/discover, subscriptions/listen), conversations of one message a line,
and the errors (a batch, garbage, bad ids, text cut inside a character).
The checked-in, minimised corpora are tests/fuzz/corpus/<target>/ (make
fuzz-merge); these seeds only start a campaign.
Usage: make_seeds.py DIR [--max-len N]
"""
import argparse
import json
import shutil
import sys
from pathlib import Path

import gguf
import numpy as np
from backports import zstd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from conftest import ENGINE, MODELS  # noqa: E402


def tiny(path, alignment=None, tensors=True):
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_uint8("t.u8", 7)
    w.add_int8("t.i8", -7)
    w.add_uint16("t.u16", 700)
    w.add_int16("t.i16", -700)
    w.add_uint32("t.u32", 70000)
    w.add_int32("t.i32", -70000)
    w.add_uint64("t.u64", 1 << 40)
    w.add_int64("t.i64", -(1 << 40))
    w.add_float32("t.f32", 2.35)
    w.add_float64("t.f64", 1e-9)
    w.add_bool("t.bool", True)
    w.add_string("general.name", "seed")
    w.add_array("t.strs", ["A", "B", "<|box_end|>"])
    w.add_array("t.ints", [1, 2, 3])
    w.add_array("t.floats", [0.5, 1.5])
    w.add_block_count(2)
    w.add_head_count(4)
    if tensors:
        w.add_tensor("blk.0.attn_q.weight", np.ones((4, 32), dtype=np.float32))
        w.add_tensor("token_embd.weight", np.zeros((2, 64), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gguf_seeds(out, max_len):
    tiny(out / "tiny.gguf")
    tiny(out / "tiny-align64.gguf", alignment=64)
    tiny(out / "tiny-notensors.gguf", tensors=False)
    real = sorted(MODELS.glob("*.gguf")) + sorted((ENGINE.parent.parent / "src" / "models").glob("*.gguf"))
    for path in real:
        with open(path, "rb") as f:
            (out / f"head-{path.name}").write_bytes(f.read(max_len))
    for path in sorted((ROOT / "tests" / "data" / "gguf").glob("*.gguf")):
        shutil.copy(path, out / f"bad-{path.name}")


def config_seeds(out):
    for path in sorted((ROOT / "tests" / "data" / "config").glob("*.yaml")) + sorted(
            (ROOT / "examples").glob("*.yaml")):
        shutil.copy(path, out / f"{path.parent.name}-{path.name}")


def s1_bodies():
    with open(ROOT / "tests" / "data" / "s1" / "cases.jsonl", encoding="utf-8") as f:
        return [(json.loads(line)["name"], json.loads(line)["body"]) for line in f if line.strip()]


def s1_seeds(out):
    for i, (_, body) in enumerate(s1_bodies()):
        (out / f"{i:03d}.json").write_text(json.dumps(body, ensure_ascii=False), encoding="utf-8")


def tmpl_seeds(out):
    with open(ROOT / "tests" / "data" / "tmpl" / "compile.jsonl", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    for i, text in enumerate(texts):
        (out / f"{i:03d}.txt").write_text(text, encoding="utf-8")


AUTH = {"Authorization": "Bearer fuzz-key"}


NO_BODY = object()


def request(method, target, body=NO_BODY, headers=None, auth=True, eol="\r\n", host="127.0.0.1",
            content_type="application/json"):
    """One raw request: request line, Host (none when host is None), headers
    (Content-Type and Content-Length for a body), and the body: bytes as they
    are, anything else as JSON."""
    h = dict(AUTH) if auth else {}
    h.update(headers or {})
    if body is NO_BODY:
        body = b""
    else:
        body = body if isinstance(body, bytes) else json.dumps(body, ensure_ascii=False).encode()
        if content_type:
            h.setdefault("Content-Type", content_type)
        h["Content-Length"] = str(len(body))
    head = f"{method} {target} HTTP/1.1{eol}" + (f"Host: {host}{eol}" if host else "")
    head += "".join(f"{k}: {v}{eol}" for k, v in h.items()) + eol
    return head.encode() + body


CHOICE = {"model": "decider", "state": {"ticket": "charged twice"},
          "questions": {"route": {"type": "choice", "instructions": "Pick a team.",
                                  "criteria": {"billing": "money", "tech": None}}}}
SCORE = {"state": "a ticket", "questions": {"urgency": {"type": "score", "instructions": "How urgent?",
                                                        "criteria": ["later", "today", "now"]}}}
NOUL = {"model": "jev-latest", "state": ["a", "b"],
        "questions": {"ok": {"type": "noul", "instructions": "Fine?", "criteria": {"true": "yes"}}}}
PIPELINE = {"state": "The build server is swapping.",
            "candidates": {"reduce": "Fewer jobs.", "stop": "Stop the docs builds."}}
AS_SYSTEMONE = {"model": "pipelines/decide", "state": "The build server is swapping.",
                "questions": {"act": {"type": "choice", "instructions": "What now?",
                                      "criteria": {"reduce": "Fewer jobs.", "stop": "Stop the docs."}}}}
CHAT = {"model": "writer", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def head_check_seeds():
    """The head check's refusals and admissions (api_check_head): Host, Origin,
    Content-Type, a NUL in the path, preflights. The target's config allows
    the host tandem.example and the origin https://app.example."""
    evil = {"Origin": "http://evil.example"}
    form = "text/plain"
    return {
        "host-rebind-403": request("GET", "/v1/status", host="rebind.evil.example"),
        "host-rebind-health-403": request("GET", "/health", auth=False, host="rebind.evil.example:8090"),
        "host-missing-400": request("GET", "/v1/status", host=None),
        "host-twice-400": request("GET", "/v1/status", headers={"Host": "localhost"}),
        "host-malformed-400": request("GET", "/v1/status", host="[::1"),
        "host-bad-port-400": request("GET", "/v1/status", host="localhost:99999"),
        "host-allowed": request("GET", "/v1/status", host="Tandem.Example:8090"),
        "host-ipv6": request("GET", "/v1/status", host="[::1]:8090"),
        "host-ip-literal": request("GET", "/v1/status", host="10.0.0.5"),
        "origin-evil-403": request("POST", "/v1/systemone", CHOICE, evil),
        "origin-evil-form-403": request("POST", "/admin/models/decider/load", b"a=b", evil,
                                        auth=False, content_type=form),
        "origin-own": request("POST", "/v1/systemone", CHOICE, {"Origin": "http://127.0.0.1"}),
        "origin-own-port": request("GET", "/v1/status", headers={"Origin": "http://localhost:8090"},
                                   host="localhost:8090"),
        "origin-other-port-403": request("GET", "/v1/status", headers={"Origin": "http://127.0.0.1:3000"}),
        "origin-null-403": request("GET", "/v1/status", headers={"Origin": "null"}),
        "origin-allowed-cors": request("POST", "/v1/systemone", CHOICE, {"Origin": "https://app.example"}),
        "origin-allowed-401": request("GET", "/v1/models", headers={"Origin": "https://app.example"},
                                      auth=False),
        "ct-text-plain-415": request("POST", "/v1/systemone", json.dumps(CHOICE).encode(),
                                     content_type=form),
        "ct-form-empty-415": request("POST", "/admin/models/decider/load", b"", content_type=form),
        "ct-urlencoded-415": request("POST", "/v1/pipelines/decide", b"state=x",
                                     content_type="application/x-www-form-urlencoded"),
        "ct-multipart-415": request("POST", "/mcp", b"--x\r\n\r\n--x--",
                                    content_type="multipart/form-data; boundary=x"),
        "ct-missing-415": request("POST", "/v1/systemone", CHOICE, content_type=None),
        "ct-json-charset": request("POST", "/v1/systemone", CHOICE,
                                   content_type="Application/JSON; charset=utf-8"),
        "ct-jsonp-415": request("POST", "/v1/systemone", CHOICE, content_type="application/jsonp"),
        "nul-path-400": request("POST", "/v1/chat/completions%00/props", CHAT),
        "nul-admin-400": request("POST", "/admin/models/decider%00/load"),
        "nul-query-ok": request("GET", "/v1/status?x=%00"),
        "chat-query": request("POST", "/v1/chat/completions?a=b%20c&d", CHAT),
        "options-preflight": request("OPTIONS", "/v1/systemone", auth=False, headers={
            "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"}),
        "options-own": request("OPTIONS", "/v1/status", auth=False),
        "options-evil-403": request("OPTIONS", "/mcp", auth=False, headers=evil),
        "options-unknown-404": request("OPTIONS", "/v2/nothing"),
    }


def http_seeds(out):
    big = dict(CHOICE, state="x" * 9000)
    seeds = {
        "health": request("GET", "/health", auth=False),
        "livez-head": request("HEAD", "/livez", auth=False),
        "models": request("GET", "/v1/models"),
        "models-head": request("HEAD", "/v1/models"),
        "status": request("GET", "/v1/status"),
        "pipelines": request("GET", "/v1/pipelines"),
        "metrics": request("GET", "/metrics", auth=False),
        "openapi": request("GET", "/openapi.yaml", auth=False),
        "s1-choice": request("POST", "/v1/systemone", CHOICE),
        "s1-score-default": request("POST", "/v1/systemone", SCORE),
        "s1-noul-jev-latest": request("POST", "/v1/systemone", NOUL),
        "s1-alias": request("POST", "/v1/systemone", dict(CHOICE, model="smollm2-decider")),
        "s1-generative-501": request("POST", "/v1/systemone", dict(CHOICE, model="writer")),
        "s1-unknown-model": request("POST", "/v1/systemone", dict(CHOICE, model="nope")),
        "s1-model-not-string": request("POST", "/v1/systemone", dict(CHOICE, model=5)),
        "s1-bad-json": request("POST", "/v1/systemone", b'{"state": "x", "questions": {'),
        "s1-duplicate-key": request("POST", "/v1/systemone", b'{"state": "a", "state": "b"}'),
        "s1-not-object": request("POST", "/v1/systemone", b"[1, 2]"),
        "s1-no-questions": request("POST", "/v1/systemone", {"state": "x"}),
        "s1-53-options": request("POST", "/v1/systemone", dict(CHOICE, questions={"q": {
            "type": "choice", "instructions": "i", "criteria": {f"o{i}": None for i in range(53)}}})),
        "s1-request-id": request("POST", "/v1/systemone", CHOICE, {"x-request-id": "abc-123"}),
        "s1-typesafe-id": request("POST", "/v1/systemone", CHOICE, {"x-typesafe-request-id": "t-9"}),
        "s1-timeout": request("POST", "/v1/systemone", CHOICE, {"X-Tandem-Timeout-Ms": "2500"}),
        "s1-bad-timeout": request("POST", "/v1/systemone", CHOICE, {"X-Tandem-Timeout-Ms": "0"}),
        "s1-envoy-timeout": request("POST", "/v1/systemone", CHOICE,
                                    {"x-envoy-expected-rq-timeout-ms": "15000"}),
        "s1-zstd": request("POST", "/v1/systemone", zstd.compress(json.dumps(CHOICE).encode()),
                           {"Content-Encoding": "zstd"}),
        "s1-zstd-corrupt": request("POST", "/v1/systemone", b"\x28\xb5\x2f\xfd\x00\x58garbage",
                                   {"Content-Encoding": "zstd"}),
        "s1-zstd-bomb": request("POST", "/v1/systemone", zstd.compress(b" " * 100000),
                                {"Content-Encoding": "zstd"}),
        "s1-gzip-415": request("POST", "/v1/systemone", CHOICE, {"Content-Encoding": "gzip"}),
        "s1-too-big-413": request("POST", "/v1/systemone", big),
        "s1-pipeline": request("POST", "/v1/systemone", AS_SYSTEMONE),
        "s1-pipeline-unknown": request("POST", "/v1/systemone", dict(AS_SYSTEMONE, model="pipelines/nope")),
        "s1-pipeline-two-questions": request("POST", "/v1/systemone", dict(AS_SYSTEMONE, questions=dict(
            AS_SYSTEMONE["questions"], more=AS_SYSTEMONE["questions"]["act"]))),
        "pipeline": request("POST", "/v1/pipelines/decide", PIPELINE),
        "pipeline-unknown": request("POST", "/v1/pipelines/nope", PIPELINE),
        "pipeline-bad": request("POST", "/v1/pipelines/decide", {"state": "x", "candidates": {"a": "b"}}),
        "pipeline-extra": request("POST", "/v1/pipelines/decide", dict(PIPELINE, max_attempts=1, x=1)),
        "chat": request("POST", "/v1/chat/completions", CHAT),
        "chat-stream": request("POST", "/v1/chat/completions", dict(CHAT, stream=True)),
        "completions": request("POST", "/v1/completions", {"model": "writer", "prompt": "hi"}),
        "embeddings": request("POST", "/v1/embeddings", {"model": "verifier", "input": "hi"}),
        "admin-load": request("POST", "/admin/models/decider/load"),
        "admin-unload": request("POST", "/admin/models/smollm2-decider/unload"),
        "admin-unknown": request("POST", "/admin/models/nope/load"),
        "admin-slash": request("POST", "/admin/models/a/b/unload"),
        "405-get-systemone": request("GET", "/v1/systemone"),
        "405-delete-health": request("DELETE", "/health", auth=False),
        "404": request("GET", "/v2/nothing"),
        "401-no-key": request("POST", "/v1/systemone", CHOICE, auth=False),
        "401-wrong-key": request("GET", "/v1/models", headers={"Authorization": "Bearer nope"}),
        "bearer-lowercase": request("GET", "/v1/status", headers={"Authorization": "bearer fuzz-key"}),
        "absolute-uri": request("GET", "http://127.0.0.1:8090/v1/models"),
        "percent-path": request("GET", "/v1/%6dodels?x=1&y=%zz"),
        "lf-only": request("POST", "/v1/systemone", CHOICE, eol="\n"),
        "put-body": request("PUT", "/v1/systemone", CHOICE),
        "http10": request("GET", "/health", auth=False).replace(b"HTTP/1.1", b"HTTP/1.0", 1),
        "folded-header": b"GET /v1/models HTTP/1.1\r\nAuthorization: Bearer\r\n fuzz-key\r\n"
                         b"x-request-id: a\r\n\tb\r\n\r\n",
    }
    seeds.update(head_check_seeds())
    for name, raw in seeds.items():
        (out / f"{name}.http").write_bytes(raw)
    for name, body in s1_bodies():
        (out / f"s1-case-{name}.http").write_bytes(request("POST", "/v1/systemone", body))


def rpc(method=None, params=None, id=1, **extra):
    """One JSON-RPC 2.0 message: a request (id), a notification (id=None)."""
    msg = {"jsonrpc": "2.0"}
    if id is not None:
        msg["id"] = id
    if method is not None:
        msg["method"] = method
    if params is not None:
        msg["params"] = params
    msg.update(extra)
    return msg


def tool_call(name, arguments, id=1, **answer):
    return rpc("tools/call", {"name": name, "arguments": arguments}, id, **answer)


def modern(method, params=None, id=1, version="2026-07-28", **extra):
    """A request of the current revision: its envelope in params._meta."""
    params = dict(params or {})
    params["_meta"] = dict(params.get("_meta", {}), **{
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": {}})
    return rpc(method, params, id, **extra)


# docs/pipelines.md's answer, and the members of GET /v1/status and of a
# System One answer (docs/serve.md), riding along in the call's message.
PIPELINE_ANSWER = {
    "pipeline": "decide", "request_id": "req_1", "verdict": "accepted", "choice": "stop",
    "reason": "stop passed every threshold (attempt 1)",
    "decide": {"model": "decider", "answers": {"choice": {
        "type": "choice", "choice": "stop",
        "probabilities": {"reduce": 0.3264938593177823, "stop": 0.37902133899104984,
                          "nothing": 0.2944848016911678},
        "confidence": 0.06853200848657477}}},
    "attempts": [{"attempt": 1, "candidate": "stop", "passed": True, "verify": [
        {"stage": 0, "model": "verifier", "passed": True, "questions": {
            "consistent": {"answer": {"type": "noul", "noul": 0.9400501158817478},
                           "threshold": ">= 0.5", "passed": True},
            "tone": {"answer": {"type": "choice", "choice": "calm",
                                "probabilities": {"calm": 0.8, "angry": 0.2}},
                     "threshold": None, "passed": None},
            "urgency": {"answer": {"type": "score", "score": 1.5},
                        "threshold": "<= 2", "passed": False}}}]}],
    "timing": {"total_ms": 2101, "queued_ms": 10, "loading_ms": 880, "running_ms": 1211}}
REJECTED_ANSWER = dict(PIPELINE_ANSWER, verdict="rejected", choice=None,
                       reason="urgency failed (attempt 1)")
STATUS_ANSWER = {
    "budget": {"gpu_bytes": 838860800, "host_bytes": 4294967296,
               "devices": [{"device": "gpu:0", "budget_bytes": 838860800, "used_bytes": 614252544}]},
    "queue": {"waiting": 1, "depth": 64},
    "models": [{"name": "decider", "state": "loading", "device": "gpu:0", "running": 0, "queued": 1,
                "progress": {"phase": "reading weights", "fraction": 0.4, "elapsed_ms": 90}},
               {"name": "verifier", "state": "resident", "device": "cpu", "running": 2, "queued": 0},
               {"name": "writer", "state": "unloaded", "running": 0, "queued": 0, "progress": None}]}
S1_ANSWER = {"model": "decider", "answers": {
    "route": {"type": "choice", "choice": "billing", "probabilities": {"billing": 0.9, "tech": 0.1}},
    "angry": {"type": "noul", "noul": 0.82}, "urgency": {"type": "score", "score": 2.28}},
    "usage": {"input_tokens": 12}}
ROUTE_ERROR = {"error": {"message": "candidates needs at least 2 options", "param": "candidates"}}


def mcp_seeds(out):
    init = {"protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "fuzz", "version": "1"}}
    seeds = {
        "initialize-unknown-version": rpc("initialize", dict(init, protocolVersion="1999-01-01")),
        "initialize-no-version": rpc("initialize", {"capabilities": {}}),
        "initialized": rpc("notifications/initialized", id=None),
        "ping": rpc("ping", id="p-1"),
        "tools-list": rpc("tools/list", {}, id=3),
        "server-discover": rpc("server/discover", {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
        "unknown-method": rpc("resources/list", {}),
        "params-array": rpc("ping", [1]),
        "response": rpc(id=5, result={}),
        "jsonrpc-1": dict(rpc("ping"), jsonrpc="1.0"),
        "id-float": rpc("ping", id=1.5),
        "id-object": rpc("ping", id={"a": 1}),
        "cancelled": rpc("notifications/cancelled", {"requestId": 7, "reason": "user"}, id=None),
        "cancelled-string": rpc("notifications/cancelled", {"requestId": "r-2"}, id=None),
        "call-decide": tool_call("decide_decide", {
            "state": "The build server is swapping.",
            "candidates": {"reduce": "Fewer jobs.", "stop": "Stop the docs builds.", "nothing": None},
            "instructions": "Pick one.", "max_attempts": 2, "min_confidence": 0.1,
            "timeout_ms": 5000, "_extra": 1}, **PIPELINE_ANSWER),
        "call-decide-progress": rpc("tools/call", {
            "name": "decide_decide", "_meta": {"progressToken": "tok-1"},
            "arguments": {"state": "s", "candidates": {"a": "b", "c": None}}}, **STATUS_ANSWER),
        "call-systemone-progress": rpc("tools/call", {
            "name": "systemone", "_meta": {"progressToken": 17},
            "arguments": {"model": "verifier", "state": "s", "questions": {}}}, **STATUS_ANSWER),
        "call-decide-rejected": tool_call("decide_decide", {"state": {"load": [1, 2]}}, **REJECTED_ANSWER),
        "call-decide-400": tool_call("decide_decide", {"state": "x", "candidates": {"a": "b"}},
                                     **ROUTE_ERROR),
        "call-systemone": tool_call("systemone", {
            "model": "decider", "state": "charged twice", "questions": {
                "route": {"type": "choice", "instructions": "Pick a team.",
                          "criteria": {"billing": "money", "tech": None}}}}, **S1_ANSWER),
        "call-status": tool_call("status", {}, **STATUS_ANSWER),
        "call-bad-timeout": tool_call("decide_decide", {"state": "s", "timeout_ms": "soon"}),
        "call-zero-timeout": tool_call("systemone", {"state": "s", "timeout_ms": 0}),
        "call-unknown-tool": tool_call("decide_nope", {}),
        "call-arguments-array": tool_call("status", []),
    }
    for version in ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"):
        seeds[f"initialize-{version}"] = rpc("initialize", dict(init, protocolVersion=version))
    # Quoted text cut inside a character: an error message's buffer (512
    # bytes), a body quoted to 200 bytes (the 400 answer of this very call).
    seeds["unknown-tool-multibyte"] = tool_call("\u00e9" * 300, {})
    seeds["unknown-method-multibyte"] = rpc("\u00e9" * 300)
    head = json.dumps(tool_call("status", {}))[:-1] + ', "x": "'
    seeds["call-status-cut-character"] = json.loads(
        head + "a" * (199 - len(head.encode())) + "\u00e9" * 20 + '"}')
    # The current revision (2026-07-28): every request in its envelope.
    seeds.update({
        "modern-discover": modern("server/discover"),
        "modern-tools-list": modern("tools/list", id="l"),
        "modern-listen": modern("subscriptions/listen", {"notifications": {"toolsListChanged": True}},
                                id="sub-1"),
        "modern-ping": modern("ping"),
        "modern-old-version": modern("tools/list", version="2025-06-18"),
        "modern-no-capabilities": rpc("tools/list", {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
        "modern-call-decide": modern("tools/call", {
            "name": "decide_decide", "_meta": {"progressToken": "tok-2"},
            "arguments": {"state": "s", "candidates": {"a": "b", "c": "d"}}}, **PIPELINE_ANSWER),
        "modern-call-status": modern("tools/call", {"name": "status"}, **STATUS_ANSWER),
    })
    for name, msg in seeds.items():
        (out / f"{name}.json").write_text(json.dumps(msg, ensure_ascii=False), encoding="utf-8")
    # Conversations, one message a line (stdio): the handshake, then tools;
    # the current revision, then a handshake it refuses; the reverse.
    conversations = {
        "lines-handshake": [rpc("initialize", init, id=0), rpc("notifications/initialized", id=None),
                            rpc("tools/list", id=1), tool_call("status", {}, id=2, **STATUS_ANSWER),
                            rpc("notifications/cancelled", {"requestId": 2}, id=None),
                            tool_call("decide_decide", {"state": "s"}, id=3, **PIPELINE_ANSWER)],
        "lines-modern-then-initialize": [modern("server/discover", id=0), modern("tools/list", id=1),
                                         modern("subscriptions/listen", id="sub"),
                                         rpc("tools/list", id=2), rpc("initialize", init, id=3)],
        "lines-initialize-then-modern": [rpc("initialize", dict(init, protocolVersion="2025-03-26"), id=0),
                                         modern("tools/list", id=1), rpc("ping", id=2)],
    }
    for name, msgs in conversations.items():
        text = "\n".join(json.dumps(m, ensure_ascii=False) for m in msgs) + "\n"
        (out / f"{name}.jsonl").write_text(text, encoding="utf-8")
    raw = {
        "batch": b'[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/list"}]',
        "garbage": b"not json at all\n",
        "truncated": b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sta',
        "duplicate-id": b'{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}',
        "deep": b"[" * 5000,
        "catalog": json.dumps({"pipelines": [{"name": "triage", "decide": {"model": "kev"},
                                              "verify": [{"model": "judge"}]}],
                               "data": [{"id": "kev", "decision_type": "openjev"}]}).encode(),
    }
    for name, data in raw.items():
        (out / f"{name}.txt").write_bytes(data)


def head_seeds(out):
    http_seeds(out)
    edges = {
        "bare-lf": b"GET /livez HTTP/1.1\nHost: a\n\nBODY",
        "mixed-eol": b"POST /v1/x HTTP/1.0\r\nA: b\n\r\n",
        "folded": b"GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n",
        "lone-cr": b"GET / HTTP/1.1\r\nA: b\rc\r\n\r\n",
        "nul": b"GET / HTTP/1.1\r\nAuthorization: Bearer k\x00x\r\n\r\n",
        "tab-value": b"GET / HTTP/1.1\r\nA:\tb \t\r\n\r\n",
        "space-name": b"GET / HTTP/1.1\r\nA : b\r\n\r\n",
        "two-spaces": b"GET  / HTTP/1.1\r\n\r\n",
        "unknown-method": b"BREW /pot HTTP/1.1\r\n\r\n",
        "http2": b"GET / HTTP/2.0\r\n\r\n",
        "empty-first": b"\r\nGET / HTTP/1.1\r\n\r\n",
        "pipelined": b"GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n",
        "bad-uri": b"GET http://[::1/ HTTP/1.1\r\n\r\n",
        "long": b"GET / HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 70000 + b"\r\n\r\n",
    }
    for name, raw in edges.items():
        (out / f"edge-{name}.http").write_bytes(raw)


def feedback_seeds(out):
    """POST /v1/feedback bodies against fuzz_feedback's stored requests: r1 (choice act
    labelled "stop", score sev, noul urgent), the pipeline request p1, the expired id old."""
    seeds = {
        "gold-all": {"request_id": "r1", "gold": {"act": "stop", "sev": 2, "urgent": True}},
        "gold-same": {"request_id": "r1", "gold": {"act": "stop"}},
        "gold-conflict": {"request_id": "r1", "gold": {"act": "reduce"}},
        "gold-replace": {"request_id": "r1", "gold": {"act": "reduce"}, "replace": True},
        "gold-target": {"request_id": "r1", "gold": {"sev": {"target": {"1": 0.5, "2": 0.5},
                                                            "answer": 2}}},
        "gold-target-only": {"request_id": "r1", "gold": {"act": {"target": {"stop": 1}}}},
        "gold-bad-option": {"request_id": "r1", "gold": {"act": "bogus"}},
        "gold-bad-level": {"request_id": "r1", "gold": {"sev": 3}},
        "gold-unknown-question": {"request_id": "r1", "gold": {"nope": True}},
        "outcome": {"request_id": "p1", "outcome": "reduce"},
        "outcome-none": {"request_id": "p1", "outcome": None},
        "outcome-on-model": {"request_id": "r1", "outcome": "stop"},
        "gold-on-pipeline": {"request_id": "p1", "gold": {"choice": "stop"}},
        "expired": {"request_id": "old", "gold": {"act": "stop"}},
        "unknown": {"request_id": "zz", "outcome": None},
        "both": {"request_id": "r1", "gold": {"act": "stop"}, "outcome": "stop"},
        "extra-field": {"request_id": "r1", "gold": {"act": "stop"}, "x": 1},
    }
    for name, body in seeds.items():
        (out / f"{name}.json").write_text(json.dumps(body), encoding="utf-8")
    (out / "not-json.json").write_text('{"request_id": "r1", "gold": {', encoding="utf-8")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--max-len", type=int, default=1 << 18)
    args = ap.parse_args()
    root = Path(args.dir)
    writers = {"gguf": lambda d: gguf_seeds(d, args.max_len), "config": config_seeds,
               "s1": s1_seeds, "tmpl": tmpl_seeds, "http": http_seeds, "head": head_seeds, "mcp": mcp_seeds,
               "feedback": feedback_seeds}
    for target, write in writers.items():
        out = root / target
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        write(out)
        print(f"make_seeds: {len(list(out.iterdir()))} {target} seeds in {out}")


if __name__ == "__main__":
    main()
