"""The C heap's thresholds (`llada.heap`): raised where the C library is glibc, a no-op elsewhere."""

import platform

import pytest

from llada.heap import keep_freed_memory


def test_freed_memory_is_kept_on_glibc():
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("mallopt's thresholds are glibc's")
    assert keep_freed_memory() is True
    assert keep_freed_memory() is True  # a second call changes nothing
