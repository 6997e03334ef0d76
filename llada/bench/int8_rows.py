"""One routed expert's two products against its row count: int8 kernels against the default's bf16 product.

    python -m llada.bench int8-rows                      # the load replica's and the mini's expert shapes
    python -m llada.bench int8-rows --rows 1 4 21 --shapes load --repeats 5

An expert of hidden size H and inner size I runs x (n, H) @ w13^T (2I rows) then (n, I) @ w2^T (H rows).
Per row count n, the variants take turns in one process (a busy machine's noise hits them alike):

    bf16     the default CPU load's product: x @ w^T with w^T kept row-major (`llada.row_exact.transposed`),
             rows padded to a multiple of 4 as on the row-exact path
    pack     `_weight_int8pack_mm` (`llada.fast.int8.int8_linear_pack`): reads the int8 codes, scales inside
    tiles    `int8_linear_tiles`: 512 rows of the codes at a time dequantized into a fresh bf16 tile
    scratch  the same tiles dequantized in one pass into one buffer kept across calls (`int8_linear_scratch`)
    intmm    `int8_linear_intmm`: x as two int8 digits per row, an exact int8 x int8 product (`torch._int_mm`):
             the int8 experts' kernel for an expert one row sends `MANY_ROWS` tokens or more

Each timing cycles over `--experts` experts (more bytes than the L3 cache holds), as a forward meets a new
expert each time. The median seconds per expert (both products) for each variant, and each int8 variant
over bf16, go to bench/results/int8-rows.json with the command, commit, machine and load average.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from ..fast.int8 import TILE_ROWS, padded_flat
from ..row_exact import padded_rows
from .int8_probe import load_now, where

SHAPES = {"load": (1024, 512), "mini": (2048, 512)}  # (H, I) of the replica's routed experts
ROWS = (1, 2, 4, 8, 16, 21, 32, 64)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m llada.bench int8-rows", description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--rows", nargs="+", type=int, default=list(ROWS))
    parser.add_argument("--experts", type=int, default=24, help="experts cycled through (bytes beyond L3)")
    parser.add_argument("--repeats", type=int, default=9, help="timed passes over the experts per variant")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", default=None, help="JSON path (default bench/results/int8-rows.json)")
    return parser.parse_args(argv)


def int8_linear_scratch(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor, held: dict = {}) -> torch.Tensor:  # noqa: B006
    """`int8_linear_tiles` with its tiles dequantized in one pass (q * s) into one buffer kept across calls
    (`held`, the bench's own: no bf16 copy of a weight outlives a call). Measured slower than bf16 at every
    row count here: the dequantization costs what the bytes saved would."""
    K, N = q.shape[-1], q.shape[0]
    flat = padded_flat(x)  # (M', K)
    out = flat.new_empty(flat.shape[0], N)
    rows = min(TILE_ROWS, N)
    if held.get("tile") is None or held["tile"].numel() < rows * K or held["tile"].dtype != x.dtype:
        held["tile"] = torch.empty(rows * K, dtype=x.dtype)
    tile = held["tile"][:rows * K].view(rows, K)
    for a in range(0, N, TILE_ROWS):
        b = min(N, a + TILE_ROWS)
        w = tile[:b - a]
        torch.mul(q[a:b], s[a:b, None].to(x.dtype), out=w)  # int8 codes times the scales, rounded once
        torch.mm(flat, w.T, out=out[:, a:b])
    return out[:x.numel() // K].view(*x.shape[:-1], N)


def variants(H: int, I: int, E: int) -> dict:
    """name -> expert(e, x (n, H)) -> (n, H): the two products of expert e in each variant."""
    from ..fast.int8 import int8_linear_pack, int8_linear_tiles, int8_linear_intmm, quantize_int8

    g = torch.Generator().manual_seed(0)
    w13 = (torch.randn(E, 2 * I, H, generator=g) * H ** -0.5).bfloat16()
    w2 = (torch.randn(E, H, I, generator=g) * I ** -0.5).bfloat16()
    t13, t2 = w13.transpose(1, 2).contiguous(), w2.transpose(1, 2).contiguous()  # (E, H, 2I), (E, I, H)
    q13, s13 = quantize_int8(w13)
    q2, s2 = quantize_int8(w2)

    def bf16(e, x):
        n = x.shape[0]
        xp = torch.cat([x, x.new_zeros(padded_rows(n, x.device) - n, H)])
        h = torch.mm(xp, t13[e])
        return torch.mm(h[:, :I] * h[:, I:], t2[e])[:n]  # the product's cost, not the SwiGLU's

    def int8(kernel):
        def run(e, x):
            h = kernel(x, q13[e], s13[e])
            return kernel(h[:, :I] * h[:, I:], q2[e], s2[e])
        return run

    return {"bf16": bf16, "pack": int8(int8_linear_pack), "tiles": int8(int8_linear_tiles),
            "scratch": int8(int8_linear_scratch), "intmm": int8(int8_linear_intmm)}


def measure(H: int, I: int, rows: list[int], E: int, repeats: int) -> list[dict]:
    """Per row count: median seconds per expert of each variant, the variants taking turns."""
    out = []
    runs = variants(H, I, E)
    for n in rows:
        x = torch.randn(n, H).bfloat16()
        times = {name: [] for name in runs}
        with torch.inference_mode():
            for rep in range(repeats + 1):
                for name, run in runs.items():
                    start = time.perf_counter()
                    for e in range(E):
                        run(e, x)
                    if rep:  # the first pass warms up
                        times[name].append((time.perf_counter() - start) / E)
        med = {name: statistics.median(t) for name, t in times.items()}
        out.append({"rows": n, "median_us_per_expert": {k: round(v * 1e6, 1) for k, v in med.items()},
                    "over_bf16": {k: round(v / med["bf16"], 3) for k, v in med.items() if k != "bf16"},
                    "load_average": load_now()})
        print(f"[int8-rows] H={H} I={I} n={n}: " + ", ".join(f"{k} {v * 1e6:.0f} us" for k, v in med.items()),
              file=sys.stderr)
    return out


def main(argv: list[str]) -> int:
    from .timing import start, write_report

    args = parse(argv)
    start(args.threads)
    report = {"bench": "int8-rows", "command": "python -m llada.bench int8-rows " + " ".join(argv), **where(),
              "threads": torch.get_num_threads(), "experts_cycled": args.experts, "repeats": args.repeats}
    for shape in args.shapes:
        H, I = SHAPES[shape]
        report[shape] = {"hidden": H, "inner": I, "by_rows": measure(H, I, args.rows, args.experts, args.repeats)}
    report["load_average_end"] = load_now()
    out = write_report(report, args.out, "bench/results/int8-rows.json")
    print(f"[int8-rows] wrote {out}", file=sys.stderr)
    return 0
