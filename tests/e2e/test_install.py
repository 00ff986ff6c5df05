"""`make install` and `make uninstall` into a DESTDIR (docs/install.md).

The install copies the binary under test (INSTALL_BIN, so nothing is rebuilt) and
the pinned engine from the cache. The installed tandem must then find that engine
beside itself (<prefix>/libexec/tandem/, through /proc/self/exe) with no cache and
no TANDEM_LLAMA_SERVER, which is why `tandem doctor` runs with HOME pointing at an
empty folder; doctor fails only on the engine, so empty model and GPU checks still
let it pass. A DESTDIR tree runs in place because the lookup is relative to the
binary.
"""
import filecmp
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import PINS, ROOT, SANITIZER_REPORT, cache_root

pytestmark = pytest.mark.quick  # in `make check` (docs/testing.md)

PREFIX = "/usr/local"

# What `make install PREFIX=/usr/local` writes, relative to DESTDIR.
FILES = {
    "usr/local/bin/tandem",
    "usr/local/libexec/tandem/llama-server",
    "usr/local/libexec/tandem/llama-quantize",
    "usr/local/libexec/tandem/llama-imatrix",
    "usr/local/libexec/tandem/BUILD-INFO",
    "usr/local/lib/systemd/system/tandem.service",
    "usr/local/share/doc/tandem/serve.md",
    "usr/local/share/doc/tandem/config.md",
    "usr/local/share/doc/tandem/examples/tandem.yaml",
    "usr/local/etc/tandem/tandem.yaml",
}

# The shared folders install creates under an empty DESTDIR and uninstall leaves.
SHARED_DIRS = {
    "usr", "usr/local", "usr/local/bin", "usr/local/etc", "usr/local/lib",
    "usr/local/lib/systemd", "usr/local/lib/systemd/system", "usr/local/libexec",
    "usr/local/share", "usr/local/share/doc",
}


def make(target, dest, *extra, tandem_bin, engine_dir):
    """Runs `make TARGET` in the repository root into DESTDIR dest, with the
    binary under test and the cache's engine; returns the CompletedProcess."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), target, f"DESTDIR={dest}",
         f"PREFIX={PREFIX}", f"INSTALL_BIN={Path(tandem_bin).resolve()}",
         f"ENGINE_DIR={engine_dir}", *extra],
        capture_output=True, text=True, timeout=120, env=env)


def tree(dest):
    """(files, folders) under dest, as paths relative to it."""
    files, dirs = set(), set()
    for p in dest.rglob("*"):
        (dirs if p.is_dir() and not p.is_symlink() else files).add(str(p.relative_to(dest)))
    return files, dirs


def clean_env(home):
    """Only PATH and an empty HOME (plus the sanitizer settings of `make asan`): no
    TANDEM_LLAMA_SERVER, TANDEM_CACHE or XDG_CACHE_HOME, so the cache is out of reach."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
    env.update({k: v for k, v in os.environ.items() if k in ("ASAN_OPTIONS", "UBSAN_OPTIONS")})
    return env


@pytest.fixture(scope="session")
def engine_dir(engine_path):
    return engine_path.parent.parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory, tandem_bin, engine_dir):
    dest = tmp_path_factory.mktemp("destdir")
    out = make("install", dest, tandem_bin=tandem_bin, engine_dir=engine_dir)
    assert out.returncode == 0, out.stdout + out.stderr
    return dest


def test_install_lays_out_bin_engine_unit_and_config(installed, tandem_bin, engine_dir):
    files, dirs = tree(installed)
    assert files == FILES
    assert dirs == SHARED_DIRS | {"usr/local/libexec/tandem", "usr/local/share/doc/tandem",
                                  "usr/local/share/doc/tandem/examples", "usr/local/etc/tandem"}
    lib = installed / "usr/local/libexec/tandem"
    assert filecmp.cmp(installed / "usr/local/bin/tandem", Path(tandem_bin).resolve(), shallow=False)
    for name in ("llama-server", "llama-quantize", "llama-imatrix"):
        assert filecmp.cmp(lib / name, engine_dir / "bin" / name, shallow=False)
        assert os.access(lib / name, os.X_OK)
    assert os.access(installed / "usr/local/bin/tandem", os.X_OK)
    example = (ROOT / "examples/tandem.yaml").read_bytes()
    assert (installed / "usr/local/etc/tandem/tandem.yaml").read_bytes() == example
    assert (installed / "usr/local/share/doc/tandem/examples/tandem.yaml").read_bytes() == example
    assert "backend=" in (lib / "BUILD-INFO").read_text()


def test_the_unit_names_the_installed_paths(installed):
    text = (installed / "usr/local/lib/systemd/system/tandem.service").read_text()
    assert not re.search(r"@[A-Z_]+@", text), "a placeholder was left unreplaced"
    assert (f"\nExecStart={PREFIX}/bin/tandem serve --config {PREFIX}/etc/tandem/tandem.yaml\n"
            in text)
    assert f"\nDocumentation=file://{PREFIX}/share/doc/tandem/serve.md\n" in text
    assert "\nType=notify\n" in text and "\nWantedBy=multi-user.target\n" in text
    # every path the unit names exists in the installed tree
    for path in (f"{PREFIX}/bin/tandem", f"{PREFIX}/etc/tandem/tandem.yaml",
                 f"{PREFIX}/share/doc/tandem/serve.md"):
        assert (installed / path.lstrip("/")).is_file(), path


@pytest.mark.skipif(not shutil.which("systemd-analyze"),
                    reason="systemd-analyze is missing (scripts/install-deps.sh installs systemd)")
def test_the_unit_is_rated_ok_by_systemd_analyze_security(installed):
    """The installed unit (placeholders replaced), rated offline: exposure at
    most 2.5 ("OK"), with the hardening that the rating alone would not demand."""
    unit = installed / "usr/local/lib/systemd/system/tandem.service"
    out = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", str(unit)],
                         capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for tandem\.service: (\d+\.\d+) (\w+)", out.stdout)
    assert m, out.stdout + out.stderr
    assert float(m.group(1)) <= 2.5 and m.group(2) == "OK", out.stdout
    text = unit.read_text()
    for line in ("CapabilityBoundingSet=", "SystemCallFilter=@system-service", "UMask=0077",
                 "LimitNOFILE=65536", "RuntimeDirectoryMode=0700", "IPAddressAllow=localhost",
                 "MemoryDenyWriteExecute=yes", "PrivateDevices=yes"):
        assert f"\n{line}\n" in text, line


def test_the_installed_engine_needs_no_library_path(installed):
    """The engine is a static build: no RPATH or RUNPATH (or only $ORIGIN), and every
    library it needs resolves from the system, none from the cache or the build."""
    engine = installed / "usr/local/libexec/tandem/llama-server"
    dyn = subprocess.run(["readelf", "-d", str(engine)], capture_output=True, text=True,
                         check=True).stdout
    for m in re.finditer(r"\((?:RPATH|RUNPATH)\)\s+Library r(?:un)?path: \[(.*)\]", dyn):
        assert all(p.startswith("$ORIGIN") for p in m.group(1).split(":")), m.group(0)
    assert not re.search(r"NEEDED.*\[lib(llama|ggml)", dyn), "llama/ggml must be linked in"
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    ldd = subprocess.run(["ldd", str(engine)], capture_output=True, text=True, env=env)
    assert ldd.returncode == 0, ldd.stdout + ldd.stderr
    assert "not found" not in ldd.stdout, ldd.stdout
    for resolved in re.findall(r"=> (/\S+)", ldd.stdout):
        assert not resolved.startswith((str(cache_root()), str(ROOT))), resolved


def test_the_installed_tandem_finds_its_engine_without_the_cache(installed, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    engine = installed / "usr/local/libexec/tandem/llama-server"
    tandem = installed / "usr/local/bin/tandem"
    link = tmp_path / "elsewhere" / "tandem"  # /proc/self/exe sees through symlinks
    link.parent.mkdir()
    link.symlink_to(tandem)
    for binary in (tandem, link):
        out = subprocess.run([str(binary), "doctor"], capture_output=True, text=True,
                             timeout=60, env=clean_env(home))
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"engine   ok    {engine} (from libexec)\n" in out.stdout
        assert (f"llama.cpp build {PINS['ENGINE_BUILD']}, commit {PINS['ENGINE_COMMIT']}"
                in out.stdout)
        assert f"models   warn  {home}/.cache/tandem/models: no GGUF models yet" in out.stdout
        assert out.stdout.rstrip().endswith("doctor: ready")
        assert not SANITIZER_REPORT.search(out.stderr), out.stderr
    out = subprocess.run([str(tandem), "--version"], capture_output=True, text=True,
                         timeout=60, env=clean_env(home))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[2] == (f"engine (in use): llama.cpp build {PINS['ENGINE_BUILD']}, "
                                          f"commit {PINS['ENGINE_COMMIT']}, at {engine}")


def test_the_flag_and_variable_still_win_over_the_installed_engine(installed, tmp_path):
    other = tmp_path / "llama-server"
    other.write_text("#!/bin/sh\necho 'version: 0.4.0 (build 9000, commit 0123abc)' >&2\n")
    other.chmod(0o755)
    env = {**clean_env(tmp_path), "TANDEM_LLAMA_SERVER": str(other)}
    out = subprocess.run([str(installed / "usr/local/bin/tandem"), "doctor"], capture_output=True,
                         text=True, timeout=60, env=env)
    assert out.returncode == 1
    assert f"engine   FAIL  {other} (from TANDEM_LLAMA_SERVER)" in out.stdout


def test_uninstall_removes_everything_it_installed(tmp_path, tandem_bin, engine_dir):
    dest = tmp_path / "dest"
    out = make("install", dest, tandem_bin=tandem_bin, engine_dir=engine_dir)
    assert out.returncode == 0, out.stdout + out.stderr
    out = make("uninstall", dest, tandem_bin=tandem_bin, engine_dir=engine_dir)
    assert out.returncode == 0, out.stdout + out.stderr
    files, dirs = tree(dest)
    assert files == set()
    assert dirs == SHARED_DIRS, "only the empty shared folders stay"


def test_a_changed_config_survives_install_and_uninstall(tmp_path, tandem_bin, engine_dir):
    dest = tmp_path / "dest"
    conf = dest / "usr/local/etc/tandem/tandem.yaml"
    conf.parent.mkdir(parents=True)
    conf.write_text("listen: 127.0.0.1:9999\n")
    out = make("install", dest, tandem_bin=tandem_bin, engine_dir=engine_dir)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"kept the existing {conf}" in out.stdout
    assert conf.read_text() == "listen: 127.0.0.1:9999\n"
    out = make("uninstall", dest, tandem_bin=tandem_bin, engine_dir=engine_dir)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"kept {conf}: it differs from the example" in out.stdout
    files, dirs = tree(dest)
    assert files == {"usr/local/etc/tandem/tandem.yaml"}
    assert dirs == SHARED_DIRS | {"usr/local/etc/tandem"}


def test_install_without_an_engine_points_at_make_deps(tmp_path, tandem_bin):
    dest = tmp_path / "dest"
    out = make("install", dest, tandem_bin=tandem_bin, engine_dir=tmp_path / "no-engine")
    assert out.returncode != 0
    assert f"no engine at {tmp_path}/no-engine/bin/llama-server: run `make deps` first" in out.stderr
    assert not dest.exists(), "nothing is installed without the engine"
