"""Sort (token, expert) pairs by expert and pad each expert's run to the tile height: one Triton kernel.

A grouped GEMM wants every tile of BLOCK_M rows to belong to one expert. With T tokens and top-K
routing there are T*K pairs; pair p = t*K + k means "token t, its k-th expert". Sorting the pairs by
expert (stable) and padding each expert's run up to a multiple of BLOCK_M gives:

    sorted_pairs  (P,)  pair index at each row of a run, or T*K (a sentinel) on its padding rows
    block_expert  (P / BLOCK_M,)  the expert of each tile, or -1 for tiles past the last run

    ids = [[2, 0], [2, 1]]  (T=2, K=2), BLOCK_M=2, E=3
    pairs by expert: e0 -> [1], e1 -> [3], e2 -> [0, 2]
    sorted_pairs = [1, 4 | 3, 4 | 0, 2 | 4, 4 ...]   block_expert = [0, 1, 2, -1, ...]

Rows of tiles labelled -1 are never read (the GEMMs return at once there); the reference writes the
sentinel on them, the kernel leaves them as they were.

P is the worst case T*K + min(E, T*K)*(BLOCK_M - 1), rounded up to BLOCK_M, so the sizes depend only
on the shapes: no host synchronisation, and the launch can live in a CUDA graph. Experts without
pairs get no tile. The readable reference is `llada.fast.kernels.reference.sort_by_expert`.

The kernel is a single program (a few hundred pairs at decode: one CTA is plenty, and a grid would
need a second launch to combine counts). In chunks of CHUNK pairs it:
  1. counts pairs per expert (`tl.histogram`) -> counts (E,), padded (E,) and the exclusive prefix
     sum of padded run lengths, start (E,);
  2. writes the sentinel on the padding rows of each run, [start + count, start + padded): at most
     BLOCK_M - 1 per expert, one (E, BLOCK_M) masked store. Rows past the last run are never read
     (their tiles are labelled -1), so they are not written: no fill of all P rows;
  3. places each pair at start[e] + (pairs of e in earlier chunks) + (earlier pairs of e in this
     chunk), the last term from a CHUNK x CHUNK comparison (rows disjoint from step 2: no barrier);
  4. labels each run's tiles with its expert, one (E,) store per tile of the longest run (at decode one or
     two: a run holds at most T pairs), and -1 on the tiles past the last run, FILL at a time.
Step 4 once compared every tile with every expert's end, a (CHUNK, E) tile per 64 tiles (5 of them at
M = 32 with a 257th, shared expert); an H200 timed the whole launch at 19 us at M = 32. Estimate, not
measured: the stores save ~3 us of it; the two passes over the pairs (steps 1 and 3, one load latency per
64 pairs each) are the rest.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import Launch, run
from .reference import padded_rows


@triton.jit(do_not_specialize=["num_pairs", "num_tiles"])  # any token count: one compile
def _align_kernel(ids_ptr, pairs_ptr, block_expert_ptr, num_pairs, num_tiles,
                  stride_it, stride_ik,
                  E: tl.constexpr, TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, E_P2: tl.constexpr,
                  CHUNK: tl.constexpr, FILL: tl.constexpr):
    offs = tl.arange(0, CHUNK)
    counts = tl.zeros((E_P2,), dtype=tl.int32)
    for c0 in range(0, num_pairs, CHUNK):  # 1. pairs per expert
        p = c0 + offs
        e = tl.load(ids_ptr + (p // TOP_K) * stride_it + (p % TOP_K) * stride_ik, mask=p < num_pairs, other=0)
        counts += tl.histogram(e.to(tl.int32), E_P2, mask=p < num_pairs)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M  # (E_P2,) rows per expert run
    start = tl.cumsum(padded, 0) - padded  # (E_P2,) first row of each run
    tile_end = (tl.cumsum(padded, 0) // BLOCK_M)  # (E_P2,) one past each run's last tile
    pad = tl.arange(0, BLOCK_M)[None, :]  # 2. the padding rows of each run, (E_P2, BLOCK_M) at once
    pad_rows = (start + counts)[:, None] + pad
    tl.store(pairs_ptr + pad_rows, tl.zeros((E_P2, BLOCK_M), tl.int32) + num_pairs,
             mask=pad < (padded - counts)[:, None])
    seen = tl.zeros((E_P2,), dtype=tl.int32)  # pairs of each expert placed so far
    for c0 in range(0, num_pairs, CHUNK):  # 3. place the pairs
        p = c0 + offs
        ok = p < num_pairs
        e = tl.load(ids_ptr + (p // TOP_K) * stride_it + (p % TOP_K) * stride_ik, mask=ok, other=0).to(tl.int32)
        earlier = (e[:, None] == e[None, :]) & (offs[None, :] < offs[:, None]) & ok[None, :]  # (CHUNK, CHUNK)
        rank = tl.sum(earlier.to(tl.int32), axis=1)
        dest = tl.gather(start + seen, e, 0) + rank
        tl.store(pairs_ptr + dest, p.to(tl.int32), mask=ok)
        seen += tl.histogram(e, E_P2, mask=ok)
    runs = padded // BLOCK_M  # (E_P2,) tiles of each run: at most cdiv(T, BLOCK_M), one pair per token
    experts = tl.arange(0, E_P2)
    for j in range(0, tl.max(runs, 0)):  # 4. each run's j-th tile labelled with its expert, all runs at once
        tl.store(block_expert_ptr + tile_end - runs + j, experts, mask=j < runs)
    for t0 in range(tl.sum(runs, 0), num_tiles, FILL):  # tiles past the last run: -1
        t = t0 + tl.arange(0, FILL)
        tl.store(block_expert_ptr + t, tl.full((FILL,), -1, tl.int32), mask=t < num_tiles)


def plan_sort_by_expert(ids: torch.Tensor, num_experts: int, block_m: int
                        ) -> tuple[torch.Tensor, torch.Tensor, list[Launch]]:
    """ids (T, K) -> sorted_pairs (P,), block_expert (P // block_m,) int32 and the launch that fills them."""
    assert ids.dim() == 2, f"ids must be (T, K), got {tuple(ids.shape)}"
    assert block_m in (16, 32, 64), f"block_m must be 16, 32 or 64, got {block_m}"
    T, K = ids.shape
    rows = padded_rows(T * K, num_experts, block_m)
    pairs = torch.empty(rows, dtype=torch.int32, device=ids.device)  # (P,)
    block_expert = torch.empty(rows // block_m, dtype=torch.int32, device=ids.device)  # (P / block_m,)
    e_p2 = triton.next_power_of_2(num_experts)
    launch = Launch(_align_kernel, (1,),
                    (ids, pairs, block_expert, T * K, rows // block_m, *ids.stride()),
                    dict(E=num_experts, TOP_K=K, BLOCK_M=block_m, E_P2=e_p2, CHUNK=64, FILL=1024, num_warps=4))
    return pairs, block_expert, [launch]


def sort_by_expert(ids: torch.Tensor, num_experts: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton twin of `reference.sort_by_expert`: same outputs, one launch, no host sync."""
    pairs, block_expert, launches = plan_sort_by_expert(ids, num_experts, block_m)
    run(launches)
    return pairs, block_expert
