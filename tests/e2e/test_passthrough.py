"""The OpenAI passthrough and what tandem adds to it, end to end (docs/serve.md): the
engine's own error fields kept whole, real dates on /v1/models, and the deadline the
OpenAI Python SDK announces (x-stainless-read-timeout).

Real `tandem serve` on the SmolLM2 and Gemma-3 fixtures, the real OpenAI and TypeSafe
SDKs as clients."""
import datetime
import json
import os
import time

import openai
import pytest
from openai import OpenAI
from typesafe_sdk import TypeSafeClient

from conftest import fixture_path, free_port, http

pytestmark = pytest.mark.quick  # in `make check` (docs/testing.md)

A, B = "smollm2-decider", "gemma3-decider"
LONG = "The build farm swaps, the queue grows and every job waits for memory. " * 40


def config(models):
    return f"""budget:
  ram: 2GiB
limits:
  request_timeout: 120s
models:
{models}"""


def local(name, fixture, ctx):
    return f"""  {name}:
    path: {fixture_path(fixture + '.gguf')}
    ctx: {ctx}
    flash_attn: false
"""


def choice(model, state):
    return {"model": model, "state": state,
            "questions": {"act": {"type": "choice", "instructions": "What should the operator do?",
                                  "criteria": {"reduce": "reduce concurrency",
                                               "stop": "stop non-critical jobs"}}}}


def chat(model, content, **kw):
    return {"model": model, "max_tokens": 1, "temperature": 0,
            "messages": [{"role": "user", "content": content}], **kw}


def audit_of(s, request_id, timeout=10):
    """The audit line of request_id (written as the call ends)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        lines = [json.loads(l) for l in s.audit.read_text().splitlines()] if s.audit.exists() else []
        found = [l for l in lines if l["request_id"] == request_id]
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no audit line for {request_id}")


# --- the engine's errors, whole ---------------------------------------------------------------

def test_engine_error_keeps_every_field_of_the_engines_error(serve_factory):
    # the same file twice: a small window that the long prompt exceeds, and one it fits
    s = serve_factory(config(local("small", A, 256) + local("big", A, 2048)))
    st, fits = http("POST", s.url + "/v1/chat/completions", chat("big", LONG), timeout=120)
    assert st == 200, fits
    n_prompt = fits["usage"]["prompt_tokens"]
    assert n_prompt > 256
    st, body = http("POST", s.url + "/v1/chat/completions", chat("small", LONG), timeout=120)
    assert st == 400, body
    err = body["error"]
    # the engine's own fields, with the values the engine counted
    assert err["type"] == "exceed_context_size_error", err
    assert err["n_prompt_tokens"] == n_prompt and err["n_ctx"] == 256, err
    # beside tandem's shape
    assert err["code"] == 400 and str(n_prompt) in err["message"]
    assert body["detail"] == {"error_type": err["type"], "message": err["message"]}

    # a decision too: the same fields through /v1/systemone
    st, fits, _ = s.systemone(choice("big", LONG))
    assert st == 200, fits
    st, body, _ = s.systemone(choice("small", LONG))
    assert st == 400, body
    err = body["error"]
    assert err["type"] == "exceed_context_size_error", err
    assert err["n_ctx"] == 256 and err["n_prompt_tokens"] == fits["usage"]["input_tokens"], err
    assert body["detail"]["error_type"] == "exceed_context_size_error"


# --- /v1/models: real dates -------------------------------------------------------------------

def test_models_carry_the_files_dates(serve_factory):
    down = f"http://127.0.0.1:{free_port()}"  # a remote model whose upstream is down
    s = serve_factory(config(local(A, A, 2048) + local(B, B, 2048)
                             + f"  far:\n    upstream: [{down}]\n"))
    st, body = http("GET", s.url + "/v1/models")
    assert st == 200, body
    mtime = {A: os.stat(fixture_path(A + ".gguf")).st_mtime,
             B: os.stat(fixture_path(B + ".gguf")).st_mtime,
             "far": os.stat(s.config).st_mtime}  # a remote model's file here is the config

    def day(t):
        return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d")

    created = {m["id"]: m["created"] for m in body["data"]}
    assert created == {k: int(v) for k, v in mtime.items()}, created
    dates = {m["name"]: m["release_date"] for m in body["models"]}
    assert dates == {**{k: day(v) for k, v in mtime.items()}, "jev-latest": day(mtime[A])}
    assert "1970-01-01" not in dates.values() and 0 not in created.values()
    # the hash fields as docs/serve.md names them
    meta = next(m["meta"] for m in body["data"] if m["id"] == A)
    assert len(meta["header_sha256"]) == 64 and "sha256" in meta
    # both SDKs still read the list
    listed = TypeSafeClient(api_key="x", base_url=s.url, timeout=30).models.list().models
    assert {m.name: m.release_date for m in listed} == dates
    assert [m.created for m in OpenAI(base_url=s.url + "/v1", api_key="x").models.list().data] \
        == [int(mtime[A]), int(mtime[B]), int(mtime["far"])]


# --- the OpenAI SDK's timeout is the deadline -------------------------------------------------

def test_openai_sdk_timeout_sets_the_deadline(serve_factory):
    s = serve_factory(config(local(A, A, 2048) + local(B, B, 2048)))
    client = OpenAI(base_url=s.url + "/v1", api_key="x", timeout=42.5, max_retries=0)

    def deadline_of(rid, c=client, **kw):
        headers = {"x-request-id": rid, **kw.pop("extra_headers", {})}
        answer = c.chat.completions.create(**chat(A, "Say hello", **kw), extra_headers=headers)
        if kw.get("stream"):
            list(answer)
        return audit_of(s, rid).get("deadline_ms")

    assert deadline_of("sdk") == 42500              # the SDK's read timeout
    assert deadline_of("own", extra_headers={"X-Tandem-Timeout-Ms": "30000"}) == 30000
    assert deadline_of("capped", c=client.with_options(timeout=600)) == 120000
    assert deadline_of("invalid", extra_headers={"x-stainless-read-timeout": "soon"}) == 120000
    # a stream: the read timeout bounds the wait between chunks, not the answer
    assert deadline_of("streamed", stream=True) == 120000
    # only the OpenAI routes read it
    st, _, _ = s.systemone(choice(A, "disk full"), {"x-request-id": "s1",
                                                     "x-stainless-read-timeout": "5.0"})
    assert st == 200 and audit_of(s, "s1")["deadline_ms"] == 120000

    # a tiny timeout: B must load first, and its expected load ends after 300 ms
    tiny = OpenAI(base_url=s.url + "/v1", api_key="x", timeout=0.3, max_retries=0)
    with pytest.raises(openai.InternalServerError) as e:
        tiny.chat.completions.create(**chat(B, "Say hello"))
    assert e.value.status_code == 504
    err = e.value.body
    assert err["type"] == "deadline_exceeded" and "(300 ms)" in err["message"], err
    assert B in err["message"] and "must load first" in err["message"], err
