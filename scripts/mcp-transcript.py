#!/usr/bin/env python3
"""Records a real MCP session with `tandem mcp` into docs/mcp.md (`make mcp-transcript`).

Runs the shipped binary as an agent would (`tandem mcp --config examples/demo.yaml`: no
daemon listens at the demo's address, so it starts a private one), sends the messages an
agent's MCP client sends, one JSON line each, and writes what went each way between the
markers of docs/mcp.md's "A real session" section. Long tool schemas are cut to their first
members, and nothing else is changed."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "mcp.md"
BEGIN, END = "<!-- transcript: begin -->", "<!-- transcript: end -->"
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "transcript", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}
REQUEST = {"state": "The build server is at 97% memory and swapping. Eight compile jobs run in "
                    "parallel; two are nightly documentation builds nobody waits for.",
           "candidates": {"reduce": "Reduce build concurrency from eight jobs to four.",
                          "stop": "Stop the non-critical documentation builds.",
                          "nothing": "Change nothing and wait."}}
MESSAGES = [
    {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": META}},
    {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
     "params": {"name": "decide_decide", "arguments": REQUEST, "_meta": {**META, "progressToken": 3}}},
    {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
     "params": {"name": "systemone", "_meta": META, "arguments": {
         "model": "verifier", "state": REQUEST["state"],
         "questions": {"urgent": {"type": "noul", "instructions": "Is this urgent?"}}}}},
    {"jsonrpc": "2.0", "id": 5, "method": "tools/call",
     "params": {"name": "status", "arguments": {}, "_meta": META}},
    {"jsonrpc": "2.0", "id": 6, "method": "tools/call",
     "params": {"name": "decide_decide", "arguments": {"state": "x", "candidates": ["a", "b"]},
                "_meta": META}},
]


def shorten(msg):
    """tools/list with each schema cut to its property names."""
    for tool in msg.get("result", {}).get("tools", []):
        for key in ("inputSchema", "outputSchema"):
            props = tool[key].get("properties", {})
            tool[key] = {"type": "object", "properties": {k: "…" for k in props}}
    return msg


def main():
    tandem = ROOT / "build" / "tandem"
    proc = subprocess.Popen([str(tandem), "mcp", "--config", str(ROOT / "examples" / "demo.yaml")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT)
    lines = []
    for msg in MESSAGES:
        proc.stdin.write(json.dumps(msg) + "\n")
        proc.stdin.flush()
        lines.append("→ " + json.dumps(msg, ensure_ascii=False))
        while True:
            out = json.loads(proc.stdout.readline())
            lines.append("← " + json.dumps(shorten(out), ensure_ascii=False))
            if out.get("id") == msg["id"]:
                break
    proc.stdin.close()
    proc.wait(60)
    stderr = proc.stderr.read().strip().splitlines()
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    block = (f"{BEGIN}\nRecorded {when} by `make mcp-transcript` (scripts/mcp-transcript.py) with "
             f"`tandem mcp --config examples/demo.yaml`, on this machine's CPU. `→` is the "
             f"agent, `←` is tandem; stderr said:\n\n```\n" + "\n".join(stderr) + "\n```\n\n"
             "```\n" + "\n".join(lines) + "\n```\n" + END)
    text = DOC.read_text()
    a, b = text.index(BEGIN), text.index(END) + len(END)
    DOC.write_text(text[:a] + block + text[b:])
    print(f"mcp-transcript: {len(lines)} messages into {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.exit(main())
