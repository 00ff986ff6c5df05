"""Attacks on tandem from another local user (issue 38), run for real as uid
65534 (`setpriv`, the tests run as root). Each test names the attack it
makes; a shared fixture at the top starts a daemon with its model loaded.

Engines (What to build 1): every engine listens only on a unix socket in a
private 0700 run folder, with its slot folder there too; no engine has a TCP
port, so there is no port to reach, guess or take first.

Private daemons (What to build 2): a forged readiness on the abstract notify
socket of `tandem decide --private` is ignored."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import http_unix
from test_pipeline import REQUEST, config as pipeline_config
from test_serve import A, choice, config

NOBODY = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]


def as_nobody(code, timeout=60):
    """Runs Python code as uid 65534; returns (exit status, stdout, stderr)."""
    p = subprocess.run(NOBODY + [sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout.strip(), p.stderr


def listening_tcp_inodes():
    """Socket inodes in TCP LISTEN state (0A), IPv4 and IPv6, from /proc/net."""
    inodes = set()
    for name in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A":
                inodes.add(f[9])
    return inodes


def socket_inodes(pid):
    out = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            m = re.fullmatch(r"socket:\[(\d+)\]", os.readlink(fd))
        except OSError:
            continue
        if m:
            out.add(m.group(1))
    return out


def engine_argv(pid):
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]


# the daemon's engines go under /tmp, where uid 65534 can create files too
PLAIN_TMP = {"XDG_RUNTIME_DIR": "", "TMPDIR": "/tmp"}


@pytest.fixture
def loaded(serve_factory):
    """A daemon serving the fixture model A, loaded by one answered request;
    returns (daemon, engine pid, engine socket path)."""
    s = serve_factory(config(), env=PLAIN_TMP)
    status, body, _ = s.systemone(choice("Disk 97% full; backup failed."))
    assert status == 200, body
    m = s.model(A)
    assert m["state"] == "resident" and m["socket"], m
    return s, m["pid"], Path(m["socket"])


# --- the engine reached directly ---------------------------------------------------------------

def test_engine_socket_is_private_to_tandems_user(loaded):
    s, pid, sock = loaded
    run = sock.parent
    assert sock.is_socket() and run.name.startswith("tandem-")
    st = run.stat()
    assert st.st_uid == os.geteuid() and (st.st_mode & 0o777) == 0o700, oct(st.st_mode)
    # tandem's own user reaches the engine: the socket is live, so the refusals below mean
    # something
    assert http_unix("GET", sock, "/health")[0] == 200
    # uid 65534 cannot connect (GET /props, POST /completion, slot saves all need that)
    rc, out, err = as_nobody(f"""
import errno, socket
s = socket.socket(socket.AF_UNIX)
try:
    s.connect({str(sock)!r})
    s.sendall(b'GET /props HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')
    print('connected', s.recv(64))
except OSError as e:
    print(errno.errorcode[e.errno])
""")
    assert out == "EACCES", (out, err)
    # nor list the run folder, nor put anything in it
    rc, out, err = as_nobody(f"""
import errno, os
for what in (lambda: os.listdir({str(run)!r}),
             lambda: open({str(run / 'x')!r}, 'w'),
             lambda: os.mkdir({str(run / 'y')!r})):
    try:
        what()
        print('allowed')
    except OSError as e:
        print(errno.errorcode[e.errno])
""")
    assert out.split() == ["EACCES"] * 3, (out, err)


def test_slot_files_cannot_be_written_through_the_engine(loaded):
    s, pid, sock = loaded
    argv = engine_argv(pid)
    slots = Path(argv[argv.index(b"--slot-save-path") + 1].decode())
    # the slot folder is inside the private run folder, not beside the model
    assert slots.parent == sock.parent and (slots.stat().st_mode & 0o777) == 0o700
    rc, out, err = as_nobody(f"""
import errno, json, socket
body = json.dumps({{"filename": "big.bin"}}).encode()
s = socket.socket(socket.AF_UNIX)
try:
    s.connect({str(sock)!r})
    s.sendall(b'POST /slots/0?action=save HTTP/1.1\\r\\nHost: x\\r\\nContent-Type: application/json\\r\\n'
              b'Content-Length: %d\\r\\n\\r\\n' % len(body) + body)
    print('sent', s.recv(64))
except OSError as e:
    print(errno.errorcode[e.errno])
""")
    assert out == "EACCES", (out, err)
    assert list(slots.iterdir()) == []


def test_no_engine_listens_on_a_tcp_port(loaded):
    s, pid, sock = loaded
    listening = listening_tcp_inodes()
    # the detector finds the daemon's own TCP listener (so it can find an engine's)
    assert socket_inodes(s.proc.pid) & listening, "the daemon's listener was not found"
    assert not socket_inodes(pid) & listening, "the engine has a listening TCP socket"
    argv = engine_argv(pid)
    assert b"--port" not in argv
    assert argv[argv.index(b"--host") + 1] == bytes(sock)
    assert argv[argv.index(b"--cors-origins") + 1] == b"none" and b"--no-cors-credentials" in argv


# --- the port bound first -----------------------------------------------------------------------

SQUAT = """
import os, socket, sys, time
held = []
for port in range(%(lo)d, %(hi)d):      # loopback ports an engine could have been given
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        s.listen(1)
        held.append(s)
    except OSError:
        s.close()
for i in range(200):                     # names like a run folder's, files and open folders
    name = "/tmp/tandem-sq%%04d" %% i
    try:
        if i %% 2:
            open(name, "w").close()
        else:
            os.mkdir(name, 0o777)
    except OSError:
        pass
print(len(held), flush=True)
time.sleep(600)
"""


def test_squatted_ports_and_names_do_not_stop_the_engines(serve_factory):
    lo, hi = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    hi = min(hi, lo + 800)
    squatter = subprocess.Popen(NOBODY + [sys.executable, "-c", SQUAT % {"lo": lo, "hi": hi}],
                                stdout=subprocess.PIPE, text=True)
    try:
        held = int(squatter.stdout.readline())
        assert held > 100, f"the squatter holds only {held} ports"
        s = serve_factory(config(), env=PLAIN_TMP)
        status, body, _ = s.systemone(choice("Disk 97% full; backup failed."))
        assert status == 200, (body, s.log()[-2000:])
        m = s.model(A)
        assert m["state"] == "resident" and m["loads"] == 1, m
        assert not Path(m["socket"]).parent.name.startswith("tandem-sq")
    finally:
        squatter.kill()
        squatter.wait()
        for i in range(200):
            p = Path(f"/tmp/tandem-sq{i:04d}")
            if p.is_dir():
                p.rmdir()
            elif p.exists():
                p.unlink()


def test_the_run_folder_goes_with_the_daemon(serve_factory):
    s = serve_factory(config(), env=PLAIN_TMP)
    assert s.systemone(choice("Disk 97% full; backup failed."))[0] == 200
    run = Path(s.model(A)["socket"]).parent
    assert run.is_dir()
    assert s.stop() == 0
    assert not run.exists(), "the run folder outlived the daemon"


# --- forged readiness of a private daemon ---------------------------------------------------------

# Runs as nobody: listens on a loopback port of its own, reads the victim's
# pid on stdin, watches /proc/net/unix for that process's private readiness
# socket (named after its pid: other tandems on the machine are left alone)
# and floods it with a READY=1 that points at the port, and records whatever
# connects (the key, the state).
FORGER = r"""
import json, select, signal, socket, sys, time
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
lst = socket.socket()
lst.bind(("127.0.0.1", 0))
lst.listen(64)
port = lst.getsockname()[1]
forged = f"READY=1\nSTATUS=serving on http://127.0.0.1:{port}\n".encode()
tx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
tx.setblocking(False)
seen, sent, conns, received = set(), 0, [], b""
print(port, flush=True)
prefix = f"@tandem-private-{int(sys.stdin.readline())}-"
deadline = time.time() + float(sys.argv[1])
while not stop and time.time() < deadline:
    with open("/proc/net/unix") as f:
        names = {l.split()[-1] for l in f if l.split()[-1].startswith(prefix)}
    seen |= names
    for name in names:
        for _ in range(8):
            try:
                tx.sendto(forged, "\0" + name[1:])
                sent += 1
            except OSError:
                break
    ready, _, _ = select.select([lst] + conns, [], [], 0.002)
    for s in ready:
        if s is lst:
            conns.append(lst.accept()[0])
            continue
        received += s.recv(65536)
        conns.remove(s)  # answer nothing: the victim fails at once instead of waiting
        s.close()
print(json.dumps({"seen": sorted(seen), "sent": sent, "received": received.decode("latin-1")}),
      flush=True)
"""


def test_forged_readiness_of_a_private_daemon_is_ignored(tandem_bin, tmp_path):
    """nobody floods `tandem decide --private`'s readiness socket with READY=1 and
    its own URL while the private daemon starts: decide still prints its real
    daemon's verdict, and the forger's listener receives nothing (no connection,
    no key, no state)."""
    key, secret = "k-forge-9f2c41", "SECRET-STATE-7d1e"
    cfg = tmp_path / "tandem.yaml"
    cfg.write_text(f"listen: 127.0.0.1:1\napi_keys: [{key}]\nlogs:\n  dir: {tmp_path}/logs\n"
                   + pipeline_config(tiny=True))
    req = tmp_path / "req.json"
    req.write_text(json.dumps({**REQUEST, "state": REQUEST["state"] + " " + secret}))
    forger = subprocess.Popen([*NOBODY, "/usr/bin/python3", "-c", FORGER, "600"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/")
    try:
        port = int(forger.stdout.readline())
        victim = subprocess.Popen([str(tandem_bin), "decide", "--config", str(cfg), "--pipeline",
                                   "ops", "--request", str(req), "--private"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        forger.stdin.write(f"{victim.pid}\n")
        forger.stdin.flush()
        t0 = time.monotonic()
        try:
            stdout, stderr = victim.communicate(timeout=300)
        finally:
            victim.kill()
        took = time.monotonic() - t0
    finally:
        forger.send_signal(signal.SIGTERM)
        out, _ = forger.communicate(timeout=30)
    attack = json.loads(out.strip().splitlines()[-1])
    # the attack really ran: it found the socket and sent to it
    assert attack["seen"] and attack["sent"] > 0, attack
    assert attack["received"] == "", f"the forger on port {port} got: {attack['received'][:500]}"
    assert victim.returncode == 0, stderr
    answer = json.loads(stdout)
    assert answer["verdict"] == "accepted" and answer["choice"] in REQUEST["candidates"]
    # decide waits up to 60 s for its daemon to stop, then kills it: a daemon whose
    # STOPPING=1 blocked on the flooded queue took exactly that long
    assert took < 30, f"decide took {took:.0f} s: its daemon did not stop when told"
