"""Engine smoke test: the pinned llama-server really serves a real model.

Start the cached llama-server on SmolLM2-135M on a free loopback port, wait for
/health, get one chat completion through the real OpenAI Python SDK, and stop
it cleanly with SIGTERM. This proves the toolchain before the daemon exists.
"""
import openai
import pytest

from conftest import LlamaServer

pytestmark = pytest.mark.quick  # in `make check` (docs/testing.md)


def test_engine_answers_a_chat_completion_and_stops_cleanly(engine_path, smollm2_path, tmp_path):
    server = LlamaServer(engine_path, smollm2_path, tmp_path / "llama-server.log").start()
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=120)
        reply = client.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": "What is the capital of France? One word."}],
            max_tokens=16, temperature=0, seed=1)
        text = reply.choices[0].message.content
        print(f"\nSmolLM2-135M answered: {text!r} "
              f"({reply.usage.prompt_tokens} prompt + {reply.usage.completion_tokens} completion tokens)")
        assert isinstance(text, str) and text.strip(), "empty completion"
        assert reply.choices[0].finish_reason in ("stop", "length")
        assert reply.usage.completion_tokens > 0
    finally:
        code = server.stop()
    assert code == 0, f"llama-server exited with {code} on SIGTERM:\n{server.log_tail()}"
