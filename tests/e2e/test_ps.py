"""`tandem ps`, `tandem load` and `tandem unload` against a live daemon with
the two fixture deciders: ps's rows are checked against /v1/status, the admin
commands against the states they cause, and the exit codes against a daemon
that is not there or wants a key."""
import json
import os
import re
import subprocess
import urllib.request

import pytest
from conftest import free_port
from test_serve import A, B, choice, config, wait_for

pytestmark = pytest.mark.quick  # in `make check` (docs/testing.md)


def tandem(tandem_bin, *args, env=None):
    return subprocess.run([str(tandem_bin), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def status_with_key(s, key):
    req = urllib.request.Request(s.url + "/v1/status", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def state(s, key, name):
    return next(m["state"] for m in status_with_key(s, key)["models"] if m["name"] == name)


def test_ps_matches_status_and_load_unload_change_it(tandem_bin, serve_factory):
    s = serve_factory(config(extra="api_keys: [k-ps]"))
    key = {"TANDEM_API_KEY": "k-ps"}
    assert s.systemone(choice("warm"), headers={"Authorization": "Bearer k-ps"})[0] == 200

    run = tandem(tandem_bin, "ps", "--url", s.url, "--json", env=key)
    assert run.returncode == 0, run.stderr
    rows = json.loads(run.stdout)
    status = status_with_key(s, "k-ps")
    by_name = {m["name"]: m for m in status["models"]}
    assert [r["name"] for r in rows["models"]] == [m["name"] for m in status["models"]]
    for r in rows["models"]:
        m = by_name[r["name"]]
        assert (r["state"], r["device"], r["loads"], r["answered"]) == \
            (m["state"], m["device"], m["loads"], m["answered"])
        assert r["planned_bytes"] == m["planned"]["host_bytes"]
        assert r["cache"] == m["cache"]
    assert rows["cache"] == status["cache"] and rows["cache"]["misses"] == 1
    assert by_name[A]["state"] == "resident" and by_name[A]["answered"] == 1
    assert by_name[B]["state"] == "unloaded"
    assert rows["devices"] == status["budget"]["devices"]

    # the table: one line per model with its state and cache hits, then the budget, the
    # queue and the decision cache
    table = tandem(tandem_bin, "ps", "--config", str(s.config), env=key)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:3] == ["NAME", "STATE", "DEVICE"] and lines[0].split()[-1] == "CACHED"
    assert lines[1].split()[:3] == [A, "resident", "cpu"] and lines[1].split()[-1] == "0"
    assert lines[2].split()[:3] == [B, "unloaded", "cpu"]
    assert any(l.startswith("budget host: ") for l in lines)
    assert lines[-2].startswith("queue: 0 waiting")
    assert re.fullmatch(r"decision cache: 1 entries, \d+ B of 64\.0 MiB; 0 hits, 1 misses, "
                        r"0 coalesced, 0 evicted", lines[-1]), lines[-1]

    load = tandem(tandem_bin, "load", B, "--url", s.url, env=key)
    assert load.returncode == 0, load.stderr
    assert load.stdout.startswith(f"{B}: ")
    wait_for(lambda: state(s, "k-ps", B) == "resident")
    unload = tandem(tandem_bin, "unload", A, "--url", s.url, env=key)
    assert unload.returncode == 0, unload.stderr
    wait_for(lambda: state(s, "k-ps", A) == "unloaded")

    unknown = tandem(tandem_bin, "load", "no-such-model", "--url", s.url, env=key)
    assert unknown.returncode == 1 and "404" in unknown.stderr and "unknown model" in unknown.stderr
    no_key = tandem(tandem_bin, "ps", "--url", s.url, env={"TANDEM_API_KEY": ""})
    assert no_key.returncode == 1 and "401" in no_key.stderr


def test_ps_without_a_daemon_and_bad_usage(tandem_bin):
    url = f"http://127.0.0.1:{free_port()}"
    down = tandem(tandem_bin, "ps", "--url", url)
    assert down.returncode == 1 and f"cannot reach the daemon at {url}" in down.stderr
    assert tandem(tandem_bin, "load").returncode == 2
    assert tandem(tandem_bin, "unload", "a/b", "--url", url).returncode == 2
    assert tandem(tandem_bin, "load", "x", "--json").returncode == 2
    assert tandem(tandem_bin, "ps", "--url", url, "--config", "x.yaml").returncode == 2
    assert tandem(tandem_bin, "ps", "--help").returncode == 0
