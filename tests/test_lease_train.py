"""The lease's training side: data packed to travel and unpacked intact, each part told its deadline, the
trained model brought back in chunks under the file limit, and the `both` plan's order."""

import json
import sys
import tarfile
import time
from pathlib import Path

import pytest
import torch

from llada.bench import lease, lease_data
from llada.train.data import Rows
from llada.train.resume import load_rows, save_rows


def _rows(n: int, length: int, vocab: int, seed: int) -> Rows:
    gen = torch.Generator().manual_seed(seed)
    return Rows(torch.randint(0, vocab, (n, length), generator=gen, dtype=torch.int32),
                torch.randint(1, length // 2, (n,), generator=gen, dtype=torch.int32),
                torch.randint(1, length // 2, (n,), generator=gen, dtype=torch.int32))


def _built_run(folder: Path, vocab: int = 8192, windows: int = 400) -> dict:
    rows = {"windows": _rows(windows, 64, vocab, 1), "functions": _rows(50, 64, vocab, 2),
            "held_out": _rows(5, 64, vocab, 3)}
    folder.mkdir(parents=True)
    for name in lease_data.TOKENIZER_FILES:
        (folder / name).write_text(json.dumps({"name": name}))
    save_rows(folder, rows, {"vocab_size": vocab, "window_rows": windows})
    return rows


def test_packed_rows_come_back_equal(tmp_path):
    rows = _built_run(tmp_path / "run")
    kept = lease_data.pack(tmp_path / "run", tmp_path / "carry", max_mib=10)
    assert kept["window_rows"] == kept["of"] == 400  # all fit
    back, data = load_rows(lease_data.unpack(tmp_path / "carry", tmp_path / "data"))
    for kind, r in rows.items():
        assert back[kind].ids.dtype == torch.int32 and torch.equal(back[kind].ids, r.ids)
        assert torch.equal(back[kind].prompt_len, r.prompt_len) and torch.equal(back[kind].answer_len, r.answer_len)
    assert data["vocab_size"] == 8192
    assert (tmp_path / "data" / "tokenizer.json").read_text() == (tmp_path / "run" / "tokenizer.json").read_text()


def test_packing_keeps_fewer_windows_to_fit_and_refuses_wide_ids(tmp_path):
    _built_run(tmp_path / "run", windows=3000)
    kept = lease_data.pack(tmp_path / "run", tmp_path / "carry", max_mib=0.2)
    assert 0 < kept["window_rows"] < 3000 and (tmp_path / "carry" / lease_data.PACKED).stat().st_size <= 0.2 * 2**20
    back, _ = load_rows(lease_data.unpack(tmp_path / "carry", tmp_path / "data"))
    assert len(back["windows"].ids) == kept["window_rows"] and len(back["functions"].ids) == 50
    _built_run(tmp_path / "wide", vocab=40_000)
    with pytest.raises(ValueError, match="int16"):
        lease_data.pack(tmp_path / "wide", tmp_path / "carry2", max_mib=10)


def test_each_part_is_told_its_deadline_and_the_model_comes_back_in_chunks(tmp_path, monkeypatch):
    work_code = ("import os, pathlib, json, time; w = pathlib.Path(os.environ['WORK']); "
                 "(w / 'deadline.json').write_text(json.dumps({'left': float(os.environ['LEASE_PART_DEADLINE'])"
                 " - time.time()})); t = w / 'train'; (t / 'checkpoints').mkdir(parents=True); "
                 "(t / 'config.json').write_text('{}'); (t / 'model.safetensors').write_bytes(os.urandom(250_000)); "
                 "(t / 'rows.pt').write_bytes(b'x' * 1000); (t / 'checkpoints' / 'old.bin').write_bytes(b'y')")
    monkeypatch.setitem(lease.PLANS, "engine", lambda work, dry_run: [
        lease.Part("trains", "a stand-in model folder", [[sys.executable, "-c", work_code]], cap_s=20, min_s=1)])
    monkeypatch.setattr(lease, "preflight", lambda run, dry_run: True)
    monkeypatch.setattr(lease, "FILE_LIMIT", 100_000)
    monkeypatch.setattr(lease.Lease, "__init__", _with_env(lease.Lease.__init__))
    lease.main(["--budget", "60", "--out", str(tmp_path / "out")])
    out = tmp_path / "out"
    summary = json.loads((out / lease.SUMMARY).read_text())
    chunks = summary["model_chunks"]["files"]
    assert len(chunks) == 3 and all((out / c).stat().st_size <= 100_000 for c in chunks)
    joined = tmp_path / "joined.tar"
    joined.write_bytes(b"".join((out / c).read_bytes() for c in chunks))
    with tarfile.open(joined) as tar:
        assert sorted(tar.getnames()) == ["train/config.json", "train/model.safetensors"]  # no rows, no checkpoints
    with tarfile.open(out / lease.TAR) as tar:
        left = json.loads(tar.extractfile("deadline.json").read())["left"]
    assert 5 < left <= 20.5  # the part's own cap (20 s), not the whole budget


def _with_env(init):
    def wrapped(self, args, argv):
        init(self, args, argv)
        self.env = self.env | {"WORK": str(self.work)}
    return wrapped


def test_both_plan_trains_after_the_bf16_forward_and_skips_the_tune(tmp_path):
    parts = lease.PLANS["both"](tmp_path, False)
    assert [p.name for p in parts] == ["self-check", "forward-bf16", "train", "forward-fp8", "moe", "decode", "tests"]
    assert sum(p.cap_s for p in parts if p.name != "tests") <= 600  # one call of at most 10 minutes
    train = next(p for p in parts if p.name == "train")
    assert "llada.bench.lease_train" in train.argvs[0] and "--dry-run" not in train.argvs[0]


def test_the_train_part_refuses_without_carried_data(tmp_path, monkeypatch):
    from llada.bench import lease_train

    monkeypatch.setattr(lease_train, "CARRIED", tmp_path / "nothing")
    monkeypatch.setenv("LEASE_PART_DEADLINE", str(time.time() + 300))
    with pytest.raises(SystemExit, match="no packed data"):
        lease_train.main([str(tmp_path / "train.json")])
