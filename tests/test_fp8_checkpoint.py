"""FP8 checkpoints (`python -m llada.weights.fp8_checkpoint SRC DST`): written once, loaded as FP8 directly, bit for
bit what quantizing at load gives; refused where they cannot fit or where the GPU has no FP8."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from llada.weights import fp8_checkpoint, fp8_format, memory
from llada.fast import kernels
from llada.weights.checkpoint import CheckpointError, load_model
from llada.config import DecodeConfig
from llada.decode import generate
from llada.fast.kernels import devices
from llada.fast.quantize import FP8Experts

ROOT = Path(__file__).resolve().parents[1]


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t


def assert_same_weights(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for key in sa:
        assert sa[key].dtype == sb[key].dtype and torch.equal(_bits(sa[key]), _bits(sb[key])), key


@pytest.fixture(scope="module")
def fp8_dir(tmp_path_factory, fixture_dir):
    dst = tmp_path_factory.mktemp("fp8") / "tiny-fp8"
    files = fp8_checkpoint.convert(fixture_dir, dst)
    assert files == [dst / "model.safetensors"]
    return dst


def test_the_round_trip_equals_quantizing_at_load_bit_for_bit(fp8_dir, fixture_dir, monkeypatch):
    at_load = load_model(fixture_dir, quantize="fp8")
    monkeypatch.setattr(kernels, "quantize_weight_fp8", lambda *a, **k: pytest.fail("quantized while loading"))
    stored = load_model(fp8_dir)  # no quantize argument: the directory says FP8
    assert_same_weights(at_load, stored)
    assert all(isinstance(layer.mlp.experts, FP8Experts) for layer in stored.layers[1:])  # layer 0 is dense
    assert stored.layers[1].mlp.experts.w13.dtype == torch.float8_e4m3fn
    raw = json.loads((fp8_dir / "config.json").read_text())
    assert raw["quantization_config"]["layout"] == fp8_format.LAYOUT
    assert (fp8_dir / "README.md").read_text() == (fixture_dir / "README.md").read_text()  # other files copied
    cfg = DecodeConfig(gen_length=16, block_length=8)
    runs = [generate(m, [33, 243, 171], cfg, 258, 257) for m in (at_load, stored)]
    assert runs[0].output_ids == runs[1].output_ids
    assert runs[0].block_states_before_each_forward() == runs[1].block_states_before_each_forward()


def test_shards_and_their_index_load_the_same(tmp_path, fixture_dir, fp8_dir):
    files = fp8_checkpoint.convert(fixture_dir, tmp_path / "sharded", shard_bytes=200_000)
    assert len(files) >= 3 and (tmp_path / "sharded" / "model.safetensors.index.json").exists()
    assert all(f.stat().st_size <= 200_000 + 100_000 for f in files)  # a tensor larger than a shard gets its own
    assert_same_weights(load_model(fp8_dir), load_model(tmp_path / "sharded"))


def test_weights_that_do_not_fit_are_refused_before_loading(fp8_dir, monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda device: memory.HEADROOM)
    with pytest.raises(CheckpointError, match="refused before loading: the weights need .* with fp8 experts "
                                              "but cpu has 1.0 GiB"):
        load_model(fp8_dir)


def test_a_gpu_without_fp8_is_refused_before_cuda_is_touched(fp8_dir, monkeypatch):
    a100 = devices.DeviceSpec("NVIDIA A100-SXM4-80GB", 80, 108, 166_912)
    monkeypatch.setattr(devices, "spec_of", lambda device=None: a100)
    with pytest.raises(CheckpointError, match="FP8 weights need a GPU of compute capability 8.9 or later; "
                                              "NVIDIA A100-SXM4-80GB is sm80: load the bf16 checkpoint"):
        load_model(fp8_dir, device="cuda")
    h100 = devices.DeviceSpec("NVIDIA H100 80GB HBM3", 90, 132, 232_448)
    monkeypatch.setattr(devices, "spec_of", lambda device=None: h100)
    assert fp8_format.fp8_refusal(torch.device("cuda")) is None


def test_an_expert_stored_in_another_dtype_or_another_format_is_refused(tmp_path, fp8_dir):
    from safetensors.torch import load_file, save_file

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text((fp8_dir / "config.json").read_text())
    tensors = load_file(str(fp8_dir / "model.safetensors"))
    tensors["model.layers.1.mlp.experts.w2"] = tensors["model.layers.1.mlp.experts.w2"].float()
    save_file(tensors, str(bad / "model.safetensors"))
    with pytest.raises(CheckpointError, match="experts.w2 is float32; an FP8 checkpoint stores it as float8_e4m3fn"):
        load_model(bad)
    raw = json.loads((fp8_dir / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps(raw | {"quantization_config": {"quant_method": "awq"}}))
    with pytest.raises(CheckpointError, match="is not a format this loader reads"):
        load_model(bad)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "llada.weights.fp8_checkpoint", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=600, stdin=subprocess.DEVNULL)


def test_the_command_writes_once_and_refuses_in_one_error_line(tmp_path, fixture_dir):
    run = _cli(fixture_dir, tmp_path / "out")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"wrote {tmp_path / 'out'}: 1 file(s)") and "FP8" in run.stdout
    for args, says in [((fixture_dir, tmp_path / "out"), "exists and is not an empty directory"),
                       ((tmp_path / "out", tmp_path / "again"), "already an FP8 checkpoint"),
                       ((tmp_path / "nowhere", tmp_path / "x"), "model directory not found")]:
        run = _cli(*args)
        assert run.returncode == 2 and run.stdout == "" and "Traceback" not in run.stderr
        assert run.stderr.startswith("error: ") and says in run.stderr and len(run.stderr.splitlines()) == 1


MEASURE = """
import json, sys
from pathlib import Path
from llada.weights import fp8_checkpoint  # imports first: the baseline is a process ready to convert


def rss(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))


before = rss("VmRSS:")
files = fp8_checkpoint.convert(sys.argv[1], sys.argv[2], shard_bytes=int(sys.argv[3]))
print(json.dumps({"before": before, "peak": rss("VmHWM:"), "files": len(files)}))
"""


def test_conversion_streams_a_sharded_checkpoint_in_bounded_memory(tmp_path):
    """A real-format checkpoint of several shards converts with peak memory near its largest tensor, not its size."""
    from llada.weights.replica import write_replica
    from llada.weights.shards import read_header

    src = write_replica(tmp_path / "src", "tiny", hidden_size=128, head_dim=32, num_hidden_layers=12, num_experts=64,
                        moe_intermediate_size=256, shard_bytes=24 << 20)
    shards = sorted(src.glob("model-*.safetensors"))
    entries = [e for f in shards for e in read_header(f).values()]
    total, largest = sum(e.end - e.begin for e in entries), max(e.end - e.begin for e in entries)
    assert len(shards) >= 5 and total > 200e6 and largest < total / 4  # (157,184 x 128 bf16 embeddings: 40 MB)
    out = subprocess.run([sys.executable, "-c", MEASURE, str(src), str(tmp_path / "fp8"), str(32 << 20)],
                         capture_output=True, text=True, timeout=600, cwd=ROOT, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.splitlines()[-1])
    extra = r["peak"] - r["before"]
    # one dense tensor at a time (the largest is read into a tensor of its own) plus the allocator's slack;
    # holding the model, as a load-then-save converter does, needs ~the checkpoint's size (~0.6 of it in FP8)
    assert extra < largest + (48 << 20) and extra < total / 3, (extra, largest, total)
    assert r["files"] >= 3
    stored = load_model(tmp_path / "fp8", dtype=torch.bfloat16)
    assert_same_weights(load_model(src, dtype=torch.bfloat16, quantize="fp8"), stored)  # what quantizing at load makes
