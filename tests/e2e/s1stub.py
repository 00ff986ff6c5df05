"""Small in-process /v1/systemone endpoints for the evaluation tests.

`Endpoint(fn)` serves POST /v1/systemone on a free loopback port from a
daemon thread; fn(request_dict) returns (status, body) where body is a dict
(sent as JSON) or bytes (sent as is). `proxy_to(url)` gives an fn that
forwards to a real server, so a test can change what llama-server answered
(noise, alternating answers, injected errors) without touching the engine.
"""
import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Endpoint:
    def __init__(self, fn):
        self.fn = fn
        self.requests = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length", 0))
                req = json.loads(self.rfile.read(n))
                with outer.lock:
                    outer.requests += 1
                status, body = outer.fn(req)
                raw = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def forward(url, req, timeout=300):
    """POSTs req to url/v1/systemone; returns (status, parsed body)."""
    data = json.dumps(req).encode()
    r = urllib.request.Request(url + "/v1/systemone", data=data, method="POST",
                               headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(r, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def answer(question, probs):
    """A /v1/systemone answer for question from probs (list, in option order)."""
    kind = question["type"]
    if kind == "noul":
        return {"type": "noul", "noul": probs[0]}
    keys = list(question["criteria"]) if kind == "choice" else \
        [str(i) for i in range(len(question["criteria"]))]
    dist = dict(zip(keys, probs))
    top = max(range(len(probs)), key=lambda i: (probs[i], -i))
    if kind == "choice":
        return {"type": "choice", "choice": keys[top], "probabilities": dist, "confidence": 0.5}
    return {"type": "score", "score": sum(i * p for i, p in enumerate(probs)),
            "legend": {k: "" for k in keys}, "probabilities": dist, "confidence": 0.5}
