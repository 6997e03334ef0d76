"""The one train / held-out split rule: a stable hash of a key picks its bucket.

Tasks hash their prompt, the code corpus hashes the function's text: an item is held out when its
key falls in bucket 0 of `buckets`, whatever the seed that drew it, so no held-out item is ever trained on.
"""

from __future__ import annotations

import hashlib

SPLITS = ("train", "eval")


def is_held_out(key: str, buckets: int) -> bool:
    """True for the 1-in-`buckets` share of keys reserved for evaluation (blake2b, stable across runs)."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % buckets == 0


def check_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    return split
