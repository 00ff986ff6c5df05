"""Browsers cannot drive tandem (issue 38): real headless Chromium against a real daemon on
the default config (no api_keys), with pages served from elsewhere.

- A page on another origin (http://evil.test:P, a Python server on 127.0.0.1 that Chromium
  reaches through --host-resolver-rules) tries auto-submitted
  `<form method=post enctype=text/plain>` posts (a model load, with and without a body, and
  a decision whose text/plain body is valid JSON), a `fetch` with JSON (preflighted) and
  `fetch`es with no-cors text/plain.
- A rebinding page: rebind.test resolves to 127.0.0.2, where, on the daemon's own port, a
  relay serves the attacker's page and then hands every other request to the daemon
  unchanged, as a DNS answer re-pointed at 127.0.0.1 would. The page then reads /v1/status,
  asks for a decision and loads a model, all same-origin.

Every attempt must be refused, and that is proven from the daemon's side: its audit log
shows each attempt arrived and was refused (403 or 415), /v1/status shows no model loaded,
/metrics shows no decision served. Then the positive controls, so the test can fail: a page
on an origin of allowed_origins calls the API with JSON through a CORS preflight and gets a
decision, and the dashboard (/ui) still loads the daemon's status from its own origin."""
import json
import socket
import socketserver
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import free_port, http
from test_serve import A, B, choice, config
from test_ui import CHROMEDRIVER, css, row_state, wait

pytestmark = pytest.mark.quick  # in `make check` (docs/testing.md)

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
except ImportError:  # reported by the fixture, as a failure
    webdriver = None

REQUEST = choice("CPU at 95%", A)


@pytest.fixture
def chromium():
    """test_ui's Chromium, resolving the test's names: evil.test and allowed.test to the
    page server's 127.0.0.1, rebind.test to the relay's 127.0.0.2."""
    if webdriver is None:
        pytest.fail("selenium is not installed in build/venv: run `make deps`")
    if not CHROMEDRIVER.exists():
        pytest.fail(f"{CHROMEDRIVER} is missing (Debian chromium-driver): run `make deps`")
    opts = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000",
                "--host-resolver-rules=MAP evil.test 127.0.0.1, MAP allowed.test 127.0.0.1, "
                "MAP rebind.test 127.0.0.2",
                "--disable-features=HttpsUpgrades"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(options=opts, service=Service(str(CHROMEDRIVER)))
    yield driver
    driver.quit()


# --- the attacker's pages ----------------------------------------------------------------------

def form_page(action, fields):
    inputs = "".join(f"<input type=hidden name='{n}' value='{v}'>" for n, v in fields)
    return (f"<!doctype html><title>form</title><form method=post enctype=text/plain "
            f"action='{action}'>{inputs}</form><script>document.forms[0].submit()</script>")


def script_page(js):
    """A page that runs js (an async function body), then publishes what it returned in
    window.done (the test polls it)."""
    return ("<!doctype html><title>attack</title><script>"
            f"(async () => {{ {js} }})().then((r) => {{ window.done = r; }}, "
            "(e) => { window.done = {thrown: String(e)}; });</script>")


def attempt(url, opts):
    """JS: one fetch, as what the page could learn from it."""
    return (f"await fetch({json.dumps(url)}, {opts}).then("
            "async (r) => ({status: r.status, type: r.type, text: await r.text()}), "
            "(e) => ({error: String(e)}))")


class Pages(ThreadingHTTPServer):
    """Serves the attacker's (or the allowed) pages by path on 127.0.0.1:port."""

    daemon_threads = True

    def __init__(self, port, pages):
        self.pages = pages

        class Handler(BaseHTTPRequestHandler):
            def do_GET(h):
                body = self.pages.get(h.path.split("?")[0])
                h.send_response(200 if body else 404)
                h.send_header("Content-Type", "text/html; charset=utf-8")
                h.end_headers()
                h.wfile.write((body or "no such page").encode())

            def log_message(h, *args):
                pass

        super().__init__(("127.0.0.1", port), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


class Relay(socketserver.ThreadingTCPServer):
    """rebind.test's server on 127.0.0.2:<the daemon's port>: it serves the page at
    /rebind.html, and hands any other connection to the daemon byte for byte, as if the
    name now resolved to 127.0.0.1 (DNS rebinding, minus the DNS)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port, page):
        relay = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(h):
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = h.request.recv(65536)
                    if not chunk:
                        return
                    head += chunk
                if head.split(b" ", 2)[1] == b"/rebind.html":
                    body = page.encode()
                    h.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
                                      b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body)
                                      + body)
                    return
                relay.forwarded += 1
                up = socket.create_connection(("127.0.0.1", port))
                up.sendall(head)
                pump = threading.Thread(target=copy, args=(h.request, up), daemon=True)
                pump.start()
                copy(up, h.request)

        self.forwarded = 0
        super().__init__(("127.0.0.2", port), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


def copy(src, dst):
    try:
        while chunk := src.recv(65536):
            dst.sendall(chunk)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


# --- the daemon's side -------------------------------------------------------------------------

def audit(s):
    return [json.loads(line) for line in s.audit.read_text().splitlines()] if s.audit.exists() else []


def refused(s, route, statuses=(403, 415)):
    return [a for a in audit(s) if a["route"] == route and a["status"] in statuses]


def metric_total(s, name, **labels):
    status, text = http("GET", s.url + "/metrics")
    assert status == 200
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def wait_for(cond, what, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.1)
    pytest.fail(f"{what} not seen in {timeout} s")


def run_page(driver, url, timeout=30):
    driver.get(url)
    return wait(driver, lambda d: d.execute_script("return window.done"), timeout, f"{url} to finish")


def test_pages_elsewhere_cannot_drive_tandem(serve_factory, chromium):
    pages_port = free_port()
    allowed = f"http://allowed.test:{pages_port}"
    s = serve_factory(config() + f"allowed_origins: [{allowed}]\n")
    api = s.url
    body = json.dumps(REQUEST)
    # a text/plain form whose "name=value" is valid JSON: {"state": ..., "pad": "="}
    json_name, json_value = body[:-1] + ', "pad": "', '"}'
    evil = {
        "/form-load.html": form_page(f"{api}/admin/models/{A}/load", [("x", "y")]),
        "/form-load-empty.html": form_page(f"{api}/admin/models/{B}/load", []),
        "/form-decide.html": form_page(f"{api}/v1/systemone", [(json_name, json_value)]),
        "/fetch.html": script_page(
            "return {json: " + attempt(f"{api}/v1/systemone", "{method: 'POST', headers: "
                                       "{'Content-Type': 'application/json'}, body: "
                                       + json.dumps(body) + "}") +
            ", plain: " + attempt(f"{api}/v1/systemone", "{method: 'POST', mode: 'no-cors', "
                                  "headers: {'Content-Type': 'text/plain'}, body: "
                                  + json.dumps(body) + "}") +
            ", load: " + attempt(f"{api}/admin/models/{A}/load", "{method: 'POST', mode: 'no-cors'}") +
            ", status: " + attempt(f"{api}/v1/status", "{}") + "};"),
        "/allowed.html": script_page(
            "return {models: " + attempt(f"{api}/v1/models", "{}") +
            ", decide: " + attempt(f"{api}/v1/systemone", "{method: 'POST', headers: "
                                   "{'Content-Type': 'application/json'}, body: "
                                   + json.dumps(body) + "}") + "};"),
    }
    Pages(pages_port, evil)
    relay = Relay(s.port, script_page(
        "return {status: " + attempt("/v1/status", "{}") +
        ", decide: " + attempt("/v1/systemone", "{method: 'POST', headers: {'Content-Type': "
                               "'application/json'}, body: " + json.dumps(body) + "}") +
        ", load: " + attempt(f"/admin/models/{A}/load", "{method: 'POST'}") + "};"))

    # (a) forms: the browser goes where the form posts; the daemon refuses it there
    for page, route in (("/form-load.html", "admin"), ("/form-load-empty.html", "admin"),
                        ("/form-decide.html", "systemone")):
        before = len(refused(s, route))
        chromium.get(f"http://evil.test:{pages_port}{page}")
        wait(chromium, lambda d: d.current_url.startswith(api), what=f"{page}'s post")
        wait_for(lambda: len(refused(s, route)) > before, f"{page}'s refusal in the audit log")
        text = chromium.find_element("tag name", "body").text
        assert "Origin http://evil.test" in text and "allowed_origins" in text, text

    # (b) fetch: JSON is preflighted and the preflight refused; no-cors posts get there and
    # are refused; a cross-origin read gets nothing
    before = {r: len(refused(s, r)) for r in ("systemone", "admin", "status")}
    got = run_page(chromium, f"http://evil.test:{pages_port}/fetch.html")
    assert "error" in got["json"], got              # the preflight failed: no request followed
    assert got["plain"]["type"] == "opaque" and got["load"]["type"] == "opaque", got
    assert "error" in got["status"], got            # no CORS answer: nothing to read
    wait_for(lambda: len(refused(s, "systemone")) > before["systemone"]
             and len(refused(s, "admin")) > before["admin"]
             and len(refused(s, "status")) > before["status"], "the fetches' refusals")
    assert any(a["method"] == "OPTIONS" for a in refused(s, "systemone")), audit(s)

    # (c) rebinding: same-origin for the browser, the wrong Host for the daemon
    got = run_page(chromium, f"http://rebind.test:{s.port}/rebind.html")
    assert relay.forwarded >= 1
    for what in ("status", "decide", "load"):
        assert got[what]["status"] == 403, got
        assert f"Host rebind.test:{s.port} is not one of this daemon's names" in got[what]["text"]

    # the daemon's side: every attempt arrived and was refused; nothing loaded or decided
    assert not [a for a in audit(s) if a["route"] in ("systemone", "admin") and a["status"] < 400]
    assert s.loads() == {A: 0, B: 0}
    assert {m["name"]: m["state"] for m in s.status()["models"]} == {A: "unloaded", B: "unloaded"}
    assert metric_total(s, "tandem_requests_total", route="systemone", status="200") == 0
    assert metric_total(s, "tandem_requests_total", route="systemone", status="403") >= 3
    assert metric_total(s, "tandem_requests_total", route="admin", status="403") >= 3

    # the controls: an allowed origin gets through the preflight, and a decision
    got = run_page(chromium, f"http://allowed.test:{pages_port}/allowed.html", timeout=180)
    assert got["models"]["status"] == 200 and A in got["models"]["text"], got
    assert got["decide"]["status"] == 200, got
    assert json.loads(got["decide"]["text"])["answers"]["act"]["choice"], got
    assert s.loads()[A] == 1

    # and the dashboard, from its own origin, still reads the status
    chromium.get(api + "/ui")
    wait(chromium, lambda d: row_state(d, A) == "resident" and row_state(d, B) == "unloaded",
         what="the models' states on /ui")
    assert [r.get_attribute("data-model") for r in css(chromium, "#models-table tbody tr")]


def test_a_nul_in_the_path_is_refused_and_engines_get_the_routes_path(serve_factory):
    """A %00 in the path no longer splits routing (cut at the NUL) from forwarding (the raw
    target): it is 400 before anything is routed, and an engine gets the route's own path
    with the query re-encoded, so a query does not break the passthrough."""
    import http.client
    s = serve_factory(config())
    hello = json.dumps({"model": A, "messages": [{"role": "user", "content": "Hi"}],
                        "max_tokens": 2}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=120)
    for target in ("/v1/chat/completions%00/../../props", "/v1/systemone%00", f"/admin/models/{A}%00/load"):
        conn.request("POST", target, hello, {"Content-Type": "application/json"})
        r = conn.getresponse()
        text = r.read().decode()
        assert r.status == 400 and "encoded NUL" in text, (target, r.status, text)
    assert s.loads() == {A: 0, B: 0}
    conn.request("POST", "/v1/chat/completions?x=a%20b&y=%2F", hello, {"Content-Type": "application/json"})
    r = conn.getresponse()
    body = r.read()
    assert r.status == 200 and json.loads(body)["object"] == "chat.completion", body
    conn.close()
