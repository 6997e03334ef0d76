"""Where a row-batched forward's time goes: its matrix products against everything else, per batch size.

For each B in `--sizes`, the first B of the `--rows` held-out items that `llada.bench batch --rows`
decodes (S mode; each item's first decode window of 32 tokens) run through `LLaDA2MoE.forward_rows`
again and again, alternating two ways: as they are, and with every row-exact matrix product
(`tile_product`, `cpu_product`: the projections, the experts, the output layer) skipped (its output left as zeros).
The routers still run, but hand on the experts of the real forward (zeros alone would send every token
to the same experts and hide what each used expert costs), so both ways do the same work around the
products. The difference is the products' time; the rest is everything else (attention with its own
two products, norms, routing, bookkeeping). One process; the best forward of each run of `--inner`, the
median over `--repeats` alternations, so a machine whose speed drifts drifts for both ways alike. The
products' floating-point operations are counted over one forward, and their rate is set beside that of
one large product (1024 x 1024 x 1024) on the same threads: how close they run to what the BLAS gives.

    python -m llada.bench split [--sizes 1 8] [--rows 96] [--repeats 20] [--inner 10] [--threads 2]

Batching pays where a part grows more slowly than B: when the products grow by more than B / 3 from
B = 1 to B, they alone keep batching's gain under 3x, and only the rest can lift it.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time

import torch

from .. import model as model_module
from .. import row_exact as row_exact_module
from ..loop import Run
from ..model import RowInput
from .batch import workload
from .timing import device_info, start, write_report


@contextlib.contextmanager
def products_replaced(product):
    """Inside: every row-exact matrix product of the model is `product(x, w_t, out=None)` (`tile_product`, and
    `cpu_product`, the CPU's, that the experts and the padded projections call by name); yields the real one."""
    real_tile, real_cpu = row_exact_module.tile_product, row_exact_module.cpu_product

    def real(x, w_t, out=None):
        return real_cpu(x, w_t, out=out) if x.is_cpu else real_tile(x, w_t, out)

    row_exact_module.tile_product = row_exact_module.cpu_product = product
    try:
        yield real
    finally:
        row_exact_module.tile_product, row_exact_module.cpu_product = real_tile, real_cpu


def products_skipped():
    """Inside: every row-exact matrix product writes zeros instead."""
    def zeros(x, w_t, out=None):
        return out.zero_() if out is not None else x.new_zeros(x.shape[0], w_t.shape[1])

    return products_replaced(zeros)


def recorded_routes(model, rows: list[RowInput]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every router's (expert ids, weights) of one `forward_rows(rows)`, in call order."""
    routes, real = [], model_module.Router.forward

    def recording(router, h):
        out = real(router, h)
        routes.append(out)
        return out

    model_module.Router.forward = recording
    try:
        with torch.inference_mode():
            model.forward_rows(rows)
    finally:
        model_module.Router.forward = real
    return routes


@contextlib.contextmanager
def routes_kept(routes: list[tuple[torch.Tensor, torch.Tensor]]):
    """Inside: each router call computes as usual, then hands on the next of `routes` (round and round)."""
    real, at = model_module.Router.forward, [0]

    def kept(router, h):
        real(router, h)
        out = routes[at[0] % len(routes)]
        at[0] += 1
        return out

    model_module.Router.forward = kept
    try:
        yield
    finally:
        model_module.Router.forward = real


def product_flops(model, rows: list[RowInput]) -> int:
    """Floating-point operations of the row-exact matrix products of one `forward_rows(rows)` (padding rows
    included: they are computed)."""
    count = [0]

    def counted(x, w_t, out=None):
        count[0] += 2 * x.shape[0] * x.shape[1] * w_t.shape[1]
        return real(x, w_t, out=out)

    with products_replaced(counted) as real, torch.inference_mode():
        model.forward_rows(rows)
    return count[0]


def large_product_rate(repeats: int = 5) -> float:
    """GFLOP/s of the best of `repeats` float32 products of 1024 x 1024 by 1024 x 1024 on this machine."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * 1024 ** 3 / best / 1e9


def first_windows(model, prompts, cfg, mask_id: int, eos_id: int) -> list[RowInput]:
    """Each prompt's first decode forward as a row: its window from 0, over its own fresh cache."""
    rows = []
    for prompt in prompts:
        run = Run(model, prompt, cfg, mask_id, eos_id, "dynamic")
        rows.append(RowInput(run.x[0, :cfg.block_length], 0, None, run.cache, True))
    return rows


def best_ms(model, rows: list[RowInput], inner: int) -> float:
    best = float("inf")
    for _ in range(inner):
        start = time.perf_counter()
        model.forward_rows(rows)
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def measure(size: int, model, prompts, cfg, mask_id, eos_id, repeats: int, inner: int) -> dict:
    rows = first_windows(model, prompts[:size], cfg, mask_id, eos_id)
    routes = recorded_routes(model, rows)
    whole, rest = [], []
    with torch.inference_mode():
        best_ms(model, rows, inner)  # warm-up
        for _ in range(repeats):
            whole.append(best_ms(model, rows, inner))
            with products_skipped(), routes_kept(routes):
                rest.append(best_ms(model, rows, inner))
    total, other = statistics.median(whole), statistics.median(rest)
    flops = product_flops(model, rows)
    return {"batch": size, "tokens": sum(r.ids.shape[0] for r in rows), "forward_ms": round(total, 3),
            "products_ms": round(total - other, 3), "other_ms": round(other, 3), "products_gflop": flops / 1e9,
            "products_gflop_per_s": round(flops / max(total - other, 1e-6) / 1e6, 1)}


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m llada.bench split", description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rows", type=int, default=96,
                        help="the batch bench's workload to take the rows from (default 96)")
    parser.add_argument("--repeats", type=int, default=20, help="alternations of the two ways (default 20)")
    parser.add_argument("--inner", type=int, default=10, help="forwards per alternation, best kept (default 10)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    parser.add_argument("--out", default=None, help="JSON path (default bench/results/split-cpu.json)")
    args = parser.parse_args(argv)
    if min(args.sizes) < 1 or args.repeats < 1 or args.inner < 1:
        parser.error("--sizes, --repeats and --inner must be positive")
    if args.rows < max(args.sizes):
        parser.error(f"--rows {args.rows} is fewer than the largest size {max(args.sizes)}")
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    start(args.threads)
    device = torch.device("cpu")  # the split of a CPU forward
    model, prompts, cfg, mask_id, eos_id = workload("embedded", args.rows, "S", device)
    sizes = [measure(s, model, prompts, cfg, mask_id, eos_id, args.repeats, args.inner) for s in args.sizes]
    large = round(large_product_rate(), 1)
    base = sizes[0]
    for row in sizes:
        row["products_vs_first"] = round(row["products_ms"] / base["products_ms"], 2)
        row["other_vs_first"] = round(row["other_ms"] / base["other_ms"], 2)
        print(f"B={row['batch']:2d}: forward {row['forward_ms']:.2f} ms = products {row['products_ms']:.2f} "
              f"({row['products_gflop']:.3f} GFLOP, {row['products_gflop_per_s']:.0f} GFLOP/s) + other "
              f"{row['other_ms']:.2f}; vs B={base['batch']}: products {row['products_vs_first']}x, "
              f"other {row['other_vs_first']}x")
    print(f"one 1024 x 1024 x 1024 product: {large:.0f} GFLOP/s on {torch.get_num_threads()} threads")
    report = device_info(device) | {"bench": "split", "threads": torch.get_num_threads(), "repeats": args.repeats,
                                    "inner": args.inner, "rows": args.rows, "large_product_gflop_per_s": large,
                                    "sizes": sizes}
    out = write_report(report, args.out, "bench/results/split-cpu.json")
    print(f"wrote {out}", file=sys.stderr)
    return 0
