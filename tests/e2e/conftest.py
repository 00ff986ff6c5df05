"""Shared fixtures for tandem's end-to-end tests.

Everything here is real: the pinned llama-server from the cache, real GGUF
models fetched by scripts/fetch-models.sh, and the tandem binary under test.
`make test` installs all of them first, so a missing piece is a failure with
instructions, never a silent skip.
"""
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

# the suite's markers, scheduling, CPU pinning and leftover check (docs/testing.md)
from suite import (pytest_collection_modifyitems, pytest_configure,  # noqa: F401
                   pytest_runtest_logreport, pytest_runtest_setup, pytest_runtest_teardown,
                   pytest_sessionfinish)

ROOT = Path(__file__).resolve().parents[2]


def read_pins():
    pins = {}
    for line in (ROOT / "scripts" / "pins.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            pins[key] = value
    return pins


PINS = read_pins()


def cache_root():
    if os.environ.get("TANDEM_CACHE"):
        return Path(os.environ["TANDEM_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "tandem"


def require(path, how):
    if not path.exists():
        pytest.fail(f"{path} is missing: {how}")
    return path


ENGINE = cache_root() / "engine" / f"b{PINS['ENGINE_BUILD']}" / "bin" / "llama-server"
ENGINE_SRC = ENGINE.parent.parent / "src"
MODELS = cache_root() / "models"
FIXTURES = cache_root() / "fixtures"


def fixture_path(name):
    return require(FIXTURES / name, "run `make fixtures` (scripts/make-fixtures.sh)")


# Where a test counts loads and answers, never numbers, a tiny fixture stands in for a real
# one under the real one's name: the same daemon paths for a fraction of the compute
# (docs/testing.md). laya-tiny is an encoder: its whole prompt is one 512-token batch.
TINY_STAND_IN = {"smollm2-decider": ("kev-tiny.gguf", "ctx: 1024"),
                 "gemma3-decider": ("laya-tiny.gguf", "ctx: 512\n    batch: 512\n    ubatch: 512")}


def model_file(name, tiny=False):
    """(path, engine keys as YAML lines at 4 spaces) of fixture `name`, with ctx 2048, or with
    tiny=True of its stand-in in TINY_STAND_IN."""
    file, keys = TINY_STAND_IN[name] if tiny else (name + ".gguf", "ctx: 2048")
    return fixture_path(file), keys


def rotating_budget(serve_factory, config):
    """A host RAM budget on which the two models of config(budget) each fit alone and never
    together: the larger one's plan plus half the smaller one's, as a daemon plans them, plus
    the decision cache's cap (the daemon's own memory, docs/config.md)."""
    probe = serve_factory(config("8GiB"))
    status = probe.status()
    planned = sorted(m["planned"]["host_bytes"] for m in status["models"])
    probe.stop()
    assert len(planned) == 2, planned
    return f"{planned[1] + planned[0] // 2 + status['cache']['max_bytes']}B"


@pytest.fixture(scope="session")
def engine_path():
    return require(ENGINE, "run `make deps` (scripts/build-engine.sh)")


@pytest.fixture(scope="session")
def smollm2_path():
    return require(MODELS / PINS["SMOLLM2_GGUF"], "run scripts/fetch-models.sh")


@pytest.fixture(scope="session")
def gemma3_path():
    return require(MODELS / PINS["GEMMA3_GGUF"], "run scripts/fetch-models.sh")


@pytest.fixture(scope="session")
def tandem_bin():
    path = Path(os.environ.get("TANDEM_BIN", ROOT / "build" / "tandem"))
    return require(path, "run `make`")


def cpus():
    """The CPUs this test may use: one under pytest-xdist (tests/e2e/suite.py)."""
    return len(os.sched_getaffinity(0))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_raw(method, url, body=None, timeout=30):
    """Returns (status, raw body bytes) for one request; never raises on HTTP errors."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def http(method, url, body=None, timeout=30):
    """Returns (status, parsed JSON or text) for one request; never raises on HTTP errors."""
    status, raw = http_raw(method, url, body, timeout)
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


def http_unix(method, socket_path, path, body=None, timeout=30):
    """(status, parsed JSON or text) for one request to a server on a unix socket
    (an engine in tandem's run folder); raises OSError when it cannot connect."""
    import http.client

    class UnixConnection(http.client.HTTPConnection):
        def connect(self):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(str(socket_path))

    conn = UnixConnection("localhost", timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, data, {"Content-Type": "application/json"} if data else {})
        r = conn.getresponse()
        raw = r.read()
        try:
            return r.status, json.loads(raw)
        except ValueError:
            return r.status, raw.decode(errors="replace")
    finally:
        conn.close()


class LlamaServer:
    """One real llama-server child on a free loopback port, started from an argv
    list (no shell), with its log captured to a file."""

    def __init__(self, engine, model, log_path, extra_args=(), ctx=1024, record=True):
        self.record = record
        self.model = model
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.argv = [str(engine), "-m", str(model), "--host", "127.0.0.1",
                     "--port", str(self.port), "-c", str(ctx), "-ngl", "0", "-fit", "off",
                     # as many threads as this worker has CPUs (its default ignores affinity)
                     "-t", str(cpus()), "-tb", str(cpus()),
                     "-lv", "4", "--no-log-timestamps", "--no-log-prefix", *extra_args]
        self.proc = None

    def start(self, timeout=120):
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        t0 = time.monotonic()
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"llama-server exited with {self.proc.returncode} "
                                     f"while loading:\n{self.log_tail()}")
            try:
                status, _ = http("GET", self.url + "/health", timeout=1)
                if status == 200:
                    self.ready_ms = (time.monotonic() - t0) * 1000
                    self.record_footprint()
                    return self
            except OSError:
                pass  # not listening yet
            time.sleep(0.05)
        self.kill()
        raise AssertionError(f"llama-server not healthy after {timeout}s:\n{self.log_tail()}")

    def record_footprint(self):
        """Feeds the buffer sizes this run logged, and its spawn-to-ready time,
        to tandem's footprint and cost caches, as tandem does for its own
        children (`tandem footprint record`)."""
        tandem = os.environ.get("TANDEM_BIN", str(ROOT / "build" / "tandem"))
        if not self.record or not Path(tandem).exists():
            return
        self._log.flush()
        done = subprocess.run([tandem, "footprint", "record", str(self.model), str(self.log_path),
                               "--pid", str(self.proc.pid), "--ready-ms", f"{self.ready_ms:.1f}",
                               "--", *self.argv[1:]],
                              capture_output=True, text=True)
        if done.returncode != 0:
            self.kill()
            raise AssertionError(f"tandem footprint record failed: {done.stderr}")

    def stop(self, grace=15):
        """SIGTERM, then SIGKILL after grace seconds; returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"llama-server ignored SIGTERM for {grace}s")
        finally:
            self._log.close()

    def kill(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def log_text(self):
        if not self._log.closed:
            self._log.flush()
        return Path(self.log_path).read_text(errors="replace")

    def log_tail(self, n=30):
        return "\n".join(self.log_text().splitlines()[-n:])


@pytest.fixture(scope="module")
def smollm2_server(engine_path, smollm2_path, tmp_path_factory):
    server = LlamaServer(engine_path, smollm2_path,
                         tmp_path_factory.mktemp("engine") / "llama-server.log")
    server.start()
    yield server
    server.kill()


# What ASan, LeakSanitizer and UBSan print: `make asan` runs this suite on an
# instrumented tandem, and a report fails the test that provoked it.
SANITIZER_REPORT = re.compile(r"ERROR: (Address|Leak)Sanitizer|runtime error: ")


class Serve:
    """`tandem serve` on a config written to tmp_path, until /health says 200.

    config is the YAML text without `listen` and `logs` (added here: a free
    port, and logs under tmp_path so each test has its own audit log)."""

    def __init__(self, tandem_bin, tmp_path, config, ready_timeout=60, env=None, drain_delay=0,
                 logs=""):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.logs = tmp_path / "logs"
        self.audit = self.logs / "audit.jsonl"
        self.config = tmp_path / "tandem.yaml"
        self.config.write_text(f"listen: 127.0.0.1:{self.port}\nlogs:\n  dir: {self.logs}\n"
                               + logs + config)  # logs: more keys of the logs section
        self.stderr_path = tmp_path / "serve.stderr"
        self.stderr = open(self.stderr_path, "w")
        # drain_delay: --drain-delay in ms (0 by default: no gateway routes to a test's
        # node, so SIGTERM refuses at once); None keeps the config's limits.drain_delay
        delay = [] if drain_delay is None else ["--drain-delay", str(drain_delay)]
        self.proc = subprocess.Popen([str(tandem_bin), "serve", "--config", str(self.config)]
                                     + delay,
                                     stdout=subprocess.DEVNULL, stderr=self.stderr,
                                     env={**os.environ, **(env or {})})
        deadline = time.time() + ready_timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"tandem serve exited {self.proc.returncode}: {self.log()}")
            try:
                if http("GET", self.url + "/health", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        self.proc.kill()
        raise AssertionError(f"tandem serve not healthy: {self.log()}")

    def log(self):
        if not self.stderr.closed:
            self.stderr.flush()
        return self.stderr_path.read_text()

    def status(self):
        return http("GET", self.url + "/v1/status")[1]

    def model(self, name):
        return next(m for m in self.status()["models"] if m["name"] == name)

    def loads(self):
        return {m["name"]: m["loads"] for m in self.status()["models"]}

    def systemone(self, body, headers=None, timeout=120):
        req = urllib.request.Request(self.url + "/v1/systemone", json.dumps(body).encode(),
                                     {"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read()), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read()), dict(e.headers)

    def stop(self, timeout=60):
        """SIGTERM; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.stderr.close()
        return self.proc.returncode


@pytest.fixture
def serve_factory(tandem_bin, tmp_path):
    """Starts Serve instances and stops every one at the end of the test."""
    started = []

    def start(config, **kw):
        # the first daemon keeps tmp_path itself; later ones get their own folder
        where = tmp_path / f"serve{len(started)}" if started else tmp_path
        where.mkdir(exist_ok=True)
        s = Serve(tandem_bin, where, config, **kw)
        started.append(s)
        return s

    yield start
    for s in started:
        code = s.stop()
        assert code == 0, f"tandem serve exited {code}: {s.log()[-2000:]}"
        assert not SANITIZER_REPORT.search(s.log()), s.log()[-4000:]
