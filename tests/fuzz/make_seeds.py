#!/usr/bin/env python3
"""Writes the GGUF fuzzer's seed corpus into DIR (deterministic).

Seeds: tiny valid files from the Python gguf package's writer covering every
value type, string arrays and several tensor types; the header of each real
test model and engine vocab file, cut to --max-len bytes; and the malformed
regression files from tests/data/gguf.
Usage: make_seeds.py DIR [--max-len N]
"""
import argparse
import shutil
import sys
from pathlib import Path

import gguf
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from conftest import ENGINE, MODELS  # noqa: E402


def tiny(path, alignment=None, tensors=True):
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_uint8("t.u8", 7)
    w.add_int8("t.i8", -7)
    w.add_uint16("t.u16", 700)
    w.add_int16("t.i16", -700)
    w.add_uint32("t.u32", 70000)
    w.add_int32("t.i32", -70000)
    w.add_uint64("t.u64", 1 << 40)
    w.add_int64("t.i64", -(1 << 40))
    w.add_float32("t.f32", 2.35)
    w.add_float64("t.f64", 1e-9)
    w.add_bool("t.bool", True)
    w.add_string("general.name", "seed")
    w.add_array("t.strs", ["A", "B", "<|box_end|>"])
    w.add_array("t.ints", [1, 2, 3])
    w.add_array("t.floats", [0.5, 1.5])
    w.add_block_count(2)
    w.add_head_count(4)
    if tensors:
        w.add_tensor("blk.0.attn_q.weight", np.ones((4, 32), dtype=np.float32))
        w.add_tensor("token_embd.weight", np.zeros((2, 64), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--max-len", type=int, default=1 << 18)
    args = ap.parse_args()
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    tiny(out / "tiny.gguf")
    tiny(out / "tiny-align64.gguf", alignment=64)
    tiny(out / "tiny-notensors.gguf", tensors=False)
    real = sorted(MODELS.glob("*.gguf")) + sorted((ENGINE.parent.parent / "src" / "models").glob("*.gguf"))
    for path in real:
        with open(path, "rb") as f:
            (out / f"head-{path.name}").write_bytes(f.read(args.max_len))
    for path in sorted((ROOT / "tests" / "data" / "gguf").glob("*.gguf")):
        shutil.copy(path, out / f"bad-{path.name}")
    print(f"make_seeds: {len(list(out.iterdir()))} seeds in {out}")


if __name__ == "__main__":
    main()
