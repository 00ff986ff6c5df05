"""Processes and CPU shares from /proc, for the benchmarks (standard library only,
so that a benchmark using it also runs on a machine without the test venv)."""
import os
import time
from pathlib import Path


def cpu_seconds(pids):
    """utime + stime of the processes pids (their threads included), in seconds."""
    ticks = 0
    for p in pids:
        try:
            st = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(st[11]) + int(st[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def descendants(pid):
    """Every live process below pid, from /proc (ppid links)."""
    children = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def cmdline(pid):
    """The argv of process pid."""
    return Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")


def foreign_engines():
    """llama-server processes on this machine that this process tree did not start."""
    ours = set(descendants(os.getpid()))
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) not in ours:
            try:
                argv0 = (d / "cmdline").read_bytes().split(b"\0", 1)[0]
            except OSError:
                continue
            if argv0.endswith(b"llama-server"):
                found.append(int(d.name))
    return found


def cpu_snapshot():
    """(seconds, busy CPU ticks of the whole machine, CPU ticks of this process tree)."""
    f = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in f[:8])
    busy = user + nice + system + irq + softirq + steal
    ours = 0
    for pid in [os.getpid()] + descendants(os.getpid()):
        try:
            st = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ours += sum(int(x) for x in st[11:15])  # utime stime cutime cstime
    return time.monotonic(), busy, ours


def foreign_share(a, b):
    """The share of all CPUs used by processes outside this tree between two snapshots."""
    secs = b[0] - a[0]
    ticks = (b[1] - a[1]) - (b[2] - a[2])
    return max(0.0, ticks / (secs * os.sysconf("SC_CLK_TCK") * os.cpu_count())) if secs > 0 else 0.0


def tcp_argv(argv):
    """A copy of an engine child's argv that a bare llama-server can run beside it: tandem's
    engines listen on a unix socket in its private run folder (--host PATH.sock) and keep
    their slots there (--slot-save-path); the copy listens on 127.0.0.1:{port} and keeps
    no slot folder. Every flag that changes the computation stays as it is."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] == "--slot-save-path":
            i += 2
            continue
        out.append(argv[i])
        if argv[i] == "--host":
            out += ["127.0.0.1", "--port", "{port}"]
            i += 1
        i += 1
    return out
