#!/usr/bin/env python3
"""Benchmark: what the MCP costs over the HTTP API (docs/mcp.md).

The same request, side by side in one run, round by round in a rotating order,
on one `tandem serve` with the two fixture decision models resident (the demo
pipeline: smollm2-decider decides, gemma3-decider verifies):

  - direct:      the route itself (POST /v1/pipelines/decide, GET /v1/status), on
                 one keep-alive connection;
  - mcp stdio:   tools/call through one running `tandem mcp --url` (a JSON line in,
                 a JSON line out), as an agent's MCP client sends it;
  - mcp http:    tools/call on POST /mcp (keep-alive, revision 2025-11-25, no
                 progress token: one JSON answer).

Reports each path's median latency, its ratio to direct and the median of the
per-round differences (the time the MCP adds). Writes the "mcp" section of --out.

Usage:
  build/venv/bin/python bench/mcp_bench.py --tandem build/tandem --out docs/benchmarks.md \\
      [--rounds N]
"""
import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from mdsection import replace_section  # noqa: E402
from serve_bench import (A, B, FIXTURES, Cleanup, Conn, cpu_model, engine_version, log,  # noqa: E402
                         med, start_serve)

KEY = "mcp-bench-key"
REQUEST = {"state": "The build server is at 97% memory and swapping. Eight compile jobs run in "
                    "parallel; two are nightly documentation builds nobody waits for.",
           "candidates": {"reduce": "Reduce build concurrency from eight jobs to four.",
                          "stop": "Stop the non-critical documentation builds.",
                          "nothing": "Change nothing and wait."}}


def config():
    return f"""api_keys: [{KEY}]
mcp:
  http: true
budget:
  ram: 2GiB
limits:
  request_timeout: 300s
models:
  decider:
    path: {FIXTURES / (A + '.gguf')}
    ctx: 2048
    keep_alive: forever
  verifier:
    path: {FIXTURES / (B + '.gguf')}
    ctx: 2048
    keep_alive: forever
pipelines:
  decide:
    decide:
      model: decider
      instructions: Which response should the operator take now?
    verify:
      - model: verifier
        questions:
          consistent:
            type: noul
            instructions: "The operator proposes: {{{{candidates[decide.choice]}}}}. Is it consistent?"
    verdict:
      thresholds:
        consistent: ">= 0.5"
      on_reject: next_best
      max_attempts: 2
"""


class Stdio:
    """One `tandem mcp` child, driven line by line."""

    def __init__(self, tandem, url, cleanup):
        self.p = subprocess.Popen([str(tandem), "mcp", "--url", url], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  env={"TANDEM_API_KEY": KEY, "PATH": "/usr/bin:/bin"})
        cleanup.add(self.close)
        self.id = 0
        self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                    "clientInfo": {"name": "bench", "version": "1"}})

    def request(self, method, params):
        self.id += 1
        t = time.perf_counter()
        self.p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": self.id, "method": method,
                                        "params": params}) + "\n").encode())
        self.p.stdin.flush()
        msg = json.loads(self.p.stdout.readline())
        return msg, time.perf_counter() - t

    def close(self):
        if self.p.poll() is None:
            self.p.stdin.close()
            self.p.wait(30)


def call(name, args):
    return {"name": name, "arguments": args}


def ok_tool(msg):
    result = msg.get("result") or {}
    if result.get("isError") or "structuredContent" not in result:
        raise SystemExit(f"mcp_bench: a tool call failed: {json.dumps(msg)[:500]}")


def ok_route(status, raw):
    if status != 200:
        raise SystemExit(f"mcp_bench: a direct request failed: {status} {raw[:300]!r}")


def measure(s, stdio, rounds):
    """{case: {path: [seconds per round]}}."""
    auth = {"Authorization": f"Bearer {KEY}"}
    direct, http = Conn(s.url), Conn(s.url)
    mcp_headers = {**auth, "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": "2025-11-25"}
    cases = {"decide_decide (pipeline)": (("POST", "/v1/pipelines/decide", REQUEST),
                                          call("decide_decide", REQUEST)),
             "status": (("GET", "/v1/status", None), call("status", {}))}
    out = {case: {"direct": [], "mcp stdio": [], "mcp http": []} for case in cases}
    for r in range(rounds):
        for case, ((method, path, body), params) in cases.items():
            def run_direct():
                status, raw, dt = direct.request(method, path, body, auth)
                ok_route(status, raw)
                return dt

            def run_stdio():
                msg, dt = stdio.request("tools/call", params)
                ok_tool(msg)
                return dt

            def run_http():
                rpc = {"jsonrpc": "2.0", "id": r, "method": "tools/call", "params": params}
                status, raw, dt = http.request("POST", "/mcp", rpc, mcp_headers)
                ok_route(status, raw)
                ok_tool(json.loads(raw))
                return dt

            runs = [("direct", run_direct), ("mcp stdio", run_stdio), ("mcp http", run_http)]
            k = r % 3
            for path_name, fn in runs[k:] + runs[:k]:
                out[case][path_name].append(fn())
    return out


def table(results):
    rows = ["| request | path | median ms | ratio to direct | added ms (median of pairs) |",
            "|---|---|---:|---:|---:|"]
    for case, paths in results.items():
        base = paths["direct"]
        for name, xs in paths.items():
            ratio = med(xs) / med(base)
            added = med([a - b for a, b in zip(xs, base)]) * 1000
            rows.append(f"| {case} | {name} | {med(xs) * 1000:.1f} | {ratio:.2f} | "
                        f"{'' if name == 'direct' else f'{added:+.1f}'} |")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    cleanup = Cleanup()
    tmp = Path(tempfile.mkdtemp(prefix="mcp-bench-"))
    try:
        s, _ = start_serve(args.tandem, tmp, "serve", None, cleanup, config())
        stdio = Stdio(args.tandem, s.url, cleanup)
        log("warming both models")
        measure(s, stdio, 1)
        log(f"{args.rounds} rounds")
        t0 = time.time()
        results = measure(s, stdio, args.rounds)
        took = time.time() - t0
    finally:
        cleanup.finish(tmp, keep_logs=False)
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = (f"Measured {when} on {cpu_model()} (2 cores, no GPU), llama-server {engine_version()}, "
            f"{args.rounds} rounds in {took:.0f} s, each path in a rotating order within a round, "
            f"both models resident. Command: `build/venv/bin/python bench/mcp_bench.py --tandem "
            f"build/tandem --out docs/benchmarks.md` (part of `make bench`).\n\n"
            + table(results) + "\n\n"
            "A tool call is the route's own request (the daemon runs it through its API handler "
            "for POST /mcp; `tandem mcp` sends it over HTTP), plus the JSON-RPC framing and the "
            "structured result built from the route's answer.")
    replace_section(Path(args.out), "mcp", "## MCP tool calls against the HTTP API", body)
    print(table(results))


if __name__ == "__main__":
    main()
