#!/usr/bin/env python3
"""Benchmark: `tandem inspect` on a 4 GiB model reads the header, not the tensors.

Writes a sparse 4 GiB GGUF (real header and tensor table, four 1 GiB F32
tensors whose data is a hole in the file), then measures side by side in one
run, through getrusage of the child: wall time and page faults of
  - `tandem inspect` on a 4 KiB-header file with no tensors (the baseline: what
    the program itself costs),
  - `tandem inspect` on the 4 GiB file,
  - `tandem inspect --sha256` on the 4 GiB file (reads every byte, for contrast).
Bytes touched beyond the baseline, (faults - baseline faults) x 4 KiB, must be a
tiny fraction of the file. Writes docs/bench-inspect-large.md.
Usage: build/venv/bin/python bench/inspect_large.py [--tandem build/tandem] [--out FILE]
"""
import argparse
import datetime
import os
import resource
import subprocess
import tempfile
import time
from pathlib import Path

import gguf
import numpy as np

PAGE = os.sysconf("SC_PAGE_SIZE")
GIB = 1 << 30


def write_sparse_model(path, n_tensors=4, side=16384):
    """A GGUF whose tensor data is a hole: header written for real, then truncated to size."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(n_tensors)
    w.add_context_length(4096)
    w.add_embedding_length(side)
    w.add_head_count(32)
    for i in range(n_tensors):
        w.add_tensor_info(f"blk.{i}.ffn_up.weight", (side, side), np.dtype(np.float32),
                          side * side * 4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    data_start = -(-os.path.getsize(path) // 32) * 32  # the data section is 32-aligned
    size = data_start + n_tensors * side * side * 4
    os.truncate(path, size)
    return size


def write_tiny_model(path):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()


def measure(argv, runs=3):
    """Median wall time and page faults of the child over runs."""
    walls, faults = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.monotonic()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        walls.append(time.monotonic() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        faults.append((after.ru_minflt + after.ru_majflt) - (before.ru_minflt + before.ru_majflt))
    return sorted(walls)[len(walls) // 2], sorted(faults)[len(faults) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tandem", default="build/tandem")
    ap.add_argument("--out", default="docs/bench-inspect-large.md")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=".") as tmp:
        big, tiny = Path(tmp) / "big.gguf", Path(tmp) / "tiny.gguf"
        size = write_sparse_model(big)
        write_tiny_model(tiny)
        base = measure([args.tandem, "inspect", str(tiny)])
        head = measure([args.tandem, "inspect", str(big)])
        full = measure([args.tandem, "inspect", "--sha256", str(big)], runs=1)
    touched = max(0, head[1] - base[1]) * PAGE
    rows = [("inspect, tiny file (baseline)", base), ("inspect, 4 GiB file", head),
            ("inspect --sha256, 4 GiB file", full)]
    table = "\n".join(f"| {name} | {w * 1000:.1f} | {f} |" for name, (w, f) in rows)
    text = f"""# `tandem inspect` on a 4 GiB model

Measured {datetime.date.today()} on this machine ({os.cpu_count()} CPU cores, no GPU) with
`make bench` (runs `bench/inspect_large.py`). The model is a real GGUF header and tensor
table for four 1 GiB F32 tensors ({size / GIB:.2f} GiB file) whose data is a hole, so any
read of tensor data would show up as page faults.

| run | wall, median (ms) | page faults |
|---|---|---|
{table}

- Bytes touched beyond the baseline: **{touched / 1024:.0f} KiB** of a {size / GIB:.2f} GiB file
  (**{touched / size * 100:.5f}%**): inspect maps the file and parses only the header pages.
- Reading everything (`--sha256`) takes **{full[0] / head[0]:.0f}x** the time of inspecting.
"""
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
