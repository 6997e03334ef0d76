"""`llada.fast.team.alone`: this OS thread's OpenMP and MKL counts at one and given back; which forwards run alone
(`alone_for`), and a decode round of a small model on one thread while the process has two."""

import ctypes
from pathlib import Path

import pytest
import torch

from llada.fast import team
from llada.fast.team import _libgomp, _mkl_local, alone, alone_for
from llada.pipeline import Pipeline

pytestmark = pytest.mark.skipif(_libgomp() is None or _mkl_local() is None,
                                reason="torch runs without libgomp or MKL here: `alone` has nothing to set")


def mkl_threads() -> int:
    """The count MKL's products would use on this thread (its own, else the process's)."""
    lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
    return lib.MKL_Get_Max_Threads()


@pytest.fixture
def two_threads():
    kept = torch.get_num_threads()
    torch.set_num_threads(2)  # the process's count under test, whatever the test process runs with
    yield
    torch.set_num_threads(kept)


def test_alone_sets_both_counts_to_one_and_gives_them_back(two_threads):
    assert (torch.get_num_threads(), mkl_threads()) == (2, 2)
    with alone():
        assert (torch.get_num_threads(), mkl_threads()) == (1, 1)
    assert (torch.get_num_threads(), mkl_threads()) == (2, 2)
    with pytest.raises(ValueError), alone():
        raise ValueError("inside")
    assert (torch.get_num_threads(), mkl_threads()) == (2, 2)


def test_a_product_alone_gives_the_bits_of_one_thread(two_threads):
    a, b = torch.randn(64, 512), torch.randn(512, 512)
    torch.set_num_threads(1)
    want = a @ b
    torch.set_num_threads(2)
    with alone():
        assert torch.equal(a @ b, want)


@pytest.fixture(scope="module")
def pipe(tiny_model_dir) -> Pipeline:
    return Pipeline.load(tiny_model_dir)


def test_small_forwards_run_alone_and_large_ones_on_the_team(pipe):
    size = sum(t.numel() for t in (*pipe.model.parameters(), *pipe.model.buffers()))
    assert alone_for(pipe.model, 32)
    most = int(team.ALONE_BELOW // size)  # the largest token count still alone
    assert alone_for(pipe.model, most) and not alone_for(pipe.model, most + 1)
    assert not alone_for(torch.nn.Linear(4, 4, device="meta"), 1)  # off the CPU: the device's own way


def _counts_in_forwards(pipe, monkeypatch) -> list[tuple[int, int]]:
    seen, plain = [], pipe.model.forward_rows

    def counted(rows):
        seen.append((torch.get_num_threads(), mkl_threads()))
        return plain(rows)

    monkeypatch.setattr(pipe.model, "forward_rows", counted)
    pipe.generate(pipe.encode("def add(a, b):"), pipe.config("S", gen_length=16, block_length=8))
    return seen


def test_a_small_models_rounds_run_alone_on_a_two_thread_process(pipe, two_threads, monkeypatch):
    seen = _counts_in_forwards(pipe, monkeypatch)
    assert len(seen) >= 2 and set(seen) == {(1, 1)}, seen
    assert (torch.get_num_threads(), mkl_threads()) == (2, 2)  # the caller's thread keeps its counts


def test_a_round_over_the_bound_runs_on_the_team(pipe, two_threads, monkeypatch):
    monkeypatch.setattr(team, "ALONE_BELOW", 0)
    assert set(_counts_in_forwards(pipe, monkeypatch)) == {(2, 2)}
