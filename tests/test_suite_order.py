"""The order the README's test command hands files to its workers (tests/conftest.py, FIRST) names real files."""

import configparser
from pathlib import Path

from conftest import FIRST

TESTS = Path(__file__).resolve().parent


def test_the_files_started_first_exist_once_each():
    assert len(set(FIRST)) == len(FIRST), FIRST
    missing = [name for name in FIRST if not (TESTS / name).is_file()]
    assert not missing, f"FIRST in tests/conftest.py names files that are gone: {missing}"


def test_the_workers_take_whole_files_in_the_given_order():
    ini = configparser.ConfigParser()
    ini.read(TESTS.parent / "pytest.ini")
    opts = ini["pytest"]["addopts"].split()
    assert "--no-loadscope-reorder" in opts and opts[opts.index("--dist") + 1] == "loadfile"
