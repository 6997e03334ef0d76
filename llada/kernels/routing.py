"""Sort (token, expert) pairs by expert and pad each expert's run to the tile height.

A grouped GEMM wants every tile of BLOCK_M rows to belong to one expert. With T tokens and top-K
routing there are T*K pairs; pair p = t*K + k means "token t, its k-th expert". Sorting the pairs by
expert and padding each expert's run up to a multiple of BLOCK_M gives:

    sorted_pairs  (P,)  pair index at each padded row, or T*K (a sentinel) on padding rows
    block_expert  (P / BLOCK_M,)  the expert of each tile, or -1 for tiles past the last run

    ids = [[2, 0], [2, 1]]  (T=2, K=2), BLOCK_M=2, E=3
    pairs by expert: e0 -> [1], e1 -> [3], e2 -> [0, 2]
    sorted_pairs = [1, 4 | 3, 4 | 0, 2 | 4, 4 ...]   block_expert = [0, 1, 2, -1, ...]

P is the worst case T*K + min(E, T*K)*(BLOCK_M - 1), rounded up to BLOCK_M, so that the sizes depend
only on the shapes: no host synchronisation, and the launch can be captured in a CUDA graph. Experts
without tokens get no tile at all. Plain PyTorch ops: this runs on any device.
"""

from __future__ import annotations

import torch


def padded_rows(num_pairs: int, num_experts: int, block_m: int) -> int:
    """Upper bound on rows after padding every non-empty expert run to a multiple of block_m."""
    worst = num_pairs + min(num_experts, num_pairs) * (block_m - 1)
    return -(-worst // block_m) * block_m


def sort_by_expert(ids: torch.Tensor, num_experts: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """ids (T, K) int -> sorted_pairs (P,) int32 and block_expert (P // block_m,) int32 (see module doc)."""
    flat = ids.reshape(-1)  # (T*K,)
    n = flat.numel()
    counts = torch.zeros(num_experts, dtype=torch.long, device=ids.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))  # (E,) pairs per expert; bincount would sync
    padded = (counts + block_m - 1) // block_m * block_m  # (E,) rows per expert after padding
    order = torch.argsort(flat, stable=True)  # pair indices grouped by expert
    expert_of = flat[order]
    rank = torch.arange(n, device=ids.device) - (torch.cumsum(counts, 0) - counts)[expert_of]
    dest = (torch.cumsum(padded, 0) - padded)[expert_of] + rank  # padded row of each sorted pair
    rows = padded_rows(n, num_experts, block_m)
    sorted_pairs = torch.full((rows,), n, dtype=torch.int32, device=ids.device)
    sorted_pairs[dest] = order.to(torch.int32)
    tile_ends = torch.cumsum(padded // block_m, 0)  # (E,) one past each expert's last tile
    tiles = torch.arange(rows // block_m, device=ids.device)
    block_expert = torch.searchsorted(tile_ends, tiles, right=True)  # E for tiles past the end
    block_expert = torch.where(block_expert < num_experts, block_expert, -1).to(torch.int32)
    return sorted_pairs, block_expert
