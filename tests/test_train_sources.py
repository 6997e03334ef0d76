"""Extra training sources: a pure-Python package pip-installed into the run's scratch folder, its licence
read from its metadata, its function rows repeated; function rows picked by body length.

The package is a real wheel the test writes (pip installs it offline, nothing is downloaded)."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest

from llada.train.build import _body_fits, _fresh_data
from llada.train.corpus import build_corpus
from llada.train.loop import preset_config
from llada.train.pip_sources import PipSourceError, install, is_from
from code_corpus import EVAL_BUCKETS, is_held_out, write_tree

CLEAN = '''def clamp(x, low, high):
    """x, kept between low and high."""
    if x < low:
        return low
    return min(x, high)


def double(x):
    return 2 * x


def running_sum(values):
    total, out = 0, []
    for v in values:
        total += v
        out.append(total)
    return out
'''
MULTI_LINE_FUNCTIONS = 2  # clamp and running_sum; double's body is one line


def _train_key(stem: str) -> str:
    return next(f"cleanfns/{stem}{i}.py" for i in range(10_000)
                if not is_held_out(f"cleanfns/{stem}{i}.py", EVAL_BUCKETS))


def write_wheel(folder: Path) -> Path:
    """cleanfns-1.0-py3-none-any.whl: one module of small functions, MIT in its metadata."""
    module = _train_key("ops_")
    files = {"cleanfns/__init__.py": "", module: CLEAN,
             "cleanfns-1.0.dist-info/METADATA": "Metadata-Version: 2.4\nName: cleanfns\nVersion: 1.0\n"
                                                "License-Expression: MIT\n",
             "cleanfns-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                             "Tag: py3-none-any\n"}
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    files["cleanfns-1.0.dist-info/RECORD"] = "\n".join(record + ["cleanfns-1.0.dist-info/RECORD,,"]) + "\n"
    wheel = folder / "cleanfns-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return wheel


def test_body_length_picks_function_rows():
    assert _body_fits("    return x\n", 1, 0) and not _body_fits("    return x\n", 2, 0)
    assert _body_fits("    a = 1\n\n    return a\n", 2, 2)  # blank lines do not count
    assert not _body_fits("    a = 1\n    b = 2\n    return a\n", 2, 2)


def test_a_package_installs_offline_with_its_licence_and_files(tmp_path):
    [info] = install((str(write_wheel(tmp_path)),), tmp_path / "pip")
    assert (info.name, info.version, info.license, info.top_level) == ("cleanfns", "1.0", "MIT", ("cleanfns",))
    assert is_from("cleanfns/ops_3.py:1", [info]) and not is_from("json/decoder.py:10", [info])
    with pytest.raises(PipSourceError, match="pip install .*no-such-wheel.whl failed"):
        install((str(tmp_path / "no-such-wheel.whl"),), tmp_path / "pip2")


def test_the_corpus_reads_the_package_and_repeats_its_multi_line_functions(tmp_path):
    wheel = write_wheel(tmp_path)
    write_tree(tmp_path / "src")
    common = dict(roots=(str(tmp_path / "src"),), vocab_size=300, bpe_chars=100_000, code_length=1024,
                  min_body_lines=2, pip_packages=(str(wheel),))
    counts = {}
    for repeat in (1, 3):
        out = tmp_path / f"out{repeat}"
        tc = preset_config("tiny", out=str(out), pip_repeat=repeat, **common)
        _, _, functions, _, data = _fresh_data(tc, out, progress=False)
        counts[repeat] = len(functions)
        assert data["pip_packages"] == [{"name": "cleanfns", "version": "1.0", "license": "MIT",
                                         "top_level": ["cleanfns"]}]
        assert "PyPI cleanfns 1.0 (MIT)" in data["sources"]
    local = build_corpus((), [tmp_path / "src"], progress=False)
    local_rows = sum(_body_fits(f.body, 2, 0) for f in local.functions)
    assert counts[1] == local_rows + MULTI_LINE_FUNCTIONS  # no prompt here is half a row long
    assert counts[3] == local_rows + 3 * MULTI_LINE_FUNCTIONS
