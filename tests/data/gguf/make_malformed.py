#!/usr/bin/env python3
"""Generates the malformed-GGUF corpus that tests/test_gguf.c replays.

Each case writes NAME.gguf and NAME.expected: the exact one-line message the
reader must produce when it is opened as "tests/data/gguf/NAME.gguf" (the
path the unit test passes, relative to the repository root). Offsets in the
messages are recorded while the bytes are built, so the script is the spec.

Pure stdlib and deterministic: run it from anywhere, commit its output.
    python3 tests/data/gguf/make_malformed.py
"""
import os
import struct
import sys

PREFIX = "tests/data/gguf"

# GGUF value types and the ggml types used below
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
T_F32, T_Q4_K, T_F64 = 0, 12, 28


class B:
    """A GGUF byte builder; every writer returns the offset it wrote at."""

    def __init__(self):
        self.data = bytearray()

    def raw(self, b):
        off = len(self.data)
        self.data += b
        return off

    def u32(self, v):
        return self.raw(struct.pack("<I", v))

    def u64(self, v):
        return self.raw(struct.pack("<Q", v))

    def i64(self, v):
        return self.raw(struct.pack("<q", v))

    def string(self, s):
        b = s.encode() if isinstance(s, str) else s
        off = self.u64(len(b))
        self.raw(b)
        return off

    def header(self, n_tensors, n_kv, version=3, magic=b"GGUF"):
        self.raw(magic)
        self.u32(version)
        self.u64(n_tensors)
        self.u64(n_kv)
        return self

    def kv_u32(self, key, v):
        off = self.string(key)
        self.u32(U32)
        self.u32(v)
        return off

    def kv_u8(self, key, v):
        off = self.string(key)
        self.u32(U8)
        self.raw(bytes([v]))
        return off

    def tensor(self, name, ne, ggml_type, offset):
        """Writes a tensor info; returns (info offset, offset-field offset)."""
        off = self.string(name)
        self.u32(len(ne))
        for n in ne:
            self.i64(n)
        self.u32(ggml_type)
        return off, self.u64(offset)

    def pad_to(self, alignment):
        while len(self.data) % alignment:
            self.data.append(0)
        return len(self.data)

    def zeros(self, n):
        return self.raw(bytes(n))


def tensor_file(infos, data_bytes, kvs=(), alignment=32):
    """A header with the given (key, u32) pairs and tensor infos, padded to
    alignment, followed by data_bytes zero bytes.
    Returns (builder, [(info offset, offset-field offset)])."""
    b = B().header(len(infos), len(kvs))
    for k, v in kvs:
        b.kv_u32(k, v)
    marks = [b.tensor(*i) for i in infos]
    b.pad_to(alignment)
    b.zeros(data_bytes)
    return b, marks


CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


@case
def empty():
    return B(), 'offset 0: expected magic "GGUF" (4 bytes), found end of file'


@case
def bad_magic():
    return B().header(0, 0, magic=b"GGML"), 'offset 0: expected magic "GGUF", found "GGML"'


@case
def bad_magic_binary():
    return (B().header(0, 0, magic=b"\x00\xffG'"),
            'offset 0: expected magic "GGUF", found "\\x00\\xffG\\x27"')


@case
def version_0():
    return B().header(0, 0, version=0), "offset 4: expected version 2 or 3, found 0"


@case
def version_1():
    return (B().header(0, 0, version=1),
            "offset 4: expected version 2 or 3, found 1 (GGUFv1 is no longer supported)")


@case
def version_4():
    return B().header(0, 0, version=4), "offset 4: expected version 2 or 3, found 4"


@case
def version_byteswapped():
    return (B().header(0, 0, version=0x03000000),
            "offset 4: expected version 2 or 3, found 50331648"
            " (0x03000000: a file of the other byte order?)")


@case
def truncated_header():
    b = B()
    b.raw(b"GGUF")
    b.u32(3)
    b.u64(0)
    b.raw(b"\x00\x00\x00")
    return b, "offset 16: expected key/value count (8 bytes), found only 3 bytes"


@case
def truncated_version():
    b = B()
    b.raw(b"GGUF\x03")
    return b, "offset 4: expected version (4 bytes), found only 1 byte"


@case
def tensor_count_huge():
    b = B().header(1 << 60, 0)
    b.zeros(100)
    return b, ("offset 8: expected a tensor count of at most 3 (tensor infos of 32+ bytes"
               " in the 100 bytes after the header), found 1152921504606846976")


@case
def kv_count_huge():
    b = B().header(0, 1 << 60)
    return b, ("offset 16: expected a key/value count of at most 0 (key/value pairs of 14+"
               " bytes in the 0 bytes after the header), found 1152921504606846976")


@case
def key_length_past_eof():
    b = B().header(0, 1)
    off = b.u64(1000)
    b.raw(b"general.ar")
    return b, (f"offset {off}: key 0: expected a key of 1000 bytes,"
               " found only 10 bytes before end of file")


@case
def key_truncated_length():
    b = B().header(0, 2)
    b.string("general.name")
    b.u32(STR)
    b.string("a twenty byte string")
    off = b.zeros(4)
    return b, f"offset {off}: key 1: expected key length (8 bytes), found only 4 bytes"


@case
def empty_key():
    b = B().header(0, 1)
    off = b.string("")
    b.u32(U8)
    b.zeros(2)
    return b, f"offset {off}: key 0: expected a non-empty key, found length 0"


@case
def unknown_value_type():
    b = B().header(0, 1)
    b.string("a.b")
    off = b.u32(17)
    b.zeros(8)
    return b, f"offset {off}: key 'a.b': expected a value type 0..12, found 17"


@case
def value_truncated():
    b = B().header(0, 1)
    b.string("x.count")
    b.u32(U32)
    off = b.raw(b"\x01\x02")
    return b, f"offset {off}: key 'x.count': expected UINT32 value (4 bytes), found only 2 bytes"


@case
def string_length_past_eof():
    b = B().header(0, 1)
    b.string("s")
    b.u32(STR)
    off = b.u64(1 << 20)
    b.raw(b"abc")
    return b, (f"offset {off}: key 's': expected a string of 1048576 bytes,"
               " found only 3 bytes before end of file")


@case
def string_too_long():
    b = B().header(0, 1)
    b.string("s")
    b.u32(STR)
    off = b.u64(1 << 31)
    b.raw(b"abc")
    return b, (f"offset {off}: key 's': expected a string of at most 1073741824 bytes,"
               " found length 2147483648")


@case
def array_count_huge():
    b = B().header(0, 1)
    b.string("arr")
    b.u32(ARR)
    b.u32(U32)
    off = b.u64(1 << 40)
    b.zeros(8)
    return b, (f"offset {off}: key 'arr': expected at most 1073741824 array elements,"
               " found 1099511627776")


@case
def array_count_past_eof():
    b = B().header(0, 1)
    b.string("arr")
    b.u32(ARR)
    b.u32(U32)
    off = b.u64(1000)
    b.zeros(8)
    return b, (f"offset {off}: key 'arr': expected at most 2 UINT32 elements in the 8 bytes"
               " left, found count 1000")


@case
def string_array_count_past_eof():
    b = B().header(0, 1)
    b.string("tokens")
    b.u32(ARR)
    b.u32(STR)
    off = b.u64(5)
    b.string("ab")
    b.string("c")
    return b, (f"offset {off}: key 'tokens': expected at most 2 STRING elements in the 19"
               " bytes left, found count 5")


@case
def string_array_element_past_eof():
    b = B().header(0, 1)
    b.string("tokens")
    b.u32(ARR)
    b.u32(STR)
    b.u64(3)
    b.string("ab")
    off = b.u64(500)
    b.zeros(10)
    return b, (f"offset {off}: key 'tokens': expected a string element 1 of 500 bytes,"
               " found only 10 bytes before end of file")


@case
def nested_array():
    b = B().header(0, 1)
    b.string("nest")
    b.u32(ARR)
    off = b.u32(ARR)
    b.u64(1)
    b.u32(U8)
    b.u64(1)
    b.zeros(1)
    return b, (f"offset {off}: key 'nest': expected an array element type other than ARRAY"
               " (nested arrays are not supported), found ARRAY")


@case
def array_unknown_element_type():
    b = B().header(0, 1)
    b.string("arr")
    b.u32(ARR)
    off = b.u32(13)
    b.u64(0)
    return b, f"offset {off}: key 'arr': expected an array element type 0..12, found 13"


@case
def duplicate_key():
    b = B().header(0, 3)
    first = b.kv_u8("general.name", 1)
    b.kv_u8("other", 2)
    off = b.kv_u8("general.name", 3)
    return b, (f"offset {off}: key 2: expected a new key, found duplicate 'general.name'"
               f" (first at offset {first})")


@case
def key_with_control_bytes():
    b = B().header(0, 1)
    b.string(b"bad\nkey")
    off = b.u32(99)
    b.zeros(4)
    return b, f"offset {off}: key 'bad\\x0akey': expected a value type 0..12, found 99"


@case
def alignment_not_power_of_two():
    b = B().header(0, 1)
    b.string("general.alignment")
    b.u32(U32)
    off = b.u32(48)
    return b, f"offset {off}: key 'general.alignment': expected a power of two, found 48"


@case
def alignment_zero():
    b = B().header(0, 1)
    b.string("general.alignment")
    b.u32(U32)
    off = b.u32(0)
    return b, f"offset {off}: key 'general.alignment': expected a power of two, found 0"


@case
def alignment_wrong_type():
    b = B().header(0, 1)
    b.string("general.alignment")
    off = b.u32(U64)
    b.u64(32)
    return b, f"offset {off}: key 'general.alignment': expected type UINT32, found UINT64"


@case
def tensor_name_too_long():
    b = B().header(1, 0)
    name = "blk.0." + "x" * 58  # 64 bytes
    off, _ = b.tensor(name, [4], T_F32, 0)
    b.pad_to(32)
    b.zeros(16)
    return b, f"offset {off}: tensor 0: expected a name of at most 63 bytes, found 64 bytes"


@case
def tensor_name_past_eof():
    b = B().header(1, 0)
    off = b.u64(200)
    b.zeros(40)
    return b, (f"offset {off}: tensor 0: expected a tensor name of 200 bytes,"
               " found only 40 bytes before end of file")


@case
def n_dims_0():
    b = B().header(1, 0)
    b.string("t")
    off = b.u32(0)
    b.zeros(40)
    return b, f"offset {off}: tensor 't': expected 1 to 4 dimensions, found 0"


@case
def n_dims_5():
    b = B().header(1, 0)
    b.string("t")
    off = b.u32(5)
    b.zeros(60)
    return b, f"offset {off}: tensor 't': expected 1 to 4 dimensions, found 5"


@case
def negative_ne():
    b = B().header(1, 0)
    b.string("t")
    b.u32(2)
    b.i64(4)
    off = b.i64(-5)
    b.u32(T_F32)
    b.u64(0)
    b.zeros(16)
    return b, f"offset {off}: tensor 't': expected a non-negative size of dimension 1, found -5"


@case
def unknown_tensor_type():
    b = B().header(1, 0)
    b.string("t")
    b.u32(1)
    b.i64(4)
    off = b.u32(99)
    b.u64(0)
    b.zeros(16)
    return b, f"offset {off}: tensor 't': expected a ggml type below 43, found 99"


@case
def retired_tensor_type():
    b = B().header(1, 0)
    b.string("t")
    b.u32(1)
    b.i64(32)
    off = b.u32(4)
    b.u64(0)
    b.zeros(32)
    return b, f"offset {off}: tensor 't': expected a supported ggml type, found retired type 4"


@case
def ne0_not_divisible():
    b = B().header(1, 0)
    b.string("blk.0.ffn_up.weight")
    b.u32(2)
    b.i64(100)
    b.i64(2)
    off = b.u32(T_Q4_K)
    b.u64(0)
    b.zeros(300)
    return b, (f"offset {off}: tensor 'blk.0.ffn_up.weight': expected ne[0] to be a multiple"
               " of 256 (the Q4_K block size), found 100")


@case
def element_count_overflow():
    b = B().header(1, 0)
    b.string("t")
    b.u32(2)
    off = b.i64(1 << 62)
    b.i64(4)
    b.u32(T_F32)
    b.u64(0)
    b.zeros(16)
    return b, (f"offset {off}: tensor 't': expected at most 9223372036854775807 elements,"
               " found shape (4611686018427387904, 4)")


@case
def byte_size_overflow():
    b = B().header(1, 0)
    b.string("t")
    b.u32(1)
    b.i64(1 << 62)
    off = b.u32(T_F64)
    b.u64(0)
    b.zeros(16)
    return b, (f"offset {off}: tensor 't': expected a size below 2^64 bytes,"
               " found F64 of shape (4611686018427387904)")


@case
def tensor_info_truncated():
    b = B().header(1, 0)
    b.string("blk.0.attn_norm.weight")
    b.u32(1)
    b.i64(4)
    b.u32(T_F32)
    off = b.raw(b"\x00\x00")
    return b, (f"offset {off}: tensor 'blk.0.attn_norm.weight': expected data offset"
               " (8 bytes), found only 2 bytes")


@case
def misaligned_tensor_offset():
    b, marks = tensor_file([("a", [4], T_F32, 0), ("b", [4], T_F32, 16)], 64)
    return b, (f"offset {marks[1][1]}: tensor 'b': expected a data offset that is a multiple"
               " of 32, found 16")


@case
def misaligned_with_alignment_64():
    b, marks = tensor_file([("a", [4], T_F32, 0), ("b", [4], T_F32, 32)], 128,
                           kvs=[("general.alignment", 64)], alignment=64)
    return b, (f"offset {marks[1][1]}: tensor 'b': expected a data offset that is a multiple"
               " of 64, found 32")


@case
def tensor_offset_gap():
    b, marks = tensor_file([("a", [4], T_F32, 0), ("b", [4], T_F32, 64)], 128)
    return b, (f"offset {marks[1][1]}: tensor 'b': expected data offset 32 (tensors are packed"
               " in order, each padded to the alignment), found 64")


@case
def tensor_past_eof():
    b, marks = tensor_file([("blk.3.attn_q.weight", [1024, 2], T_F32, 0)], 1024)
    return b, (f"offset {marks[0][1]}: tensor 'blk.3.attn_q.weight': data extends past end of"
               " file (needs 8192 bytes, 1024 left)")


@case
def second_tensor_past_eof():
    b, marks = tensor_file([("a", [8], T_F32, 0), ("b", [8], T_F32, 32)], 40)
    return b, (f"offset {marks[1][1]}: tensor 'b': data extends past end of file"
               " (needs 32 bytes, 8 left)")


@case
def data_section_past_eof():
    b = B().header(1, 0)
    b.tensor("t", [0], T_F32, 0)  # a zero-size tensor: only the padding is missing
    end = len(b.data)
    pad = (32 - end % 32) % 32
    return b, (f"offset {end}: expected {pad} bytes of padding up to the data section at"
               f" offset {end + pad} (alignment 32), found end of file")


@case
def duplicate_tensor_name():
    b = B().header(2, 0)
    first, _ = b.tensor("tok_embd.weight", [4], T_F32, 0)
    off, _ = b.tensor("tok_embd.weight", [4], T_F32, 32)
    b.pad_to(32)
    b.zeros(64)
    return b, (f"offset {off}: tensor 1: expected a new tensor name, found duplicate"
               f" 'tok_embd.weight' (first at offset {first})")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    for old in os.listdir(here):
        if old.endswith(".gguf") or old.endswith(".expected"):
            os.remove(os.path.join(here, old))
    for name, fn in sorted(CASES.items()):
        b, msg = fn()
        with open(os.path.join(here, name + ".gguf"), "wb") as f:
            f.write(bytes(b.data))
        with open(os.path.join(here, name + ".expected"), "w") as f:
            f.write(f"{PREFIX}/{name}.gguf: {msg}\n")
    print(f"make_malformed.py: wrote {len(CASES)} cases to {here}", file=sys.stderr)


if __name__ == "__main__":
    main()
