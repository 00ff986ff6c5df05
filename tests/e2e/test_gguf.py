"""tandem's GGUF reader and writer against the reference: the Python gguf package
(0.19.0) on real files, and the real llama-server loading what `tandem gguf set` wrote."""
import hashlib
import importlib.metadata
import json
import math
import os
import subprocess
from pathlib import Path

import gguf
import pytest

from conftest import ENGINE, PINS, LlamaServer, cache_root, http

pytestmark = pytest.mark.quick  # in `make check` (docs/testing.md)

VOCAB_DIR = ENGINE.parent.parent / "src" / "models"
VOCABS = sorted(VOCAB_DIR.glob("ggml-vocab-*.gguf"))
GGUF_PY_VERSION = importlib.metadata.version("gguf")


def tandem(tandem_bin, *args, check=True):
    out = subprocess.run([str(tandem_bin), *args], capture_output=True, text=True, timeout=300)
    if check:
        assert out.returncode == 0, out.stderr
    return out


def dump(tandem_bin, path):
    return json.loads(tandem(tandem_bin, "gguf", "dump", str(path)).stdout)


def text(part):
    return part.tobytes().decode("utf-8", errors="replace")


def scalar(v):
    v = v.item() if hasattr(v, "item") else v
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def reference_value(field):
    """A field's value from gguf-py, shaped like tandem's JSON dump."""
    main = field.types[0]
    if main == gguf.GGUFValueType.STRING:
        return text(field.parts[field.data[0]])
    if main == gguf.GGUFValueType.ARRAY:
        if field.types[-1] == gguf.GGUFValueType.STRING:
            return [text(field.parts[i]) for i in field.data]
        return [scalar(field.parts[i][0]) for i in field.data]
    value = scalar(field.parts[field.data[0]][0])
    return bool(value) if main == gguf.GGUFValueType.BOOL else value


def reference_dump(path):
    """gguf-py's reading of the file at path. Reading a vocabulary of 260k tokens
    takes gguf-py about a minute, so what it read of a file is kept in the cache
    under the file's SHA-256 and gguf-py's version, and read again from there."""
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    kept = cache_root() / "gguf-py" / f"{GGUF_PY_VERSION}-{digest}.json"
    if kept.exists():
        return json.loads(kept.read_text())
    ref = read_with_gguf_py(path)
    kept.parent.mkdir(parents=True, exist_ok=True)
    part = kept.with_suffix(f".{os.getpid()}.tmp")
    part.write_text(json.dumps(ref))
    part.replace(kept)
    return ref


def read_with_gguf_py(path):
    r = gguf.GGUFReader(str(path))
    kvs = [{"key": k, "type": f.types[0].name, "value": reference_value(f),
            **({"elem_type": f.types[-1].name} if f.types[0] == gguf.GGUFValueType.ARRAY else {})}
           for k, f in r.fields.items() if not k.startswith("GGUF.")]
    tensors = [{"name": t.name, "type": t.tensor_type.name, "shape": [int(x) for x in t.shape],
                "offset": int(t.data_offset), "size": int(t.n_bytes)} for t in r.tensors]
    return {"version": int(r.fields["GGUF.version"].parts[-1][0]), "alignment": r.alignment,
            "data_offset": r.data_offset, "kv": kvs, "tensors": tensors}


def assert_same_as_reference(ours, ref):
    for key in ("version", "alignment"):
        assert ours[key] == ref[key], key
    if ref["tensors"]:  # without tensors ggml pads nothing and gguf-py pads anyway
        assert ours["data_offset"] == ref["data_offset"]
    assert [kv["key"] for kv in ours["kv"]] == [kv["key"] for kv in ref["kv"]]
    for mine, theirs in zip(ours["kv"], ref["kv"]):
        if isinstance(theirs["value"], bool) and mine["type"] == "ARRAY":
            theirs = dict(theirs, value=[bool(x) for x in theirs["value"]])
        if theirs.get("elem_type") == "BOOL":
            theirs = dict(theirs, value=[bool(x) for x in theirs["value"]])
        assert mine == theirs, mine["key"]
    assert ours["tensors"] == ref["tensors"]


@pytest.mark.parametrize("name", [PINS["SMOLLM2_GGUF"], PINS["GEMMA3_GGUF"]])
def test_real_models_read_as_python_gguf_reads_them(tandem_bin, name, smollm2_path):
    path = smollm2_path.parent / name
    assert_same_as_reference(dump(tandem_bin, path), reference_dump(path))


def test_engine_vocab_files_read_as_python_gguf_reads_them(tandem_bin, engine_path):
    assert len(VOCABS) >= 10, f"expected the engine's vocab GGUFs in {VOCAB_DIR}"
    for path in VOCABS:
        assert_same_as_reference(dump(tandem_bin, path), reference_dump(path))


def test_inspect_json_reports_the_model(tandem_bin, smollm2_path, gemma3_path):
    facts = json.loads(tandem(tandem_bin, "inspect", "--json", str(smollm2_path)).stdout)
    ref = gguf.GGUFReader(str(smollm2_path))
    assert facts["architecture"] == "llama"
    assert facts["parameters"] == sum(int(t.n_elements) for t in ref.tensors)
    assert facts["tensor_count"] == len(ref.tensors)
    assert sum(r["bytes"] for r in facts["tensor_bytes_by_type"].values()) == \
        sum(int(t.n_bytes) for t in ref.tensors)
    assert (facts["layers"], facts["context_length"], facts["embedding_length"]) == (30, 8192, 576)
    assert facts["attention"]["head_count"] == 9 and facts["attention"]["head_count_kv"] == 3
    assert facts["vocab_size"] == 49152
    assert facts["chat_templates"] == ["default"]
    assert facts["decision"] is None
    g = json.loads(tandem(tandem_bin, "inspect", "--json", str(gemma3_path)).stdout)
    assert g["architecture"] == "gemma3" and g["attention"]["sliding_window"] == 512
    assert g["attention"]["key_length"] == 256 and g["vocab_size"] == 262144


def test_inspect_sha256_matches_the_pin(tandem_bin, smollm2_path):
    facts = json.loads(tandem(tandem_bin, "inspect", "--json", "--sha256", str(smollm2_path)).stdout)
    assert facts["sha256"] == PINS["SMOLLM2_GGUF_SHA256"]
    human = tandem(tandem_bin, "inspect", str(smollm2_path)).stdout
    assert "\narchitecture                       llama\n" in human and "Q4_1" in human


def test_set_and_rm_change_only_the_named_keys(tandem_bin, smollm2_path, tmp_path):
    template = tmp_path / "systemone.jinja"
    template.write_text("{{ instructions }}\n{% for o in options %}{{ o.key }}{% endfor %}")
    out = tmp_path / "edited.gguf"
    tandem(tandem_bin, "gguf", "set", str(smollm2_path), str(out),
           "general.name=str:tandem test", "llama.decision.type=str:lev",
           "llama.decision.temperature.choice=f32:2.5", "x.labels=arr[str]:[\"A\",\"B\"]",
           f"tokenizer.chat_template.systemone=file:{template}")
    before, after = dump(tandem_bin, smollm2_path), dump(tandem_bin, out)
    changed = {"general.name", "llama.decision.type", "llama.decision.temperature.choice",
               "x.labels", "tokenizer.chat_template.systemone"}
    keep = lambda d: [kv for kv in d["kv"] if kv["key"] not in changed]  # noqa: E731
    assert keep(after) == keep(before)
    values = {kv["key"]: kv["value"] for kv in after["kv"]}
    assert values["general.name"] == "tandem test"
    assert values["llama.decision.temperature.choice"] == 2.5
    assert values["x.labels"] == ["A", "B"]
    assert values["tokenizer.chat_template.systemone"] == template.read_text()
    assert [t["name"] for t in after["tensors"]] == [t["name"] for t in before["tensors"]]
    assert after["tensors"][5]["size"] == before["tensors"][5]["size"]
    assert_same_as_reference(after, reference_dump(out))
    # tensor bytes are copied unchanged
    src, dst = smollm2_path.read_bytes(), out.read_bytes()
    for a, b in zip(before["tensors"], after["tensors"]):
        assert src[a["offset"]:a["offset"] + a["size"]] == dst[b["offset"]:b["offset"] + b["size"]]

    removed = tmp_path / "removed.gguf"
    tandem(tandem_bin, "gguf", "rm", str(out), str(removed), "x.labels")
    assert "x.labels" not in {kv["key"] for kv in dump(tandem_bin, removed)["kv"]}


def test_set_output_loads_in_llama_server(tandem_bin, engine_path, smollm2_path, tmp_path):
    out = tmp_path / "renamed.gguf"
    tandem(tandem_bin, "gguf", "set", str(smollm2_path), str(out), "general.name=str:tandem-edited",
           "general.alignment=u32:64")
    assert dump(tandem_bin, out)["alignment"] == 64
    server = LlamaServer(engine_path, out, tmp_path / "server.log").start()
    try:
        status, body = http("POST", server.url + "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4})
        assert status == 200 and body["choices"][0]["message"]["content"], body
    finally:
        assert server.stop() == 0


def test_bad_edits_and_bad_files_fail_clearly(tandem_bin, smollm2_path, tmp_path):
    out = tmp_path / "never.gguf"
    bad = tandem(tandem_bin, "gguf", "set", str(smollm2_path), str(out), "llama.x=u8:300", check=False)
    assert bad.returncode == 1 and "llama.x: 300 does not fit in UINT8" in bad.stderr
    assert not out.exists() and not list(tmp_path.glob("never.gguf.tmp.*"))
    bad = tandem(tandem_bin, "gguf", "rm", str(smollm2_path), str(out), "no.such.key", check=False)
    assert bad.returncode == 1 and "no.such.key: no such key" in bad.stderr
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(smollm2_path.read_bytes()[:5000])
    bad = tandem(tandem_bin, "inspect", str(truncated), check=False)
    assert bad.returncode == 1
    assert bad.stderr.startswith(f"{truncated}: offset ") and bad.stderr.count("\n") == 1, bad.stderr


@pytest.mark.parametrize("spec, message", [
    ('{"seed": 1, "tensor": []}', 'spec: unknown field "tensor"'),
    ('{"tensors": [{"name": "a", "shape": [4], "type": "F32", "fil": "normal"}]}',
     'tensors[0]: unknown field "fil"'),
    ('{"tensors": [{"name": "a.{i}", "layers": ["x"], "shape": [4], "type": "F32"}]}',
     'a.{i}: "layers" must be an array of layer numbers'),
    ('{"tensors": [{"name": "a", "shape": [4], "type": "Q9_X"}]}', "a: type must name a ggml type"),
    ('{"tensors": [{"name": "a", "shape": [100], "type": "Q4_K"}]}', "a: tensor 'a': invalid type or shape"),
    ('{"tensors": [{"name": "a", "shape": ["vocab"], "type": "F32"}]}', 'a dimension must be'),
    ('{"set": ["x=u8:300"]}', "set[0]: x: 300 does not fit in UINT8"),
    ('{"arrays": [{"key": "nope", "append": [1]}]}', 'arrays[0]: "key" must name an array'),
    ('{"copy": [{"from": "missing.gguf", "prefix": "x"}]}', "copy[0]: "),
    ('{"tensors": [', "]' expected"),
])
def test_synth_refuses_bad_specs_by_name(tandem_bin, tmp_path, spec, message):
    path = tmp_path / "spec.json"
    path.write_text(spec)
    out = tmp_path / "out.gguf"
    bad = tandem(tandem_bin, "gguf", "synth", str(path), str(out), check=False)
    assert bad.returncode == 1 and message in bad.stderr and bad.stderr.startswith(str(path)), bad.stderr
    assert not out.exists()


MALFORMED = sorted((Path(__file__).resolve().parents[1] / "data" / "gguf").glob("*.gguf"))


@pytest.mark.parametrize("path", MALFORMED, ids=[p.stem for p in MALFORMED])
def test_inspect_refuses_each_malformed_file_in_one_line(tandem_bin, path):
    """The CLI view of the corpus the unit tests replay: exit 1, exactly the expected line."""
    rel = path.relative_to(Path(__file__).resolve().parents[2])
    out = subprocess.run([str(tandem_bin), "inspect", str(rel)], capture_output=True, text=True,
                         timeout=30, cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr == path.with_suffix(".expected").read_text().rstrip("\n") + "\n"
