"""Full-size shape stand-ins: sparse GGUFs with the exact tensor names, shapes and
types of published models. `tandem inspect` must show the published architecture,
and the pinned llama-server must load each on CPU and report its buffer sizes (the
numbers the memory planner calibrates against)."""
import json
import re
import subprocess

import pytest

from conftest import LlamaServer, fixture_path

GB = 1e9
# name: (arch, layers, hidden, heads, kv heads, ffn (first layer), vocab, params, file GB, decision)
PUBLISHED = {
    "kev-4b-shape": ("qwen35", 32, 2560, 16, 4, 9216, 248320, 4.21e9, 2.7, "kev"),
    "kev-9b-shape": ("qwen35", 32, 4096, 16, 4, 12288, 248320, 8.96e9, 5.63, "kev"),
    "kev-9b-iq3m-shape": ("qwen35", 32, 4096, 16, 4, 12288, 248320, 8.96e9, 4.41, "kev"),
    "laya-shape": ("modern-bert", 30, 1024, 16, None, 2624, 50368, 0.421e9, 0.449, "laya"),
    "dense-7b-shape": ("qwen2", 28, 3584, 28, 4, 18944, 152064, 7.62e9, 4.46, None),
    "dense-3b-shape": ("qwen2", 36, 2048, 16, 2, 11008, 151936, 3.09e9, 1.83, None),
}


def inspect(tandem_bin, path):
    out = subprocess.run([str(tandem_bin), "inspect", "--json", str(path)],
                         capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_inspect_shows_the_published_architecture(tandem_bin, name):
    arch, layers, hidden, heads, kv, ffn, vocab, params, size_gb, decision = PUBLISHED[name]
    path = fixture_path(f"{name}.gguf")
    f = inspect(tandem_bin, path)
    assert (f["architecture"], f["layers"], f["embedding_length"]) == (arch, layers, hidden)
    assert (f["attention"]["head_count"], f["attention"]["head_count_kv"]) == (heads, kv)
    first_ffn = f["feed_forward_length"]
    assert (first_ffn[0] if isinstance(first_ffn, list) else first_ffn) == ffn
    assert f["vocab_size"] == vocab
    assert abs(f["parameters"] - params) / params < 0.01
    assert abs(f["file_size"] / GB - size_gb) < 0.01 * size_gb + 0.01
    assert (f["decision"] or {}).get("type") == decision
    assert path.stat().st_blocks * 512 < f["file_size"] / 20, "tensor data must be a sparse hole"


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_engine_loads_it_and_reports_buffer_sizes(tandem_bin, engine_path, name, tmp_path):
    path = fixture_path(f"{name}.gguf")
    tensor_mib = sum(r["bytes"] for r in inspect(tandem_bin, path)["tensor_bytes_by_type"].values()) / 2**20
    extra = ["-np", "1", "--no-repack"]  # weights stay mmapped: the file's holes cost no RAM
    if name.startswith("laya"):
        extra += ["-b", "512", "-ub", "512"]
    server = LlamaServer(engine_path, path, tmp_path / "server.log", extra_args=extra, ctx=512)
    server.start(timeout=180)
    try:
        log = server.log_text()
    finally:
        server.kill()
    model = [float(x) for x in re.findall(r"CPU_Mapped model buffer size =\s+([0-9.]+) MiB", log)]
    assert model and abs(sum(model) - tensor_mib) < 1.0, (model, tensor_mib)
    assert re.search(r"compute buffer size =\s+[0-9.]+ MiB", log)
    if PUBLISHED[name][0] == "qwen35":
        assert re.search(r"KV buffer size =\s+[0-9.]+ MiB", log)
        assert re.search(r"RS buffer size =\s+[0-9.]+ MiB", log), "hybrid models keep recurrent state"
    if PUBLISHED[name][-1]:
        assert f"decision model type: {PUBLISHED[name][-1]}" in log
