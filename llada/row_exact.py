"""Row-exact matrix products: inside `row_exact()` every product of the model's own modules runs on rows
padded to a whole number of blocks (`padded_rows`), so that a row's result depends on that row alone (see
`llada.model`).

How a padded product runs (`tile_product`):

* on the CPU, as one plain product over the rows padded to a multiple of `CPU_ROWS` (4). MKL's sgemm /
  dgemm gives a row the same bits for any such count and at any place among the rows, on one thread or
  two (checked for every count from 4 to 1024 on the model's shapes, odd ones and LLaDA2.1-mini's,
  float32, float64 and bfloat16; 1 to 3 rows, or a count off a multiple of 4, take other kernels), and
  one product packs each weight once; `tests/test_batch.py` checks this on the machine it runs on;
* elsewhere, as a batched product of (TILE, K) tiles, at least two, each one product of fixed shape
  whatever the number of rows (one tile would let a threaded BLAS split the product itself).
"""

from __future__ import annotations

import contextvars

import torch
import torch.nn.functional as F
from torch import nn

TILE = 16  # rows per matrix-product tile of the row-exact path off the CPU
CPU_ROWS = 4  # on the CPU, a padded product's rows are a multiple of this
_ROW_EXACT = contextvars.ContextVar("row_exact", default=None)  # None: off; else the rows' token counts


def row_exact_on() -> bool:
    """Whether the row-exact path is on here."""
    return _ROW_EXACT.get() is not None


def row_sizes() -> tuple[int, ...]:
    """The token counts of the rows of this row-exact forward, in order (empty: off, or not given). Tokens
    past their sum are padding. A module that chooses its kernel by a count of tokens counts one row's own
    (`llada.fast.int8.Int8Experts`), so that the choice, like the result, does not depend on the rows beside."""
    return _ROW_EXACT.get() or ()


class row_exact:
    """`with row_exact(sizes):` inside, every matrix product of the model's own modules runs on padded rows
    (`tiled_linear`); `sizes` are the token counts of the forward's rows (`row_sizes`). A plain class, not a
    generator: a forward enters it once, at little cost."""

    __slots__ = ("token", "sizes")

    def __init__(self, sizes: tuple[int, ...] | list[int] = ()):
        self.sizes = tuple(sizes)

    def __enter__(self) -> None:
        self.token = _ROW_EXACT.set(self.sizes)

    def __exit__(self, *exc) -> None:
        _ROW_EXACT.reset(self.token)


def tiled_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x (N, K) @ weight (O, K)^T on padded rows (`tiled_matmul`) -> (N, O)."""
    out = tiled_matmul(x, transposed(weight))
    return out if bias is None else out + bias


def padded_rows(n: int, device: torch.device) -> int:
    """The rows a row-exact product of n rows runs on: whole blocks of `CPU_ROWS` on the CPU, at least
    one; elsewhere whole tiles of `TILE`, at least two."""
    if device.type == "cpu":
        return -(-n // CPU_ROWS) * CPU_ROWS or CPU_ROWS
    return max(2, -(-n // TILE)) * TILE


def padded_counts(counts: list[int], device: torch.device) -> list[int]:
    """`padded_rows` of each count, 0 for 0 (the experts' row counts of one product)."""
    if device.type == "cpu":
        return [-(-n // CPU_ROWS) * CPU_ROWS for n in counts]
    return [max(2, -(-n // TILE)) * TILE if n else 0 for n in counts]


def tiled_matmul(x: torch.Tensor, w_t: torch.Tensor) -> torch.Tensor:
    """x (N, K) @ w_t (K, O) on rows padded with zeros to `padded_rows` (`tile_product`) -> (N, O)."""
    n, k = x.shape
    rows = padded_rows(n, x.device)
    if rows > n:
        x = torch.cat([x, x.new_zeros(rows - n, k)])
    return tile_product(x, w_t)[:n]


cpu_product = torch.mm  # `tile_product` on the CPU, called by name where products come many to a forward
# (`llada.bench.split` swaps it, with `tile_product`, to count or skip the products)


def tile_product(x: torch.Tensor, w_t: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """x (P, K) @ w_t (K, O) -> (P, O) (into `out` when given), P = `padded_rows` of some row count.

    One plain product on the CPU (`cpu_product`), else a batched product of tiles (module docstring)."""
    if x.device.type == "cpu":
        return cpu_product(x, w_t, out=out)
    tiles = x.shape[0] // TILE
    tiled = None if out is None else out.view(tiles, TILE, -1)
    return torch.bmm(x.view(tiles, TILE, -1), w_t.expand(tiles, *w_t.shape), out=tiled).view(tiles * TILE, -1)


def expert_products(x: torch.Tensor, w: torch.Tensor, starts: list[int], used: list[int]) -> torch.Tensor:
    """x (P, in) -> (P, out): for each used expert e, its rows starts[e]:starts[e+1] (padded, one expert after
    another) times w[e]^T (w (E, out, in)), each one `tile_product` written in place; slices, not a split
    into every expert's views (most experts of a small forward have no rows)."""
    w_t = transposed(w)  # (E, in, out)
    out = x.new_empty(x.shape[0], w.shape[1])
    product = cpu_product if x.is_cpu else tile_product
    for e in used:
        a, b = starts[e], starts[e + 1]
        product(x[a:b], w_t[e], out=out[a:b])
    return out


def transposed(weight: torch.Tensor) -> torch.Tensor:
    """weight with its last two dims swapped; on the CPU a contiguous copy kept with the weight until it
    changes (MKL's batched product is 2-4x faster with a row-major right-hand side)."""
    own = weight.__dict__  # a hit, checked first, costs one call (`data_ptr`)
    if "_llada_transposed" in own and own["_llada_transposed"][0] == (weight._version, weight.data_ptr(),
                                                                      weight.dtype, weight.shape):
        return own["_llada_transposed"][1]
    if weight.device.type != "cpu":
        return weight.transpose(-1, -2)
    if weight.is_inference():  # e.g. a cast made inside inference mode: no version to watch, no keeping
        return weight.transpose(-1, -2).contiguous()
    stamp = (weight._version, weight.data_ptr(), weight.dtype, weight.shape)
    weight._llada_transposed = kept = (stamp, weight.detach().transpose(-1, -2).contiguous())
    return kept[1]


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear, or `tiled_linear` on the row-exact path (x (..., K) -> (..., O)).

    Rows already padded (a row-batched forward pads its tokens once, `LLaDA2MoE.forward_rows`) go to
    `tile_product` as they are: what `tiled_matmul` would do, without its padding steps (a 2-D x of
    whole blocks on the CPU, the row-batched forward's, goes there first and without reshaping)."""
    if not _ROW_EXACT.get():
        return F.linear(x, weight, bias)
    n = x.shape[0]
    if x.ndim == 2 and x.is_cpu and n and not n % CPU_ROWS:
        out = cpu_product(x, transposed(weight))
        return out if bias is None else out + bias
    x2 = x.reshape(-1, x.shape[-1])  # (N, K)
    n = x2.shape[0]
    if n and n == padded_rows(n, x.device):
        out = tile_product(x2, transposed(weight))
        out = out if bias is None else out + bias
    else:
        out = tiled_linear(x2, weight, bias)
    return out.view(*x.shape[:-1], weight.shape[0])


def project(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """module(x); an nn.Linear goes through `linear` (other modules, e.g. FP8 ones, run as they are)."""
    return linear(x, module.weight, module.bias) if type(module) is nn.Linear else module(x)
