"""Real attacks on tandem from a second local user (uid 65534, `nobody`,
through setpriv), and from the process list and the environment
(docs/security.md)."""
import json
import signal
import subprocess

from test_pipeline import REQUEST, config as pipeline_config

AS_NOBODY = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]

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
                   + pipeline_config())
    req = tmp_path / "req.json"
    req.write_text(json.dumps({**REQUEST, "state": REQUEST["state"] + " " + secret}))
    forger = subprocess.Popen([*AS_NOBODY, "/usr/bin/python3", "-c", FORGER, "600"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/")
    try:
        port = int(forger.stdout.readline())
        victim = subprocess.Popen([str(tandem_bin), "decide", "--config", str(cfg), "--pipeline",
                                   "ops", "--request", str(req), "--private"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        forger.stdin.write(f"{victim.pid}\n")
        forger.stdin.flush()
        try:
            stdout, stderr = victim.communicate(timeout=300)
        finally:
            victim.kill()
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
