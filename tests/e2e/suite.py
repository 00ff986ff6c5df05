"""How the end-to-end suite runs on a small machine (docs/testing.md).

conftest.py takes these hooks; nothing here is a test.

- Markers: `alone` marks a test that times something or needs every core;
  `make e2e` runs those after the others, one at a time, on an idle machine.
  `quick` marks the tests of `make check`.
- Scheduling under pytest-xdist (`--dist loadgroup`): a module is one group,
  so its module-scoped daemons and engines start once, on one worker. Groups
  go out longest first, by the seconds in tests/e2e/durations.json, so that
  the slowest files do not start last.
- Each worker runs on one CPU of its own (its affinity mask), and so does
  every process it starts: tandem's placement and the engines it starts see
  one CPU and run one thread, and engines of different workers never spin
  against each other for a core.
- Every test exports TANDEM_TEST (its node id) to what it starts, and the
  session ends by looking for `llama-*`, `tandem` or `envoy` processes that
  a test started and left running: it names each with the test that started it,
  kills it, and fails the run.
"""
import json
import os
import signal
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
DURATIONS = HERE / "durations.json"
UNKNOWN_SECONDS = 30.0  # a file durations.json does not know yet goes out early
LEFTOVER_GRACE_S = 5.0  # a child that was just sent SIGTERM may take this long to go


def pytest_configure(config):
    config.addinivalue_line("markers", "alone: runs after the parallel part, on an idle "
                                       "machine (it times something or needs every core)")
    config.addinivalue_line("markers", "quick: part of `make check` (docs/testing.md)")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        pin_to_one_cpu(int(worker.removeprefix("gw")))
    config.stash[STARTED] = boot_ticks_now()


STARTED = pytest.StashKey[float]()


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


def pytest_collection_modifyitems(config, items):
    """One xdist group per module, the longest modules first."""
    known = seconds_per_file()

    def module(item):
        return item.nodeid.split("::")[0]

    def seconds(item):
        return known.get(Path(module(item)).name, UNKNOWN_SECONDS)

    for item in items:
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(module(item)))
    order = {}
    for item in items:
        order.setdefault(module(item), len(order))
    items.sort(key=lambda item: (-seconds(item), order[module(item)]))


def pytest_runtest_setup(item):
    os.environ["TANDEM_TEST"] = item.nodeid


def pytest_runtest_teardown(item):
    os.environ.pop("TANDEM_TEST", None)


# --- leftover processes -------------------------------------------------------

def boot_ticks_now():
    with open("/proc/uptime") as f:
        return float(f.read().split()[0]) * os.sysconf("SC_CLK_TCK")


def started_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def ours(exe):
    """Whether exe is a binary this suite runs: the engine's tools, tandem or Envoy."""
    name = os.path.basename(exe)
    return name.startswith("llama-") or name in ("tandem", "envoy")


def leftovers(since):
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
            if os.stat(f"/proc/{pid}").st_uid != os.getuid() or not ours(exe):
                continue
            if started_ticks(pid) < since:
                continue
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        except OSError:
            continue  # gone, or a zombie
        test = next((e[len(b"TANDEM_TEST="):].decode() for e in env
                     if e.startswith(b"TANDEM_TEST=")), None)
        found.append((pid, cmd.strip(), test))
    return found


def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workerinput"):
        return  # the controller looks once every worker is done
    since = session.config.stash[STARTED]
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    found = leftovers(since)
    while found and time.monotonic() < deadline:
        time.sleep(0.1)
        found = leftovers(since)
    if not found:
        return
    report = session.config.get_terminal_writer()
    report.line(f"\nleftover processes: {len(found)} started by this run are still "
                "running; killed now:", red=True)
    for pid, cmd, test in found:
        report.line(f"  pid {pid}: {cmd[:300]}\n    started by "
                    f"{test or 'an unknown test (an engine: see its tandem)'}", red=True)
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
