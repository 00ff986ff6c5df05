"""GET /ui, the dashboard, in headless Chromium against a live daemon with the
two fixture deciders in a budget that holds one at a time (400 MiB), so that
a request for the other one swaps them.

Checked: the page lists both models without a console error; the tester's
probabilities are the API's own (to 3 decimals); a swap made from Python shows
without a reload (states, a load bar on the timeline); nothing is fetched from
anywhere but the daemon; the API key form and sessionStorage; the polling
fallback when /v1/events is refused; the quality panel shows /v1/quality's numbers.

Chromium and chromedriver are Debian packages (`make deps`); a missing one is a
failure, never a skip. TANDEM_UI_SCREENSHOTS=1 also writes docs/img/ui-dashboard.png
and docs/img/ui-tester.png."""
import json
import os
import shutil
import threading
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import pytest

from conftest import ROOT, http
from test_pipeline import REQUEST as PIPELINE_REQUEST
from test_pipeline import config as pipeline_config
from test_serve import A, B, choice, config

try:
    from selenium import webdriver
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:  # reported by the fixture, as a failure
    webdriver = None

CHROMEDRIVER = Path("/usr/bin/chromedriver")
SCREENSHOTS = os.environ.get("TANDEM_UI_SCREENSHOTS") == "1"
IMG = ROOT / "docs" / "img"
ROTATE = "400MiB"  # holds SmolLM2 (185 MiB) or Gemma-3 (291 MiB), not both


@pytest.fixture
def browser():
    if webdriver is None:
        pytest.fail("selenium is not installed in build/venv: run `make deps`")
    if not CHROMEDRIVER.exists():
        pytest.fail(f"{CHROMEDRIVER} is missing (Debian chromium-driver): run `make deps`")
    if not shutil.which("chromium"):
        pytest.fail("chromium is missing (Debian chromium): run `make deps`")
    opts = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(str(CHROMEDRIVER)))
    yield driver
    driver.quit()


def wait(driver, cond, timeout=30, what="the page"):
    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.1).until(lambda d: cond(d))
    except TimeoutException:
        pytest.fail(f"{what} not reached in {timeout} s; page says:\n{driver.find_element(By.TAG_NAME, 'main').text}"
                    f"\nconsole: {driver.get_log('browser')}")


def css(driver, selector):
    return driver.find_elements(By.CSS_SELECTOR, selector)


def row_state(driver, model):
    rows = css(driver, f'#models-table tr[data-model="{model}"]')
    return rows[0].get_attribute("data-state") if rows else None


def texts(driver, selector, attr=None):
    """The text (or an attribute) of every match, read in one script: the page redraws
    parts of itself, so element handles kept across calls may go stale."""
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])]"
        ".map((e) => arguments[1] ? e.getAttribute(arguments[1]) : e.textContent)", selector, attr)


def mode(driver):
    return driver.find_element(By.ID, "conn-state").get_attribute("data-mode")


def console_errors(driver, allowed=()):
    """SEVERE console entries, but those naming one of `allowed` (a refused request
    the page expects, e.g. the 401 that asks for the key)."""
    return [e for e in driver.get_log("browser")
            if e["level"] == "SEVERE" and not any(a in e["message"] for a in allowed)]


def ask(s, model, state="CPU at 95%"):
    status, body = http("POST", s.url + "/v1/systemone", choice(state, model), timeout=120)
    assert status == 200, body
    return body


def full_page_screenshot(driver, path):
    """The whole page at 1280 px wide, however tall it is."""
    driver.execute_script("window.scrollTo(0, 0)")
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": 1280, "height": height, "deviceScaleFactor": 1, "mobile": False})
    driver.save_screenshot(str(path))
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_the_page_lists_the_models_without_console_errors(serve_factory, browser):
    s = serve_factory(config(budget=ROTATE))
    browser.get(s.url + "/ui")
    wait(browser, lambda d: row_state(d, A) == "unloaded" and row_state(d, B) == "unloaded",
         what="both models in the table")
    wait(browser, lambda d: mode(d) == "events", what="the event stream")
    assert browser.title == "tandem"
    names = [r.get_attribute("data-model") for r in css(browser, "#models-table tbody tr")]
    assert names == [A, B]
    assert css(browser, '#memory svg[data-device="host"]'), "a memory bar for the host"
    # the models get budget.ram less the decision cache's 64 MiB (docs/config.md)
    assert "free of 336 MiB" in browser.find_element(By.ID, "memory").text
    wait(browser, lambda d: d.find_element(By.ID, "cache").text.startswith(
        "decision cache: 0 entries, 0 B of 64.0 MiB"), what="the decision cache's line")
    assert [td.text for td in css(browser, f'#models-table tr[data-model="{A}"] td')][8] == "0"
    assert {e.get_attribute("data-model") for e in css(browser, "#queue tr[data-model]")} == {A, B}
    wait(browser, lambda d: len(css(d, "#timeline g[data-lane]")) == 2, what="a timeline lane per model")
    assert console_errors(browser) == []


def test_the_tester_shows_the_probabilities_the_api_gives(serve_factory, browser):
    s = serve_factory(config(budget=ROTATE))
    browser.get(s.url + "/ui")
    wait(browser, lambda d: len(Select(d.find_element(By.ID, "tester-model")).options) >= 2,
         what="the tester's models")
    Select(browser.find_element(By.ID, "tester-model")).select_by_value("model:" + A)
    body = json.loads(browser.find_element(By.ID, "tester-body").get_attribute("value"))
    browser.find_element(By.ID, "tester-send").click()
    result = browser.find_element(By.ID, "tester-result")
    wait(browser, lambda d: result.get_attribute("data-state") in ("ok", "error"), timeout=120,
         what="the tester's answer")
    assert result.get_attribute("data-state") == "ok", result.text
    shown = {(v.get_attribute("data-question"), v.get_attribute("data-label")): v.text
             for v in css(browser, "#tester-result .value")}
    assert len(shown) == 3, shown

    # The same request from here. A request whose prompt is exactly the one the
    # engine's slot answered last comes from its prompt cache and rounds differently
    # (docs/pipelines.md, Determinism): another request in between keeps it fresh,
    # as the page's was (the first on a newly loaded engine).
    ask(s, A, "something else entirely")
    status, raw = 0, b""
    req = urllib.request.Request(s.url + "/v1/systemone", json.dumps({"model": A, **body}).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        status, raw = r.status, r.read()
    assert status == 200
    answers = json.loads(raw)["answers"]
    want = {(q, label): f"{p:.3f}" for q, a in answers.items() for label, p in a["probabilities"].items()}
    assert shown == want
    if SCREENSHOTS:
        IMG.mkdir(parents=True, exist_ok=True)
        section = browser.find_element(By.CSS_SELECTOR, 'section[aria-labelledby="h-tester"]')
        browser.execute_script("arguments[0].scrollIntoView()", section)
        section.screenshot(str(IMG / "ui-tester.png"))
    assert console_errors(browser) == []


def test_a_swap_shows_without_a_reload(serve_factory, browser):
    # the pipeline config: the same two fixtures (keep_alive forever), plus `ops`
    s = serve_factory(pipeline_config(budget=ROTATE))
    ask(s, A)
    browser.get(s.url + "/ui")
    wait(browser, lambda d: row_state(d, A) == "resident" and row_state(d, B) == "unloaded",
         what="A resident")
    wait(browser, lambda d: mode(d) == "events", what="the event stream")
    # the replay (Last-Event-ID: 0) drew A's load from before the page opened
    wait(browser, lambda d: css(d, f'#timeline rect[data-kind="load"][data-model="{A}"]'),
         what="A's load bar, from the replay")
    assert not css(browser, f'#timeline rect[data-kind="load"][data-model="{B}"]')
    ask(s, B)
    wait(browser, lambda d: row_state(d, B) == "resident" and row_state(d, A) == "unloaded",
         what="B resident, A unloaded")
    wait(browser, lambda d: css(d, f'#timeline rect[data-kind="load"][data-model="{B}"]'),
         what="B's load bar")
    wait(browser, lambda d: css(d, f'#timeline [data-kind="evicted"][data-model="{A}"]'),
         what="A's eviction marker")
    # B's request waited for B's load: its bar has a loading part
    wait(browser, lambda d: css(d, f'#timeline g[data-kind="request"][data-model="{B}"] '
                                   f'rect[data-kind="request-loading"]'), what="B's request bar")
    title = texts(browser, f'#timeline g[data-kind="request"][data-model="{B}"] title')[-1]
    assert "loading" in title and "req_" in title, title
    wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, f'#models-table tr[data-model="{B}"]')
         .find_elements(By.TAG_NAME, "td")[4].text == "1", what="B's answered count")
    # a pipeline's verdict appears under Recent verdicts
    status, verdict = http("POST", s.url + "/v1/pipelines/ops", PIPELINE_REQUEST, timeout=300)
    assert status == 200, verdict
    wait(browser, lambda d: css(d, f'#verdicts [data-request-id="{verdict["request_id"]}"]'),
         what="the verdict")
    card = f'#verdicts [data-request-id="{verdict["request_id"]}"]'
    assert texts(browser, card, "data-verdict") == [verdict["verdict"]]
    shown = dict(zip(texts(browser, card + " .decide .value", "data-label"),
                     texts(browser, card + " .decide .value")))
    for label, p in verdict["decide"]["answers"]["choice"]["probabilities"].items():
        assert shown[label] == f"{p:.3f}"
    if SCREENSHOTS:
        IMG.mkdir(parents=True, exist_ok=True)
        Select(browser.find_element(By.ID, "tester-model")).select_by_value("pipeline:ops")
        full_page_screenshot(browser, IMG / "ui-dashboard.png")
    assert console_errors(browser) == []


def test_nothing_is_fetched_from_outside_the_box(serve_factory, browser):
    s = serve_factory(config(budget=ROTATE))
    browser.get(s.url + "/ui")
    wait(browser, lambda d: mode(d) == "events" and row_state(d, A) == "unloaded", what="the page")
    urls = []
    for entry in browser.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg["method"] == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    paths = {urlparse(u).path for u in urls}
    assert {"/ui", "/ui/app.css", "/ui/app.js", "/v1/status", "/v1/events"} <= paths, urls
    outside = [u for u in urls if urlparse(u).scheme not in ("data", "about", "blob")
               and urlparse(u).hostname != "127.0.0.1"]
    assert outside == []
    page = http("GET", s.url + "/ui")[1] + http("GET", s.url + "/ui/app.css")[1] + http("GET", s.url + "/ui/app.js")[1]
    assert "https://" not in page.replace("http://www.w3.org/2000/svg", "") and "//cdn" not in page


def test_the_api_key_is_asked_once_and_kept_for_the_session(serve_factory, browser):
    s = serve_factory(config(budget=ROTATE, extra="api_keys: [k-ui]"))
    browser.get(s.url + "/ui")
    form = browser.find_element(By.ID, "key-form")
    wait(browser, lambda d: form.is_displayed() and mode(d) == "key", what="the key form")
    assert not css(browser, "#models-table tbody tr")
    browser.find_element(By.ID, "key-input").send_keys("wrong")
    browser.find_element(By.ID, "key-submit").click()
    wait(browser, lambda d: form.is_displayed() and "refused" in d.find_element(By.ID, "key-error").text,
         what="the wrong key refused")
    browser.find_element(By.ID, "key-input").send_keys("k-ui")
    browser.find_element(By.ID, "key-submit").click()
    wait(browser, lambda d: row_state(d, A) == "unloaded" and row_state(d, B) == "unloaded",
         what="the models after the key")
    wait(browser, lambda d: mode(d) == "events", what="the event stream with the key")
    assert not form.is_displayed()
    assert browser.execute_script("return sessionStorage.getItem('tandem.apiKey')") == "k-ui"
    browser.refresh()
    wait(browser, lambda d: row_state(d, A) == "unloaded" and mode(d) == "events",
         what="the models after a reload")
    assert not browser.find_element(By.ID, "key-form").is_displayed()
    # the refused requests are the only console errors
    assert console_errors(browser, allowed=("401",)) == []


def test_without_the_event_stream_the_page_polls_and_still_shows_a_swap(serve_factory, browser):
    s = serve_factory(config(budget=ROTATE, limits="  max_event_clients: 0"))
    status, body = http("GET", s.url + "/v1/events", timeout=10)
    assert status == 503 and "max_event_clients: 0" in body["error"]["message"], body
    ask(s, A)
    browser.get(s.url + "/ui")
    wait(browser, lambda d: mode(d) == "polling" and row_state(d, A) == "resident", what="polling, A resident")
    assert browser.find_element(By.ID, "conn-state").text == "polling every 2 s"
    swap = threading.Thread(target=ask, args=(s, B))
    swap.start()
    wait(browser, lambda d: row_state(d, B) == "resident" and row_state(d, A) == "unloaded",
         what="B resident, A unloaded, by polling")
    wait(browser, lambda d: css(d, f'#timeline rect[data-kind="load"][data-model="{B}"]'),
         what="B's load bar, by polling")
    swap.join(120)
    assert console_errors(browser, allowed=("503",)) == []


def test_every_dashboard_file_and_its_304_carry_the_request_id(serve_factory):
    """docs/serve.md: x-request-id on every answer, the dashboard's files and their 304
    revalidations included (the HTTP fuzz target once stopped on a /ui 304)."""
    s = serve_factory(config(tiny=True))
    for path in ("/ui", "/ui/app.css", "/ui/app.js"):
        with urllib.request.urlopen(s.url + path, timeout=30) as r:
            assert r.status == 200 and r.headers["x-tandem-node"]
            assert r.headers["x-request-id"].startswith("req_"), dict(r.headers)
            etag = r.headers["ETag"]
        req = urllib.request.Request(s.url + path, headers={"If-None-Match": etag,
                                                            "x-request-id": f"ui-{path}"})
        try:
            urllib.request.urlopen(req, timeout=30)
            raise AssertionError(f"{path}: no 304 for its own ETag")
        except urllib.error.HTTPError as e:  # urllib raises on a 304
            assert e.code == 304 and e.read() == b""
            assert e.headers["x-request-id"] == f"ui-{path}" and e.headers["ETag"] == etag
    # and the event stream the page subscribes to
    with urllib.request.urlopen(urllib.request.Request(
            s.url + "/v1/events", headers={"x-request-id": "ui-events"}), timeout=30) as r:
        assert r.headers["Content-Type"] == "text/event-stream"
        assert r.headers["x-request-id"] == "ui-events" and r.headers["x-tandem-node"]


def test_the_quality_panel_shows_the_labelled_decisions(serve_factory, browser):
    s = serve_factory(config(budget=ROTATE))
    golds = {"CPU at 95%": "reduce", "Disk at 99%": "stop", "All green": "nothing"}
    for state, gold in golds.items():
        status, _, headers = s.systemone(choice(state, A))
        assert status == 200
        status, body = http("POST", s.url + "/v1/feedback",
                            {"request_id": headers["x-request-id"], "gold": {"act": gold}})
        assert status == 200, body
    status, quality = http("GET", s.url + "/v1/quality?since=1h")
    assert status == 200, quality
    want = next(g for g in quality["models"] if g["model"] == A and g["question"] == "act")
    assert want["count"] == 3
    browser.get(s.url + "/ui")
    group = f"{A} · act"
    wait(browser, lambda d: texts(d, "#quality-table tr[data-group]", "data-group") == [group],
         what="the quality table's row")
    row = f'#quality-table tr[data-group="{group}"] td'
    assert texts(browser, row)[2] == "3"
    assert texts(browser, row + '[data-metric="accuracy"]') == [f"{want['accuracy']:.3f}"]
    assert texts(browser, row + '[data-metric="ece"]') == [f"{want['ece']:.3f}"]
    bins = [i for i, b in enumerate(want["reliability"]) if b["count"]]
    assert [int(b) for b in texts(browser, "#quality-reliability rect[data-bin]", "data-bin")] == bins
    assert texts(browser, "#quality-over-time circle", "data-count") == ["3"]
    assert console_errors(browser) == []
