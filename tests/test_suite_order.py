"""The order the README's test command hands files to its workers (tests/conftest.py, FIRST) and the tests it marks
slow (SLOW) name real files and tests."""

import configparser
import re
from pathlib import Path

from conftest import FIRST, SLOW

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


def test_every_test_marked_slow_by_name_exists():
    """A name mistyped in SLOW would leave its test in the fast lane without a word."""
    missing = []
    for key in SLOW:
        name, _, test = key.partition("::")
        path = TESTS / name
        if not path.is_file() or (test and not re.search(rf"^def {re.escape(test)}\(", path.read_text(), re.M)):
            missing.append(key)
    assert not missing, f"SLOW in tests/conftest.py names what is gone: {missing}"
