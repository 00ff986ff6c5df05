"""Load progress: which source says how much of a model's weights the engine has read.

For each fixture model, with its file evicted from the page cache (cold) and then
cached (warm, as on every swap back), one llama-server is started with tandem's CPU
flags and sampled every 5 ms until it answers /health: the markers of its log
(`load_tensors:` starts the weights, `llama_context: constructing` ends them), its
/proc/<pid>/status RssFile (the file pages it has mapped in), and /proc/<pid>/io
read_bytes (storage reads) and rchar (read(2) bytes). The table gives, at the end of the
weights (the second marker), what each source says as a fraction of the file, each
counted from its value at the first marker, and how the engine's log reports progress.
A source is accurate when it reads 1.00 there, whether the file was cached or not.

The table replaces the "load-progress" section of --out (bench/mdsection.py).
Run: build/venv/bin/python bench/load_progress.py --out docs/benchmarks.md
"""
import argparse
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from conftest import ENGINE, fixture_path, free_port  # noqa: E402
from mdsection import replace_section  # noqa: E402

MARK_WEIGHTS, MARK_END = "load_tensors:", "llama_context: constructing"
MODELS = ["smollm2-decider", "gemma3-decider"]


def proc(pid):
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("RssFile:"))
    with open(f"/proc/{pid}/io") as f:
        io = dict(line.strip().split(": ") for line in f if ": " in line)
    return rss, int(io["read_bytes"]), int(io["rchar"])


def evict(path):
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def one_load(model, log_path):
    """Samples one load; returns (samples at the two markers, whether the log shows dots)."""
    port = free_port()
    argv = [str(ENGINE), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
            "-c", "2048", "-ngl", "0", "-fit", "off", "-np", "1", "-fa", "off", "--no-repack",
            "--device", "none", "-lv", "4", "--no-log-timestamps", "--no-log-prefix"]
    with open(log_path, "w") as log:
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    at, last = {}, None
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                sample = proc(p.pid)
            except (OSError, StopIteration):
                break
            text = Path(log_path).read_text(errors="replace")
            if MARK_WEIGHTS not in text:
                at[MARK_WEIGHTS] = sample  # the last sample before the weights
            elif MARK_END in text and MARK_END not in at:
                at[MARK_END] = sample
            last = sample
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=0.2) as r:
                    if r.status == 200 and MARK_END in at:
                        break
            except OSError:
                pass
            time.sleep(0.005)
    finally:
        p.terminate()
        p.wait()
    text = Path(log_path).read_text(errors="replace")
    weights = text.split(MARK_WEIGHTS, 1)[-1].split(MARK_END, 1)[0]
    return at, bool(re.search(r"\.{10,}", weights)), last


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    rows = []
    for name in MODELS:
        path = fixture_path(name + ".gguf")
        size = path.stat().st_size
        for cache in ("cold", "warm"):
            if cache == "cold":
                evict(path)
            at, dots, _ = one_load(path, f"/tmp/tandem-load-progress-{name}.log")
            (r0, b0, c0), (r1, b1, c1) = at[MARK_WEIGHTS], at[MARK_END]
            rows.append(f"| {name} | {size / 2**20:.0f} MiB | {cache} | {(r1 - r0) / size:.3f} "
                        f"| {(b1 - b0) / size:.3f} | {(c1 - c0) / size:.3f} | "
                        f"{'dots' if dots else 'none'} |")
            print(rows[-1], flush=True)
    body = ("Measured on this machine (CPU engine, mmap, tandem's flags) by "
            "`build/venv/bin/python bench/load_progress.py --out docs/benchmarks.md`. Each "
            "column is what a source says, at the end of the weights, as a fraction of the "
            "model file.\n\n"
            "| model | file | page cache | RssFile growth | read_bytes | rchar | engine log progress |\n"
            "|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
            "RssFile growth is the only source that ends near 1.00 both cold and warm (the rest "
            "of the file is its metadata and vocabulary, read before the weights); tandem uses it "
            "(`docs/serve.md`, Load progress). read_bytes counts only what came from storage, so "
            "a warm load reads 0; rchar sees no mmap; the engine's log prints no progress on "
            "these loads.")
    replace_section(args.out, "load-progress", "## Load progress: what each source measures", body)


if __name__ == "__main__":
    main()
