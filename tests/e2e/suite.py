"""How the end-to-end suite runs on a small machine (docs/testing.md).

conftest.py takes these hooks; nothing here is a test.

- Markers: `alone` marks a test that times something or needs every core;
  `make e2e` runs those after the others, one at a time, on an idle machine.
  `quick` marks the tests of `make check`.
- Scheduling under pytest-xdist (`--dist loadfile`): a module runs on one
  worker, so its module-scoped daemons and engines start once; the session
  fails if a module ever ran on two. Modules go out longest first, by the
  seconds in tests/e2e/durations.json, so that the slowest do not start last.
- Each worker runs on one CPU of its own (its affinity mask), and so does
  every process it starts: tandem's placement and the engines it starts see
  one CPU and run one thread, and engines of different workers never spin
  against each other for a core.
- Every run exports TANDEM_TEST_RUN and every test TANDEM_TEST (its node id)
  to what it starts, and the session ends by looking for this run's
  `llama-*`, `tandem` or `envoy` processes still running: it names each with
  the test that started it, kills it, and fails the run.
"""
import json
import os
import signal
import time
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
DURATIONS = HERE / "durations.json"
UNKNOWN_SECONDS = 30.0  # a file durations.json does not know yet goes out early
LEFTOVER_GRACE_S = 5.0  # a child that was just sent SIGTERM may take this long to go
STARTED = pytest.StashKey[float]()  # when the session began, in clock ticks since boot
WORKERS_OF_MODULE = {}  # on the controller: module -> the workers that ran its tests


def pytest_configure(config):
    config.addinivalue_line("markers", "alone: runs after the parallel part, on an idle "
                                       "machine (it times something or needs every core)")
    config.addinivalue_line("markers", "quick: part of `make check` (docs/testing.md)")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        pin_to_one_cpu(int(worker.removeprefix("gw")))
    # one id per run, inherited by the workers and what they start, so that the leftover
    # check never takes another run's processes (a `make check` beside a `make test`)
    os.environ.setdefault("TANDEM_TEST_RUN", uuid.uuid4().hex)
    config.stash[STARTED] = boot_ticks_now()


def pin_to_one_cpu(index):
    """Worker gwN keeps one CPU of the session's mask, round robin; every thread
    of the worker is moved, so whatever it starts inherits that one CPU."""
    cpus = sorted(os.sched_getaffinity(0))
    mine = {cpus[index % len(cpus)]}
    for task in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(task), mine)
        except OSError:
            pass  # a thread that just ended


def seconds_per_file():
    """The seconds per file in durations.json; empty when it cannot be read."""
    try:
        return json.loads(DURATIONS.read_text())["files"]
    except (OSError, ValueError, KeyError):
        return {}


def module(nodeid):
    return nodeid.split("::")[0]


def pytest_collection_modifyitems(config, items):
    """The longest modules first; a module's tests stay together and in order.
    (`--dist loadfile` keeps a module on one worker. Not loadgroup: pytest-xdist
    3.8 writes the group into the node id by an attribute that pytest 9 no longer
    reads, so every test would be a unit of its own; see pytest_runtest_logreport.)"""
    known = seconds_per_file()
    order = {}
    for item in items:
        order.setdefault(module(item.nodeid), len(order))
    items.sort(key=lambda item: (-known.get(Path(module(item.nodeid)).name, UNKNOWN_SECONDS),
                                 order[module(item.nodeid)]))


def pytest_runtest_logreport(report):
    """On the controller: which worker ran each module. A module split over two
    workers starts its module-scoped daemons and engines twice."""
    worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", None)
    if worker and report.when == "call":
        WORKERS_OF_MODULE.setdefault(module(report.nodeid), set()).add(worker)


def split_modules():
    return {m: sorted(w) for m, w in WORKERS_OF_MODULE.items() if len(w) > 1}


def pytest_runtest_setup(item):
    os.environ["TANDEM_TEST"] = item.nodeid


def pytest_runtest_teardown(item):
    os.environ.pop("TANDEM_TEST", None)


# --- leftover processes -------------------------------------------------------

def boot_ticks_now():
    with open("/proc/uptime") as f:
        return float(f.read().split()[0]) * os.sysconf("SC_CLK_TCK")


def ours(exe):
    """Whether exe is a binary this suite runs: the engine's tools, tandem or Envoy."""
    name = os.path.basename(exe)
    return name.startswith("llama-") or name in ("tandem", "envoy")


def process(pid):
    """(ppid, start in ticks since boot, exe, environment, command line) of pid, or None
    when it is gone, a zombie or not this user's."""
    try:
        if os.stat(f"/proc/{pid}").st_uid != os.getuid():
            return None
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        env = dict(e.partition(b"=")[::2] for e in
                   Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if e)
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        return (int(stat[1]), int(stat[19]), os.readlink(f"/proc/{pid}/exe"), env,
                cmd.decode(errors="replace").strip())
    except (OSError, IndexError, ValueError):
        return None


def leftovers(since):
    """(pid, command line, who started it) of this run's processes still running: those
    that carry its TANDEM_TEST_RUN, and engines (whose environment tandem chooses) that
    are children of those or orphans."""
    run = os.environ["TANDEM_TEST_RUN"].encode()
    procs = {int(e): p for e in os.listdir("/proc")
             if e.isdigit() and int(e) != os.getpid() and (p := process(int(e)))}
    found = []
    for pid, (ppid, start, exe, env, cmd) in procs.items():
        if start < since or not ours(exe):
            continue
        if env.get(b"TANDEM_TEST_RUN") == run:
            found.append((pid, cmd, env.get(b"TANDEM_TEST", b"?").decode()))
            continue
        parent = procs.get(ppid)
        if os.path.basename(exe).startswith("llama-") and parent and \
                parent[3].get(b"TANDEM_TEST_RUN") == run:
            found.append((pid, cmd, "an engine of " + parent[3].get(b"TANDEM_TEST", b"?").decode()))
        elif os.path.basename(exe).startswith("llama-") and ppid == 1:
            found.append((pid, cmd, "an engine whose tandem is gone"))
    return found


def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workerinput"):
        return  # the controller looks once every worker is done
    report = session.config.get_terminal_writer()
    for name, workers in split_modules().items():
        report.line(f"\n{name} ran on {' and '.join(workers)}: a module must stay on one "
                    "worker (tests/e2e/suite.py)", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    since = session.config.stash[STARTED]
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    found = leftovers(since)
    while found and time.monotonic() < deadline:
        time.sleep(0.1)
        found = leftovers(since)
    if not found:
        return
    report.line(f"\nleftover processes: {len(found)} started by this run are still "
                "running; killed now:", red=True)
    for pid, cmd, test in found:
        report.line(f"  pid {pid}: {cmd[:300]}\n    started by {test}", red=True)
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
