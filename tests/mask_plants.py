"""Plant one dropped mask at a time in a copy of the repository and run the poison tests against it.

    python tests/mask_plants.py        # prints one line per plant (~15 minutes on 2 CPU cores
                                       # when it ran the poison tests alone)

Each plant removes (or widens) the mask of one load or store of one kernel, or reads a weight with
another tensor's stride. A plant is caught when `tests/test_kernels_poison.py` or
`tests/test_kernels_fused_ops.py` (the same poisoned inputs and address check) fails on it; the earlier
kernel tests passed several of these (a read multiplied by a masked zero changes nothing but is still out of
bounds on a GPU). Not a test module itself (pytest collects test_*.py only): a check of the poison tests.
"""

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
K = "llada/fast/kernels/"
PLANTS = [  # (what, file, text, planted text)
    ("up: weight K mask", K+"fused_moe.py", "        w_mask = col_ok[:, None] & k_ok[None, :]\n", "        w_mask = col_ok[:, None] & (k_ok[None, :] | True)\n"),
    ("up: weight column mask", K+"fused_moe.py", "        w_mask = col_ok[:, None] & k_ok[None, :]\n", "        w_mask = (col_ok[:, None] | True) & k_ok[None, :]\n"),
    ("up: activation K mask", K+"fused_moe.py", "                    mask=row_ok[:, None] & k_ok[None, :], other=0.0).to(wg.dtype)", "                    mask=row_ok[:, None], other=0.0).to(wg.dtype)"),
    ("up: store column mask", K+"fused_moe.py", "    ok = _rows(row_ok, SWAP_AB) & _cols(col_ok, SWAP_AB)\n", "    ok = _rows(row_ok, SWAP_AB) & _cols(col_ok | True, SWAP_AB)\n"),
    ("silu: K mask", K+"fused_moe.py", "    mask = row_ok[:, None] & (ks < I)[None, :]\n", "    mask = row_ok[:, None] & (ks < 1 << 20)[None, :]\n"),
    ("down: weight K mask", K+"fused_moe.py", "        w = tl.load(w_rows + ks[None, :] * stride_k, mask=col_ok[:, None] & k_ok[None, :], other=0.0)", "        w = tl.load(w_rows + ks[None, :] * stride_k, mask=col_ok[:, None], other=0.0)"),
    ("down: h K mask", K+"fused_moe.py", "        a = tl.load(a_rows + ks[None, :] * stride_hk, mask=row_ok[:, None] & k_ok[None, :], other=0.0)", "        a = tl.load(a_rows + ks[None, :] * stride_hk, mask=row_ok[:, None], other=0.0)"),
    ("k-sum: column mask", K+"fused_moe.py", "        acc += tl.load(rows + k * stride_ym, mask=ok, other=0.0)", "        acc += tl.load(rows + k * stride_ym)"),
    ("k-sum: shared row mask", K+"fused_moe.py", "        shared = tl.load(rows + (TOP_K - 1) * stride_ym, mask=ok, other=0.0)", "        shared = tl.load(rows + (TOP_K - 1) * stride_ym)"),
    ("shared expert: row stride", K+"fused_moe.py", "tl.where(own, stride_sn, stride_wn)", "stride_wn"),
    ("act quantizer: K mask", K+"fp8.py", "                mask=mask, other=0.0).to(tl.float32)  # (BLOCK_M, GROUP)", "                mask=(rows < M)[:, None], other=0.0).to(tl.float32)  # (BLOCK_M, GROUP)"),
    ("weight quantizer: mask", K+"fp8.py", "                mask=mask, other=0.0).to(tl.float32)  # (TILE, TILE)", "                mask=(rows < N)[:, None], other=0.0).to(tl.float32)  # (TILE, TILE)"),
    ("sort: ids mask", K+"routing.py", "        e = tl.load(ids_ptr + (p // TOP_K) * stride_it + (p % TOP_K) * stride_ik, mask=p < num_pairs, other=0)", "        e = tl.load(ids_ptr + (p // TOP_K) * stride_it + (p % TOP_K) * stride_ik)"),
    ("router logits: h K mask", K+"router.py", "        m = t_ok[:, None] & (ks < H)[None, :]\n        if ADD_NORM:", "        m = t_ok[:, None] & (ks < H + 64)[None, :]\n        if ADD_NORM:"),
    ("router logits: weight K mask", K+"router.py", "                    mask=e_ok[:, None] & (ks < H)[None, :], other=0.0)  # (SLOTS, BLOCK_K)", "                    mask=e_ok[:, None], other=0.0)  # (SLOTS, BLOCK_K)"),
    ("router add + norm: K mask", K+"router.py", "        m = t_ok[:, None] & (ks < H)[None, :]\n        x = tl.load", "        m = t_ok[:, None] & (ks < H + 64)[None, :]\n        x = tl.load"),
    ("router add + norm: weight mask", K+"router.py", "    w = tl.load(nw_ptr + ks, mask=ks < H, other=0.0)", "    w = tl.load(nw_ptr + ks)"),
    ("fp8 linear: weight K mask", K+"linear.py", "                    mask=col_ok[:, None] & k_ok[None, :], other=0.0)  # (BLOCK_N, G) fp8", "                    mask=col_ok[:, None], other=0.0)  # (BLOCK_N, G) fp8"),
]


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "repo"  # the sources and tests (tests/conftest.py imports ui), not the weights
        shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", "assets", "bench",
                                                                   "docs", "*.safetensors.tmp"))
        caught = 0
        for name, path, old, new in PLANTS:
            target = copy / path
            text = target.read_text()
            assert old in text, f"{name}: the text to plant into is not in {path}"
            target.write_text(text.replace(old, new, 1))
            try:
                run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                      "tests/test_kernels_poison.py", "tests/test_kernels_fused_ops.py"], cwd=copy,
                                     capture_output=True, text=True)
            finally:
                target.write_text(text)
            caught += run.returncode != 0
            print(f"{name}: {'caught' if run.returncode else 'MISSED'} ({run.stdout.strip().splitlines()[-1]})",
                  flush=True)
        print(f"{caught} of {len(PLANTS)} planted masks caught")
        return 0 if caught == len(PLANTS) else 1


if __name__ == "__main__":
    sys.exit(main())
