"""Extra training source: pure-Python packages of small, clean functions, pip-installed into a scratch folder.

`--pip-packages algorithms,toolz` installs those packages (no dependencies, nothing imported or run)
into OUT/pip with the interpreter's own pip, and the corpus reads that folder beside the installed
sources; the held-out split is by file hash as for every other file. Each package's name, version and
licence go into the run's data summary and the model card. `--pip-repeat N` repeats their function
rows N times, so a few hundred clean files are not lost among the installed source's thousands.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import asdict, dataclass
from email.parser import HeaderParser
from pathlib import Path

PIP_TIMEOUT_S = 600


class PipSourceError(RuntimeError):
    """A package could not be installed into the scratch folder."""


@dataclass(frozen=True)
class PackageInfo:
    name: str
    version: str
    license: str  # the licence its metadata declares ("unknown" when it declares none)
    top_level: tuple[str, ...]  # the folders/modules it installs (their files are this package's)

    def summary(self) -> dict:
        return asdict(self) | {"top_level": list(self.top_level)}


def install(names: tuple[str, ...], into: Path) -> list[PackageInfo]:
    """pip-install `names` (no dependencies) into `into`; the metadata of each installed package."""
    into.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile", "--upgrade",
           "--target", str(into), *names]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise PipSourceError(f"pip install {' '.join(names)} took over {PIP_TIMEOUT_S} s") from e
    if done.returncode != 0:
        raise PipSourceError(f"pip install {' '.join(names)} failed: {done.stderr.strip()[-600:]}")
    return installed(into)


def installed(folder: Path) -> list[PackageInfo]:
    """The packages pip put in `folder`, read from their `*.dist-info` metadata."""
    return [_info(d) for d in sorted(folder.glob("*.dist-info"))]


def _info(dist: Path) -> PackageInfo:
    meta = HeaderParser().parsestr((dist / "METADATA").read_text(encoding="utf-8", errors="replace"))
    classifiers = [c.split("::")[-1].strip() for c in meta.get_all("Classifier", []) if c.startswith("License")]
    licence = meta.get("License-Expression") or (classifiers[0] if classifiers else None) or \
        (meta.get("License") or "").splitlines()[0:1]
    licence = licence if isinstance(licence, str) else (licence[0] if licence else "unknown")
    return PackageInfo(meta.get("Name", dist.name), meta.get("Version", "?"), licence.strip() or "unknown",
                       _top_level(dist))


def _top_level(dist: Path) -> tuple[str, ...]:
    record = dist / "RECORD"
    if not record.is_file():
        return ()
    tops = {line.split(",")[0].split("/")[0] for line in record.read_text().splitlines() if line}
    return tuple(sorted(t.removesuffix(".py") for t in tops if not t.endswith((".dist-info", "__pycache__"))))


def is_from(key: str, packages: list[PackageInfo]) -> bool:
    """Whether a corpus key ("pkg/mod.py:LINE" or "mod.py:LINE") lies in one of these packages."""
    head = key.split("/")[0].split(":")[0].removesuffix(".py")
    return any(head in p.top_level for p in packages)
