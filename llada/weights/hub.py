"""A model by directory or by Hugging Face repo id: a repo id is downloaded into the hub's own cache.

    root = model_path("assets/model")                  # a directory: as it is
    root = model_path("inclusionAI/LLaDA2.1-mini")     # the hub's snapshot directory, downloaded if needed

A name that is not an existing directory and reads `owner/name` is a repo id: `huggingface_hub`'s
`snapshot_download` fetches the files a load reads (config, weights, tokenizer, presets, model card) into
its normal cache (`HF_HOME`, `HF_HUB_CACHE`), with its progress bars, resuming a download that stopped;
a snapshot already in the cache is used without asking the network when `HF_HUB_OFFLINE=1` or when the
network cannot be reached. Every failure (no network and nothing cached, a repo that does not exist or is
gated, a full disk) is one `CheckpointError` line, raised within seconds (`ETAG_TIMEOUT`): the CLI prints it
as `error: ...` and exits with status 2.
"""

from __future__ import annotations

import re
from pathlib import Path

from .checkpoint import CheckpointError

REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.md", "*.jinja", "*.py"]  # no .bin / .pt duplicates
ETAG_TIMEOUT = 10  # seconds to wait for the hub's first answer per file


def is_repo_id(name: str) -> bool:
    return bool(REPO_ID.match(name)) and not Path(name).expanduser().exists()


def model_path(name: str | Path, progress: bool = True) -> Path:
    """The directory of `name`: itself when it exists, the hub snapshot of a repo id (downloaded if needed)."""
    text = str(name)
    if not is_repo_id(text):
        return Path(text).expanduser()  # a directory (a missing one is refused by the loader, naming it)
    return download(text, progress)


def download(repo: str, progress: bool = True) -> Path:
    """`repo`'s snapshot in the hub cache; CheckpointError (one line) when it cannot be had."""
    try:
        return Path(_snapshot_download(repo, progress))
    except KeyboardInterrupt:
        raise
    except Exception as err:  # noqa: BLE001 - network, hub and disk errors of several libraries: one line each
        raise CheckpointError(f"{repo}: cannot download from the Hugging Face hub: {_one_line(err)}") from None


def _snapshot_download(repo: str, progress: bool) -> str:
    """huggingface_hub's download (tests replace this function: nothing here may reach the network)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    (enable_progress_bars if progress else disable_progress_bars)()
    return snapshot_download(repo, allow_patterns=PATTERNS, etag_timeout=ETAG_TIMEOUT)


def _one_line(err: Exception) -> str:
    kind = type(err).__name__
    if kind == "LocalEntryNotFoundError" or "offline" in str(err).lower():
        return ("no network (or HF_HUB_OFFLINE is set) and the model is not in the local hub cache; download it "
                "where there is a network (huggingface-cli download REPO) or give a local directory")
    if kind in ("RepositoryNotFoundError", "GatedRepoError"):
        return f"{kind}: the repo does not exist, is private or is gated (log in with huggingface-cli login)"
    text = " ".join(str(err).split())
    return f"{kind}: {text[:300]}"
