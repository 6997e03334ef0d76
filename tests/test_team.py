"""`llada.fast.team`: `serial` puts this OS thread's OpenMP team at one thread and gives the size back,
`products` restores the outer size inside it, and another thread's team is not touched."""

import threading

import pytest
import torch

from llada.fast.team import _libgomp, products, serial

pytestmark = pytest.mark.skipif(_libgomp() is None, reason="torch runs without libgomp here: the contexts do nothing")


@pytest.fixture
def two_threads():
    kept = torch.get_num_threads()
    torch.set_num_threads(2)  # the size under test, whatever the test process runs with
    yield
    torch.set_num_threads(kept)


def test_serial_runs_one_thread_and_restores_the_size(two_threads):
    with serial():
        assert torch.get_num_threads() == 1
        with products():
            assert torch.get_num_threads() == 2
        assert torch.get_num_threads() == 1
        with serial():  # nested: products still give the outermost size back
            with products():
                assert torch.get_num_threads() == 2
            assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2


def test_products_outside_serial_keep_the_size(two_threads):
    with products():
        assert torch.get_num_threads() == 2


def test_the_size_is_restored_when_the_section_raises(two_threads):
    with pytest.raises(ValueError), serial():
        raise ValueError("inside")
    assert torch.get_num_threads() == 2


def test_another_thread_keeps_its_team_while_one_is_serial(two_threads):
    inside, seen = threading.Event(), {}

    def other():
        inside.wait(5)
        seen["threads"] = torch.get_num_threads()

    worker = threading.Thread(target=other)
    worker.start()
    with serial():
        inside.set()
        worker.join(5)
        assert torch.get_num_threads() == 1
    assert seen["threads"] == 2


def test_a_serial_op_gives_the_bits_of_the_team():
    x = torch.randn(300, 1024)  # over torch's 32768-element grain: the team splits it
    want = torch.nn.functional.silu(x) * x
    with serial():
        got = torch.nn.functional.silu(x) * x
    assert torch.equal(got, want)
