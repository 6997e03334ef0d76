"""x's rows as two int8 digits each, for exact int8 x int8 products (`torch._int_mm`) with int8 weights.

A row x (K,) is written over its absolute maximum, sx = amax|x| / 127, as hi + lo / 254 with hi = round(x / sx)
and lo = round((x / sx - hi) * 254), both in [-127, 127]: x to ~15 bits, finer than bf16's 8 for all but the
row's smallest entries. With weights q (N, K) int8 and row scales s (N,) (`llada.fast.int8`), x @ (q * s)^T is
(hi @ q^T + (lo @ q^T) / 254) * sx * s: both digits' rows in one `torch._int_mm` (int32, exact: at most
127 * 127 * K), then the sum and the scales in fp32. A row's result depends on that row alone, bit for bit, at
any row count.

    int8_digits(x)                 the split (`Digits`), once per input: rounding by adding 1.5 * 2^23
                                   (torch.round's bits; torch.round has no vectorized CPU loop here)
    int8_linear_intmm(x, q, s)     one product on a fresh split: the int8 linear layers' kernel
    grouped_intmm(d, rows, ...)    several experts' products on one split (a token goes to K experts: its row
                                   is split once, not K times): the int8 experts' many rows
    int8_linear_intmm_ref(x, q, s) the steps as the definition reads them (fp32 copies, torch.round): the bits
                                   the others are tested against (tests/test_int8_digits.py)

Each takes a split of one digit too (`int8_digits(x, digits=1)`, or `Digits.first()` of a split made for others):
x to its first digit alone, ~8 bits over the row's maximum, one product of M rows instead of 2M. The routed
experts' many rows use it (`llada.fast.int8.EXPERT_DIGITS`): there the product is bound by its arithmetic, and
the weights' own int8 rounding outweighs the second digit's share of the error many times over.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .team import products, serial

ROUNDER = 1.5 * 2 ** 23  # u + ROUNDER - ROUNDER rounds fp32 |u| < 2^22 to the nearest integer, ties to even


def round_half_even(u: torch.Tensor) -> torch.Tensor:
    """fp32 u (|u| < 2^22) -> round(u), a new fp32 tensor: adding 1.5 * 2^23 leaves no fraction bits (the sum
    lies in [2^23, 2^24), spaced by 1), so the add itself rounds, to even; subtracting it back is exact.
    torch.round's bits (but -0.0 comes out as 0.0), in two vectorized passes: torch.round has no vectorized
    CPU loop (measured ~4 ms for 21 x 1024 against ~13 us)."""
    return torch.add(u, ROUNDER).sub_(ROUNDER)


@dataclass
class Digits:
    """Rows x (M, K) as two int8 digits each over the row's absolute maximum: x ~ (hi + lo / 254) * scale.

    codes (2, M, K) int8 (or (1, M, K): the first digit alone): hi = round(x / scale) then
    lo = round((x / scale - hi) * 254), both in [-127, 127];
    scale (M, 1) fp32 = amax|x| / 127. A row's digits depend on that row alone."""

    codes: torch.Tensor
    scale: torch.Tensor

    @property
    def rows(self) -> int:
        return self.codes.shape[1]

    @property
    def count(self) -> int:
        """How many digits a row has here: 2, or 1 (the first alone)."""
        return self.codes.shape[0]

    def first(self) -> "Digits":
        """The first digit alone (a view): codes (1, M, K), the same scales."""
        return Digits(self.codes[:1], self.scale)


def int8_digits(x: torch.Tensor, digits: int = 2) -> Digits:
    """x (..., K) float -> its rows' `Digits`, both or (digits=1) the first alone (`int8_linear_intmm_ref` makes
    the same ones, slower)."""
    K = x.shape[-1]
    flat = x.reshape(-1, K)  # (M, K)
    sx = flat.abs().amax(-1, keepdim=True).float().clamp_min_(1e-30).div_(127)  # (M, 1); abs, max exact in x's dtype
    u = torch.div(flat, sx)  # (M, K) fp32 (bf16 x promotes exactly), in [-127, 127]
    codes = torch.empty(digits, *flat.shape, dtype=torch.int8, device=x.device)  # (digits, M, K)
    if digits == 1:
        codes[0].copy_(u.add_(ROUNDER).sub_(ROUNDER))  # round_half_even in place: u is not read again
        return Digits(codes, sx)
    hi = round_half_even(u)
    codes[0].copy_(hi)
    codes[1].copy_(round_half_even(u.sub_(hi).mul_(254)))  # the rest, in [-127, 127]
    return Digits(codes, sx)


def combine_digits(acc: torch.Tensor, hi: torch.Tensor | slice, lo: torch.Tensor | slice, sx: torch.Tensor,
                   s: torch.Tensor, dtype: torch.dtype, out: torch.Tensor | None = None) -> torch.Tensor:
    """acc (R, N) int32, the products of both digits' rows (`hi`, `lo`: which rows, a slice or an index),
    -> (acc[lo] / 254 + acc[hi]) * sx * s (M, N) in `dtype` (written into `out` where given): sx (M, 1), s (N,) or
    (M, N) fp32."""
    pick = (lambda i: acc[i]) if isinstance(hi, slice) else (lambda i: acc.index_select(0, i))
    y = torch.div(pick(lo), 254).add_(pick(hi))  # (M, N) fp32 (int32 promotes): |acc| <= 127 * 127 * K, as .float()
    return _cast(y.mul_(sx).mul_(s), dtype, out)


def _cast(y: torch.Tensor, dtype: torch.dtype, out: torch.Tensor | None) -> torch.Tensor:
    """y in `dtype`: a new tensor, or written into `out` (the same rounding)."""
    return y.to(dtype) if out is None else out.copy_(y)


def int8_linear_intmm(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """x (..., K) @ (q * s)^T on integer products: each row of x written as two int8 digits over its absolute
    maximum (`int8_digits`, x to ~15 bits, finer than bf16's 8 for all but a row's smallest entries), both
    digits in one exact int8 x int8 product (`torch._int_mm`, int32), then scaled by sx and s. A row's result
    depends on that row alone, bit for bit, at any row count; the bits of `int8_linear_intmm_ref`. One digit
    alone was faster but moved the logits (top-1 agreement 0.77 against 0.78)."""
    K, N = q.shape[-1], q.shape[0]
    with serial():  # the split and the scales on this thread alone, the product on the team (`llada.fast.team`)
        d = int8_digits(x)
        M = d.rows
        with products():
            acc = torch._int_mm(d.codes.view(2 * M, K), q.T)  # (2M, N) int32, exact
        y = combine_digits(acc, slice(0, M), slice(M, 2 * M), d.scale, s.float(), x.dtype)
    return y.view(*x.shape[:-1], N)


def int8_linear_intmm_ref(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor, digits: int = 2) -> torch.Tensor:
    """`int8_linear_intmm` as the definition reads, step by step on fp32 copies (torch.round): the same bits.
    digits=1: x to its first digit alone, (hi @ q^T) * sx * s (`grouped_intmm` on a one-digit split)."""
    K, N = q.shape[-1], q.shape[0]
    flat = x.reshape(-1, K).float()  # (M, K)
    M = flat.shape[0]
    sx = flat.abs().amax(-1, keepdim=True).clamp_min(1e-30) / 127  # (M, 1)
    u = flat / sx  # (M, K) in [-127, 127] (a new tensor: x itself may be flat)
    hi = u.round()
    if digits == 1:
        y = torch._int_mm(hi.to(torch.int8), q.T).float()  # (M, N), exact in int32
    else:
        lo = u.sub_(hi).mul_(254).round_()  # the rest, in [-127, 127]
        acc = torch._int_mm(torch.cat([hi, lo]).to(torch.int8), q.T).float()  # (2M, N): at most 127 * 127 * K
        y = acc[M:].div_(254).add_(acc[:M])  # (M, N)
    return y.mul_(sx).mul_(s.float()).to(x.dtype).view(*x.shape[:-1], N)


def grouped_intmm(d: Digits, rows: torch.Tensor | None, sizes: list[int], experts: list[int], q: torch.Tensor,
                  s: torch.Tensor, dtype: torch.dtype, out: torch.Tensor | None = None) -> torch.Tensor:
    """Several experts' products on one digit split: `int8_linear_intmm` of each expert's rows, the same bits
    (`int8_linear_intmm_ref(..., digits=1)`'s on a split of one digit).

    d: the digits of M rows; rows (P,) which of them, sorted by expert (None: all M, in order): `sizes[j]` rows
    for expert `experts[j]`, one after another; q (E, N, K) int8, s (E, N). -> (P, N) in `dtype` (written into
    `out` where given). The rows' digits are gathered into one int8 buffer, each expert's hi rows then its lo
    rows (its block), one `torch._int_mm` per block into one int32 buffer; the digits' sum and both scales for
    all P rows at once."""
    if d.count == 1:
        return _grouped_first_digit(d, rows, sizes, experts, q, s, dtype, out)
    rows = torch.arange(d.rows, device=q.device) if rows is None else rows
    K, N, M, P = q.shape[-1], q.shape[-2], d.rows, rows.numel()
    dev = rows.device
    n = torch.tensor(sizes, device=dev)  # (G,) rows per block
    begin = torch.cumsum(n, 0) - n  # (G,) first row of each expert among the P
    b, m = begin.repeat_interleave(n), n.repeat_interleave(n)  # (P,) each row's expert's first row and count
    hi = torch.arange(P, device=dev) + b  # (P,) where each row's hi digits sit in the blocks (a block: 2 n rows)
    lo = hi + m
    index = torch.empty(2 * P, dtype=torch.long, device=dev)
    index[hi], index[lo] = rows, rows + M
    codes = d.codes.view(2 * M, K).index_select(0, index)  # (2P, K) int8, expert by expert
    acc = torch.empty(2 * P, N, dtype=torch.int32, device=dev)
    with products():
        block = [2 * n for n in sizes]
        for e, c, a in zip(experts, codes.split(block), acc.split(block)):
            torch._int_mm(c, q[e].T, out=a)  # (2 size, N), exact
    scale = s.index_select(0, torch.tensor(experts, device=dev).repeat_interleave(n)).float()  # (P, N)
    return combine_digits(acc, hi, lo, d.scale.index_select(0, rows), scale, dtype, out)


def _grouped_first_digit(d: Digits, rows: torch.Tensor | None, sizes: list[int], experts: list[int],
                         q: torch.Tensor, s: torch.Tensor, dtype: torch.dtype,
                         out: torch.Tensor | None = None) -> torch.Tensor:
    """`grouped_intmm` on a one-digit split: the rows' codes gathered expert by expert (rows None: d's rows as
    they are), one `torch._int_mm` per expert into one int32 buffer, then the rows' scales for all P rows at once
    and each expert's on its block (the reference's order of products). -> (P, N) in `dtype`."""
    codes = d.codes[0] if rows is None else d.codes[0].index_select(0, rows)  # (P, K) int8, expert by expert
    sx = d.scale if rows is None else d.scale.index_select(0, rows)  # (P, 1) fp32
    acc = torch.empty(codes.shape[0], q.shape[-2], dtype=torch.int32, device=q.device)  # (P, N)
    with products():
        for e, c, a in zip(experts, codes.split(sizes), acc.split(sizes)):
            torch._int_mm(c, q[e].T, out=a)  # (size, N), exact
    y = acc.float().mul_(sx)  # (P, N) fp32
    for e, block in zip(experts, y.split(sizes)):
        block.mul_(s[e].float())  # the expert's row scales
    return _cast(y, dtype, out)
