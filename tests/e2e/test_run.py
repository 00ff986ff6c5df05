"""`tandem run`: one planned, supervised llama-server, for real.

Covers the engine-supervision contract that `tandem serve` builds on: the
plan's flags reach the engine (a whole-batch encoder answers), readiness, the
footprint is recorded, SIGTERM stops it cleanly, a crash is reported with its
signal, tandem's own death takes the child with it, and a model that does not
fit is refused before anything starts."""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import MODELS, PINS, fixture_path, http_unix

pytestmark = pytest.mark.quick  # in `make check` (docs/testing.md)

NOUL = {"state": "The disk is 97% full and the nightly backup failed.",
        "questions": {"urgent": {"type": "noul", "instructions": "Does this need action today?"}}}


class Run:
    """`tandem run MODEL ...` in the background, until it prints its socket."""

    def __init__(self, tandem_bin, model, tmp_path, *args):
        self.log = tmp_path / "engine.log"
        self.proc = subprocess.Popen([str(tandem_bin), "run", str(model), "--log", str(self.log),
                                      *map(str, args)], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("ready: "):
            self.proc.kill()
            raise AssertionError(f"no ready line: {line!r} {self.proc.stderr.read()}")
        _, where, _, pid, _, _ = line.split()
        assert where.startswith("unix:"), line
        self.socket = Path(where[len("unix:"):])
        self.pid = int(pid)

    def argv(self):
        return Path(f"/proc/{self.pid}/cmdline").read_bytes().split(b"\0")[:-1]

    def finish(self, timeout=30):
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, err


def gone(pid, within=5.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split()[2]
            if state == "Z":
                return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def test_runs_answers_records_and_stops_on_sigterm(tandem_bin, tmp_path):
    model = fixture_path("smollm2-decider.gguf")
    run = Run(tandem_bin, model, tmp_path, "--ctx", 2048)
    argv = run.argv()
    for flag in (b"-fit", b"-np", b"-fa", b"--no-repack", b"-lv"):
        assert flag in argv, argv
    assert argv[argv.index(b"-c") + 1] == b"2048" and argv[argv.index(b"-ngl") + 1] == b"0"
    assert b"--embeddings" not in argv and b"--pooling" not in argv
    status, body = http_unix("POST", run.socket, "/v1/systemone", NOUL)
    assert status == 200 and 0 <= body["answers"]["urgent"]["noul"] <= 1, body
    # a unix socket in a private folder, and no TCP port at all
    assert b"--port" not in argv and argv[argv.index(b"--host") + 1] == bytes(run.socket)
    assert run.socket.is_socket() and (run.socket.parent.stat().st_mode & 0o777) == 0o700
    # the footprint of exactly this run is in the cache now
    plan = json.loads(subprocess.run([str(tandem_bin), "plan", str(model), "--cpu", "--ctx", "2048",
                                      "--json"], capture_output=True, text=True, check=True).stdout)
    assert plan["models"][0]["sources"]["compute"] == "measured"
    run.proc.send_signal(signal.SIGTERM)
    rc, err = run.finish()
    assert rc == 0, err
    assert "stopping llama-server" in err and gone(run.pid)
    assert not run.socket.parent.exists(), "the run folder outlived tandem run"


def test_encoder_runs_at_its_window(tandem_bin, tmp_path):
    run = Run(tandem_bin, fixture_path("laya-tiny.gguf"), tmp_path)
    argv = run.argv()
    ctx = argv[argv.index(b"-c") + 1]
    assert argv[argv.index(b"-b") + 1] == ctx == argv[argv.index(b"-ub") + 1]
    status, body = http_unix("POST", run.socket, "/v1/systemone", NOUL)
    assert status == 200, body
    run.proc.send_signal(signal.SIGINT)
    assert run.finish()[0] == 0


def test_a_crash_is_reported_with_its_signal(tandem_bin, tmp_path):
    run = Run(tandem_bin, MODELS / PINS["SMOLLM2_GGUF"], tmp_path, "--ctx", 1024)
    os.kill(run.pid, signal.SIGKILL)
    rc, err = run.finish()
    assert rc == 1 and "killed by signal 9" in err and str(run.log) in err, err


def test_the_engine_dies_with_tandem(tandem_bin, tmp_path):
    run = Run(tandem_bin, MODELS / PINS["SMOLLM2_GGUF"], tmp_path, "--ctx", 1024)
    run.proc.kill()  # SIGKILL: tandem gets no chance to clean up
    run.proc.wait()
    assert gone(run.pid), "llama-server outlived tandem"


def test_a_model_that_does_not_fit_never_starts(tandem_bin, tmp_path):
    done = subprocess.run([str(tandem_bin), "run", str(fixture_path("kev-4b-shape.gguf")), "--cpu",
                           "--ram", "1GiB", "--log", str(tmp_path / "x.log")],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "does not fit" in done.stderr, done.stderr
    assert not (tmp_path / "x.log").exists()


def test_usage_errors(tandem_bin):
    done = subprocess.run([str(tandem_bin), "run"], capture_output=True, text=True)
    assert done.returncode == 2 and "usage" in done.stderr
    done = subprocess.run([str(tandem_bin), "run", "x.gguf", "--timeout", "soon"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "--timeout" in done.stderr
