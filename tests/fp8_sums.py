"""How close a compiled FP8 GEMM may come to the PyTorch reference when both read the same e4m3 codes.

Both sides multiply the same codes and scales; the kernels (`_scaled_dot` in llada/fast/kernels/fused_moe.py)
already promote each 128-wide K step's partial product into an fp32 accumulator with its two scales, the
interval the DeepSeek-V3 report recommends (section 3.3.2). What is left is the sum *inside* one step:

* Triton's CPU interpreter sums a dot in numpy fp32: it agrees with the reference to ~1e-7.
* Hopper's FP8 tensor core (wgmma e4m3) keeps about 14 mantissa bits while it adds the products of one
  instruction chain (the report measured it on H800), and Triton lets it accumulate all four k32
  wgmma's of a 128-wide step that way (its sm90 default `max_num_imprecise_acc` is 2^30): each step's
  partial is off by ~2^-13 relative. The H200 lease (issue #33) measured rel. RMSE 1.0e-4 .. 1.4e-4 for
  `fp8_linear` against the reference. Ada's mma.sync e4m3 is not documented to do better.

So the bound is the interpreter's 1e-5 on the CPU, and 5e-4 on a GPU (3.5x the worst measured, half of
1e-3, below which no real fault lands: a wrong or stale scale, a K step lost or read twice are >= 1e-2
at the tests' shapes).
"""

import torch

SAME_CODES_CPU = 1e-5
SAME_CODES_GPU = 5e-4


def same_codes_tolerance(device: torch.device | str) -> float:
    """The rel. RMSE a Triton FP8 GEMM on `device` may show against the reference on the same codes."""
    return SAME_CODES_GPU if torch.device(device).type == "cuda" else SAME_CODES_CPU
