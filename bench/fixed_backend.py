#!/usr/bin/env python3
"""A fixed-latency /v1/systemone backend: a benchmark fixture, never the thing tested.

It stands in for a model server (a tandem node, a llama-server) behind a front, so that a
benchmark of the fronts measures the fronts and not the engines:

 - POST /v1/systemone: waits for one of --slots (like llama-server's -np), sleeps
   --delay-ms, and answers a valid System One body built from the request's questions
   (every question gets an answer of its type; `model` echoes the request's);
 - GET /health: 200 {"status":"ok"} (also in --refuse mode: the node looks healthy);
 - GET /stats: {"name", "requests", "refused", "connections" (accepted),
   "post_connections" (those that carried a POST), "max_running", "max_waiting"} so far;
 - --refuse: every POST gets 503 at once, with Retry-After and a JSON error body, as a
   node whose queue is full or that drains would answer (only /v1/systemone is refused).

Every answer carries `x-backend: NAME` (--name, default host:port). HTTP/1.1 with
keep-alive on one asyncio loop: connections cost nothing while they wait, so many
clients and a front's connection pool all fit. A lone request takes the delay (asyncio's
timer waits up to a millisecond longer: 20 ms measures about 20.7 ms, steadily) plus
about 0.1 ms on loopback; with --delay-ms 0 it answers at once.

Usage: fixed_backend.py [--host 127.0.0.1] --port P [--delay-ms 20] [--slots 1]
                        [--refuse] [--name NAME]
It prints "ready http://HOST:PORT" on stdout once it listens, and stops on SIGTERM/SIGINT.
"""
import argparse
import asyncio
import json
import signal
import sys

REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
           413: "Payload Too Large", 503: "Service Unavailable"}
MAX_BODY = 1 << 20


def answer(q):
    """A well-formed answer to one question (first option most probable)."""
    kind = q.get("type") if isinstance(q, dict) else None
    if kind == "noul":
        return {"type": "noul", "noul": 0.75}
    crit = q.get("criteria") if isinstance(q, dict) else None
    if kind == "score":
        n = len(crit) if isinstance(crit, list) and len(crit) >= 2 else 2
        keys = [str(i) for i in range(n)]
        probs = [0.5] + [0.5 / (n - 1)] * (n - 1)
        mode = 0
        dist = sum(p * abs(i - mode) for i, p in enumerate(probs))
        dist_u = sum(abs(i - (n - 1) / 2) for i in range(n)) / n
        return {"type": "score", "score": sum(i * p for i, p in enumerate(probs)),
                "legend": {k: (crit[i] if isinstance(crit, list) and isinstance(crit[i], str)
                               else "") for i, k in enumerate(keys)},
                "probabilities": dict(zip(keys, probs)),
                "confidence": max(0.0, 1 - dist / dist_u) if dist_u else 1.0}
    keys = list(crit) if isinstance(crit, dict) and crit else ["a", "b"]
    k = len(keys)
    probs = [0.5] + [0.5 / (k - 1)] * (k - 1) if k > 1 else [1.0]
    return {"type": "choice", "choice": keys[0], "probabilities": dict(zip(keys, probs)),
            "confidence": max(0.0, (0.5 - 1 / k) / (1 - 1 / k)) if k > 1 else 1.0}


def decision(req):
    qs = req.get("questions") if isinstance(req, dict) else None
    if not isinstance(qs, dict) or not qs:
        qs = {"q": {"type": "noul"}}
    state = req.get("state", "") if isinstance(req, dict) else ""
    return {"model": req.get("model", "fixed") if isinstance(req, dict) else "fixed",
            "answers": {qid: answer(q) for qid, q in qs.items()},
            "usage": {"input_tokens": len(json.dumps(state)) // 4 + 8 * len(qs),
                      "output_tokens": 0}}


class Backend:
    def __init__(self, args):
        self.delay = args.delay_ms / 1e3
        self.refuse = args.refuse
        self.name = args.name
        self.slots = asyncio.Semaphore(args.slots)
        self.requests = self.refused = self.connections = self.post_connections = 0
        self.running = self.waiting = self.max_running = self.max_waiting = 0

    async def serve_conn(self, reader, writer):
        self.connections += 1
        posted = False
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                parts = lines[0].split(" ")
                if len(parts) != 3:
                    break
                method, target, version = parts
                hdrs = {}
                for ln in lines[1:]:
                    if ":" in ln:
                        k, v = ln.split(":", 1)
                        hdrs[k.strip().lower()] = v.strip()
                if hdrs.get("transfer-encoding", "").lower() == "chunked":
                    body = await read_chunked(reader)
                else:
                    n = int(hdrs.get("content-length", "0") or 0)
                    if n > MAX_BODY:
                        await self.send(writer, 413, {"error": "body too large"}, close=True)
                        break
                    body = await reader.readexactly(n) if n else b""
                if hdrs.get("expect", "").lower() == "100-continue":
                    pass  # bodies are read above; curl sends Expect only past 1 MiB
                close = (hdrs.get("connection", "").lower() == "close"
                         or (version == "HTTP/1.0"
                             and hdrs.get("connection", "").lower() != "keep-alive"))
                if method == "POST" and not posted:
                    posted = True
                    self.post_connections += 1
                status, obj, extra = await self.route(method, target.split("?", 1)[0], body)
                await self.send(writer, status, obj, extra, close, version)
                if close:
                    break
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError,
                ValueError, asyncio.CancelledError):
            pass  # closed, malformed, or the server stops (SIGTERM): end the connection
        finally:
            try:
                writer.close()
            except Exception:
                pass

    async def route(self, method, path, body):
        if path in ("/health", "/livez"):
            return 200, {"status": "ok"}, None
        if path == "/stats":
            return 200, {"name": self.name, "requests": self.requests,
                         "refused": self.refused, "connections": self.connections,
                         "post_connections": self.post_connections,
                         "max_running": self.max_running,
                         "max_waiting": self.max_waiting}, None
        if path != "/v1/systemone":
            return 404, {"error": {"code": 404, "message": f"no route {path}",
                                   "type": "not_found_error"}}, None
        if method != "POST":
            return 405, {"error": {"code": 405, "message": "POST only",
                                   "type": "invalid_request_error"}}, None
        if self.refuse:
            self.refused += 1
            return 503, {"error": {"code": 503, "message": f"{self.name} refuses (fixture)",
                                   "type": "unavailable_error"}}, [("Retry-After", "1")]
        try:
            req = json.loads(body or b"{}")
        except ValueError:
            return 400, {"error": {"code": 400, "message": "body is not JSON",
                                   "type": "invalid_request_error"}}, None
        self.waiting += 1
        self.max_waiting = max(self.max_waiting, self.waiting)
        async with self.slots:
            self.waiting -= 1
            self.running += 1
            self.max_running = max(self.max_running, self.running)
            try:
                await asyncio.sleep(self.delay)
            finally:
                self.running -= 1
        self.requests += 1
        return 200, decision(req), None

    async def send(self, writer, status, obj, extra=None, close=False, version="HTTP/1.1"):
        raw = json.dumps(obj, separators=(",", ":")).encode()
        head = [f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}",
                "Content-Type: application/json", f"Content-Length: {len(raw)}",
                f"x-backend: {self.name}"]
        head += [f"{k}: {v}" for k, v in (extra or [])]
        if close:
            head.append("Connection: close")
        elif version == "HTTP/1.0":
            head.append("Connection: keep-alive")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + raw)
        await writer.drain()


async def read_chunked(reader):
    out = bytearray()
    while True:
        size = int((await reader.readline()).split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass
            return bytes(out)
        if len(out) + size > MAX_BODY:
            raise ValueError("body too large")
        out += await reader.readexactly(size)
        await reader.readline()


async def main_async(args):
    be = Backend(args)
    server = await asyncio.start_server(be.serve_conn, args.host, args.port,
                                        backlog=1024, reuse_address=True)
    port = server.sockets[0].getsockname()[1]
    if not be.name:
        be.name = f"{args.host}:{port}"
    print(f"ready http://{args.host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    ap.add_argument("--delay-ms", type=float, default=20.0,
                    help="time each answered request takes, in a slot (default 20)")
    ap.add_argument("--slots", type=int, default=1,
                    help="requests computed at once; the rest wait (default 1)")
    ap.add_argument("--refuse", action="store_true",
                    help="answer every POST /v1/systemone with 503 at once")
    ap.add_argument("--name", default="", help="the x-backend header (default host:port)")
    args = ap.parse_args()
    if args.slots < 1 or args.delay_ms < 0:
        sys.exit("fixed_backend: --slots must be >= 1 and --delay-ms >= 0")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
