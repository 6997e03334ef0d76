"""Int8 weight-only quantization for the CPU: runtime modules, their kernels and a readable reference.

Format. A weight w (N, K) (N outputs, K inputs) is stored as int8 codes q (N, K) and one scale per
output row, s (N,) in bf16: w ~ q * s[:, None]. The scale is the row's absolute maximum / 127 rounded
*up* to a bf16 value, so that no weight clips and the scale the kernel multiplies by is exactly the
one the codes were made with. q = round(w / s), in [-127, 127]. The error of one weight is at most s/2,
a uniform rounding of 1/254 of the row's largest weight.

Kernels (measured on this machine's AVX-512 BF16 cores, one thread, bench/results/int8.json says more):

    int8_linear_pack(x, q, s)     torch.ops.aten._weight_int8pack_mm, the kernel gpt-fast uses: reads the
                                  int8 codes and scales them inside the product. With bf16 activations it
                                  is as fast as a bf16 product or faster for a few rows (an expert gets ~1-4
                                  rows of a 32-token block: it is bound by the bytes it reads, and reads half);
                                  2-5x slower than bf16 at 32 rows. It needs K a multiple of 16 (other K give
                                  wrong values or crash) and bf16 activations (fp32 runs 10-100x slower):
                                  x is cast to bf16 for it.
    int8_linear_tiles(x, q, s)    dequantizes 512 rows of q at a time into a bf16 (or x's dtype) buffer and
                                  runs one plain product per tile: 1.5-3x a bf16 product at 1-32 rows, any K
                                  (the dequantization costs what the bytes saved would).
    int8_linear_intmm(x, q, s)    x written as two int8 digits per row (~15 bits over the row's maximum:
                                  as close as pack to the reference), one exact int8 x int8 product of both
                                  (torch._int_mm, int32): any K; 0.3-0.8x the tiles at 1-32 rows. Against pack
                                  it depends on the machine's load: 1.5x pack at 21 rows on a quiet machine,
                                  faster than pack from ~8-12 rows with other work on the cores (int8-rows*.json
                                  in bench/results); in the whole forward it is the faster choice for an
                                  expert's many rows (int8-configs-03a5769.json). It lives in
                                  `llada.fast.int8_digits`, with `grouped_intmm`: several experts' products on
                                  one split of x (a token goes to K experts: its row is split once), same bits.
    int8_linear_ref(x, q, s)      the definition: x @ (q * s)^T in fp32; what the others are tested against.

On the row-exact path (`llada.row_exact`) a row's result must not depend on the rows beside it. Each kernel
gives a row the same bits at any row count (pack and intmm by construction; the tiles pad their rows to
`padded_rows` as every row-exact product does), so what remains is the choice of kernel. `Int8Linear` (the
attention, dense SwiGLU and shared-expert projections: all the block's tokens at once) runs its `impl`,
intmm, fixed when it is made. `Int8Experts` picks per expert and per row: the pack kernel for the few tokens
one row sends an expert (LLaDA2.1: ~1-4 of a 32-token block), intmm from `MANY_ROWS` (LLaDA2.2's block
routing: ~21 on the load replica), the count being that row's own (`llada.row_exact.row_sizes`), never its
neighbours'.

How many digits of x. The linear layers take both: x rounded to its first digit there moved the logits
(relative RMSE against the bf16 model 0.130 -> 0.156 on the LLaDA2.2 load replica, `digits_of_x` in
bench/results/int8-configs-2.2-f01a1cc.json). The routed experts' many rows take the first alone
(`EXPERT_DIGITS`): with LLaDA2.2's block routing an expert gets ~20-30 rows, where a product is bound by its
arithmetic and two digits cost what the bf16 product does; the first digit alone moved that RMSE by 0.0004 (the
weights' own int8 rounding is the 0.130) and took int8 / default from 1.18-1.22 to 1.02-1.05 (the same bench at
59f70d2 and at f01a1cc).

Threads. Between its products the int8 forward runs small steps (splits, scales, gathers), each one a
parallel region of torch's OpenMP team when it has more than 32768 elements; with the team's threads sleeping
between regions (`OMP_WAIT_POLICY=PASSIVE`), waking them costs more than the half of the work they take off
(a (256, 1024) int32 -> fp32 scale: 117 us on 2 threads, 39 us on one). So the modules run those steps on the
calling thread alone and give the team back for the products (`llada.fast.team`: a setting of that thread
only). On the LLaDA2.2 load replica int8 / default went from 1.00-1.05 wall (0.93-0.96 CPU) to 0.88-0.90
(0.86-0.87), the two commits' benches run by turns (bench/results/int8-configs-2.2-7f50593-{2,3}.json,
-ca4869c-{3,4}.json); 0.87-0.93 wall in all 12 rounds at ca4869c; LLaDA2.1's 0.85-0.88.

`llada.fast.int8_mlp.quantize_model_int8(model)` swaps the modules into a loaded model;
`llada.weights.checkpoint` quantizes tensor by tensor as the shards are read (`load_model(path, quantize="int8")`), and
`llada.weights.int8_checkpoint` writes an int8 checkpoint once that loads as it is. The embeddings, the
lm_head, the router and the norms are not quantized (the router picks experts from near-ties; the
vocabulary's two matrices are read a row at a time or once per forward).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..model import Experts, LLaDA2MoE
from ..row_exact import padded_rows, row_exact_on, row_sizes
from .int8_digits import Digits, grouped_intmm, int8_digits, int8_linear_intmm, int8_linear_intmm_ref
from .team import products, serial

IMPLS = ("pack", "tiles", "torch", "intmm")
PACK_K = 16  # the pack kernel's K must be a multiple of this (bf16)
TILE_ROWS = 512  # rows of q dequantized at a time by the tiles kernel (a bf16 tile of 512 x 2048 is 2 MiB)
COMPUTE = torch.bfloat16  # the pack kernel's activation dtype
MANY_ROWS = 12  # an expert's tokens from one row from which they run intmm (bench/results/int8-configs-*.json)
GROUP_PAIRS = 2048  # most (token, expert) pairs of one intmm group: at the mini's sizes ~100 MiB of buffers
LINEAR_IMPL = "intmm"  # the attention, dense and shared-expert projections' kernel
EXPERT_DIGITS = 1  # digits of x in the routed experts' many rows (intmm): the first alone (see the docstring)


QUANT_CHUNK = 1 << 22  # elements quantized at a time: bounds the fp32 temporaries (16 MiB) for the large matrices


def quantize_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w (..., N, K) float -> codes q (..., N, K) int8 and scales s (..., N) bf16, w ~ q * s[..., None].

    The row maximum is read from w as it is (aminmax: no fp32 copy, no abs) and the quotient made in fp32 in
    one pass, up to QUANT_CHUNK elements at a time: five passes over memory instead of eight (the loader
    quantizes every matrix as it reads it; measured 1.8x faster on one thread, bench/results/README.md).
    `quantize_int8_ref` is the definition; the two agree bit for bit (tests/test_int8.py)."""
    K = w.shape[-1]
    rows = w.detach().reshape(-1, K)  # (R, K)
    q = torch.empty(rows.shape, dtype=torch.int8, device=w.device)
    s = torch.empty(rows.shape[0], dtype=torch.bfloat16, device=w.device)
    step = max(1, QUANT_CHUNK // max(K, 1))
    for a in range(0, rows.shape[0], step):
        low, high = torch.aminmax(rows[a:a + step], dim=-1)  # (n,) each, in w's dtype: exact
        scale = _round_up_scale(torch.maximum(-low.float(), high.float()) / 127)  # (n,) bf16
        codes = torch.div(rows[a:a + step], scale.float()[:, None])  # (n, K) fp32 (bf16 w promotes exactly)
        q[a:a + step] = codes.round_().clamp_(-127, 127)
        s[a:a + step] = scale
    return q.view(w.shape), s.view(w.shape[:-1])


def _round_up_scale(wanted: torch.Tensor) -> torch.Tensor:
    """fp32 scales -> the nearest bf16 value not below them (an all-zero row gets a tiny scale)."""
    wanted = wanted.clamp_min(1e-30)
    s = wanted.to(torch.bfloat16)
    low = s.float() < wanted  # rounded down: one bf16 step up (positive values: the next bit pattern)
    return torch.where(low, (s.view(torch.int16) + 1).view(torch.bfloat16), s)


def quantize_int8_ref(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The definition `quantize_int8` computes faster: s = amax|w| / 127 rounded up to bf16, q = round(w / s)."""
    w = w.detach().float()
    s = _round_up_scale(w.abs().amax(-1) / 127)
    q = torch.round(w / s.float()[..., None]).clamp_(-127, 127).to(torch.int8)
    return q, s


def dequantize_int8(q: torch.Tensor, s: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """q (..., N, K) int8, s (..., N) -> w (..., N, K) in `dtype`."""
    return q.to(dtype) * s.to(dtype)[..., None]


def int8_linear_ref(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """x (..., K) @ (q * s)^T -> (..., N) in x's dtype, computed in fp32: the reference."""
    return F.linear(x.float(), dequantize_int8(q, s)).to(x.dtype)


def int8_linear_pack(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """The same contract on `_weight_int8pack_mm`: x cast to bf16, K a multiple of PACK_K."""
    K = q.shape[-1]
    assert K % PACK_K == 0, f"the int8 pack kernel needs K % {PACK_K} == 0, got K={K} (use impl='tiles')"
    flat = x.reshape(-1, K).to(COMPUTE).contiguous()  # (M, K)
    out = torch.ops.aten._weight_int8pack_mm(flat, q, s.to(COMPUTE))  # (M, N) bf16
    return out.to(x.dtype).view(*x.shape[:-1], q.shape[0])


def padded_flat(x: torch.Tensor) -> torch.Tensor:
    """x (..., K) as (M, K) rows, zero-padded to `padded_rows` on the row-exact path (the tiles' row count)."""
    K = x.shape[-1]
    flat = x.reshape(-1, K)  # (M, K)
    M = flat.shape[0]
    if row_exact_on() and padded_rows(M, x.device) > M:
        flat = torch.cat([flat, flat.new_zeros(padded_rows(M, x.device) - M, K)])
    return flat


def int8_linear_tiles(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """The same contract, dequantizing TILE_ROWS rows of q at a time into x's dtype (bf16 for fp32 too
    would round x; it stays as it is). On the row-exact path the rows are zero-padded to `padded_rows`."""
    K, N = q.shape[-1], q.shape[0]
    flat = padded_flat(x)  # (M', K)
    out = flat.new_empty(flat.shape[0], N)
    tile = torch.empty(min(TILE_ROWS, N), K, dtype=x.dtype, device=x.device)
    for a in range(0, N, TILE_ROWS):
        b = min(N, a + TILE_ROWS)
        w = tile[:b - a]
        w.copy_(q[a:b])  # int8 -> x's dtype
        w.mul_(s[a:b, None].to(x.dtype))
        torch.mm(flat, w.T, out=out[:, a:b])
    return out[:x.numel() // K].view(*x.shape[:-1], N)


KERNELS = {"pack": int8_linear_pack, "tiles": int8_linear_tiles, "torch": int8_linear_ref,
           "intmm": int8_linear_intmm}


def resolve_impl(impl: str, *ks: int) -> str:
    """'pack' where its K rule holds for every product (K in `ks`), else 'tiles'; the choice is checked."""
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {', '.join(IMPLS)}; got {impl!r}")
    if impl == "pack" and any(k % PACK_K for k in ks):
        return "tiles"  # e.g. a tiny model's expert width of 40: the pack kernel would be wrong there
    return impl


class Int8Linear(nn.Module):
    """A linear layer with int8 weights (N, K), bf16 row scales (N,) and the bias (N,) as it was, if any."""

    def __init__(self, weight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None = None,
                 impl: str = LINEAR_IMPL):
        super().__init__()
        self.impl = resolve_impl(impl, weight.shape[-1])
        self.register_buffer("weight", weight)
        self.register_buffer("scale", scale)
        self.bias = None if bias is None else nn.Parameter(bias.detach(), requires_grad=False)

    @classmethod
    def from_linear(cls, linear: nn.Linear, impl: str = LINEAR_IMPL) -> "Int8Linear":
        return cls(*quantize_int8(linear.weight), linear.bias, impl)

    @property
    def out_features(self) -> int:
        return self.weight.shape[0]

    @property
    def in_features(self) -> int:
        return self.weight.shape[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = KERNELS[self.impl](x, self.weight, self.scale)
        return out if self.bias is None else out + self.bias.to(out.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 rows, impl={self.impl}"


class Int8Experts(nn.Module):
    """Routed experts with int8 weights: w13 (E, 2I, H) + w13_scale (E, 2I), w2 (E, H, I) + w2_scale (E, H).

    forward(x (T, H), ids (T, K), weights (T, K)) -> (T, H), the contract of `llada.model.Experts`: the few
    pairs in a loop over their experts, each one's rows through its two products; the many on x's digits
    made once (`grouped_intmm`). `forward_ref` is the plain loop over every (expert, kernel), the same bits.

    The kernel follows the rows (with impl "pack"): an expert that one row of the forward sends fewer than
    `many_rows` tokens runs them on the pack kernel, which wins at few rows (it reads half a bf16 product's
    bytes); from `many_rows` on it is 1.2-1.6x the bf16 product (at ~21 rows), and those tokens run
    `int8_linear_intmm`, which made the whole forward 5% faster (bench/results/int8-configs-03a5769.json).
    The count is one row's own (`llada.row_exact.row_sizes`; outside the row-exact path, the whole call's),
    and both kernels give a token the same bits among any tokens, so a token's result never depends on the
    rows beside it.
    `many_rows=None` keeps every token on the pack kernel."""

    def __init__(self, w13, w13_scale, w2, w2_scale, impl: str = "pack", many_rows: int | None = MANY_ROWS):
        super().__init__()
        self.impl = resolve_impl(impl, w13.shape[-1], w2.shape[-1])
        self.many_rows = many_rows if self.impl == "pack" else None
        for name, t in (("w13", w13), ("w13_scale", w13_scale), ("w2", w2), ("w2_scale", w2_scale)):
            self.register_buffer(name, t)

    @classmethod
    def from_experts(cls, experts: Experts, impl: str = "pack") -> "Int8Experts":
        return cls(*quantize_int8(experts.w13), *quantize_int8(experts.w2), impl)

    def forward(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor,
                many: torch.Tensor | None = None, digits: Digits | None = None) -> torch.Tensor:
        """`many` (T, K): which pairs run intmm (default `many_pairs(ids)`; a slice of the experts across ranks
        passes its pairs' flags as one process would set them). The few pairs run expert by expert (`_few`),
        the many on one digit split of x per layer (`_many`; `digits`: x's split where the caller made it,
        `llada.fast.int8_mlp.Int8MoE`): the bits of `forward_ref`. The steps between the products run on this
        thread alone, the products on the team (`llada.fast.team`)."""
        with serial():
            return self._forward(x, ids, weights, many, digits)

    def _forward(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, many: torch.Tensor | None,
                 digits: Digits | None) -> torch.Tensor:
        T, K = ids.shape
        E = self.w13.shape[0]
        many = self.many_pairs(ids) if many is None else many
        group = ids.reshape(-1) + E * many.reshape(-1).long()  # (T*K,) e, + E where many: all few pairs first
        order = group.argsort(stable=True)  # pairs sorted by (many, expert)
        counts = torch.bincount(group, minlength=2 * E).tolist()  # (2E,) few pairs per expert, then many
        tokens = order // K  # (T*K,) each sorted pair's token
        few = sum(counts[:E])
        ys = x.new_empty(T * K, x.shape[-1])  # (T*K, H) one row per pair, sorted
        if few:
            ys[:few] = self._few(x, tokens[:few], counts[:E])
        if few < T * K:
            self._many(x, tokens[few:], counts[E:], digits, out=ys[few:])
        where = torch.empty_like(order)
        where[order] = torch.arange(T * K, device=x.device)  # (T*K,) each pair's row among the sorted
        out = ys.index_select(0, where)  # (T*K, H) back to (token, k) order: `forward_ref`'s out[order] = ys
        return (out.view(T, K, -1) * weights.to(x.dtype)[..., None]).sum(1)

    def _few(self, x: torch.Tensor, tokens: torch.Tensor, counts: list[int]) -> torch.Tensor:
        """x (T, H), tokens (P,) sorted by expert, `counts[e]` of them for e -> (P, H): `self.impl`'s kernel."""
        product, xs = KERNELS[self.impl], x[tokens]  # (P, H)
        ys, begin = torch.empty_like(xs), 0
        for e, n in enumerate(counts):
            if n:
                with products():
                    gate, up = product(xs[begin:begin + n], self.w13[e], self.w13_scale[e]).chunk(2, dim=-1)
                h = F.silu(gate) * up  # (n, I)
                with products():
                    ys[begin:begin + n] = product(h, self.w2[e], self.w2_scale[e])  # (n, H)
                begin += n
        return ys

    def _many(self, x: torch.Tensor, tokens: torch.Tensor, counts: list[int], digits: Digits | None = None,
              out: torch.Tensor | None = None) -> torch.Tensor:
        """The same contract on intmm: x's rows split into digits once (not once per pair: a token goes to K
        experts), the hidden rows of several experts at once, one `torch._int_mm` per expert and product.
        Experts go in groups of up to GROUP_PAIRS pairs (an expert's pairs never split), which bounds the
        int32 and fp32 buffers of a long prefill; a pair's bits do not depend on its group. The (P, H) result
        is written into `out` where given."""
        d = int8_digits(x, EXPERT_DIGITS) if digits is None else digits
        d, begin = d.first() if EXPERT_DIGITS == 1 else d, 0
        out = x.new_empty(tokens.numel(), x.shape[-1]) if out is None else out  # (P, H)
        for used in _expert_groups(counts, GROUP_PAIRS):
            sizes = [counts[e] for e in used]
            rows = tokens[begin:begin + sum(sizes)]  # (P,) this group's tokens, sorted by expert
            gate, up = grouped_intmm(d, rows, sizes, used, self.w13, self.w13_scale, x.dtype).chunk(2, dim=-1)
            h = F.silu(gate) * up  # (P, I) each of gate, up, h
            grouped_intmm(int8_digits(h, EXPERT_DIGITS), None, sizes, used, self.w2, self.w2_scale, x.dtype,
                          out[begin:begin + len(rows)])  # (P, H)
            begin += len(rows)
        return out

    def forward_ref(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor,
                    many: torch.Tensor | None = None, digits: Digits | None = None) -> torch.Tensor:
        """`forward` as a loop over (expert, kernel) groups, each pair's row through the two products (`digits`
        is not read: each product splits its own rows)."""
        T, K = ids.shape
        kernels = (KERNELS[self.impl], lambda x, q, s: int8_linear_intmm_ref(x, q, s, EXPERT_DIGITS))
        flat = ids.reshape(-1)  # (T*K,) pairs in (token, k) order
        many = self.many_pairs(ids) if many is None else many
        group = flat * 2 + many.reshape(-1).long()  # (T*K,) 2 e, + 1 where the pair's row sends e many tokens
        order = group.argsort(stable=True)  # pairs sorted by expert, the few before the many
        counts = torch.bincount(group, minlength=2 * self.w13.shape[0]).tolist()
        xs = x[order // K]  # (T*K, H) one row per pair, grouped by expert
        ys, begin = torch.empty_like(xs), 0
        for g, n in enumerate(counts):
            if n:
                e, product, rows = g // 2, kernels[g % 2], slice(begin, begin + n)
                gate, up = product(xs[rows], self.w13[e], self.w13_scale[e]).chunk(2, dim=-1)  # (n, I) each
                ys[rows] = product(F.silu(gate) * up, self.w2[e], self.w2_scale[e])  # (n, H)
                begin += n
        out = torch.empty_like(ys)
        out[order] = ys  # back to (token, k) order
        return (out.view(T, K, -1) * weights.to(x.dtype)[..., None]).sum(1)

    def many_pairs(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (T, K) -> (T, K) bool: True where the pair's expert gets at least `many_rows` pairs from the
        pair's own row (`row_sizes`; the tokens past them, padding, count as one more row)."""
        T, K = ids.shape
        sizes = row_sizes()
        if self.many_rows is None or not ids.numel():
            return torch.zeros_like(ids, dtype=torch.bool)
        if sum(sizes) > T:
            raise ValueError(f"the row-exact forward's rows hold {sum(sizes)} tokens, more than the {T} routed here")
        per_row = torch.tensor([*sizes, T - sum(sizes)], device=ids.device)  # (R + 1,) tokens per row, padding
        row = torch.repeat_interleave(torch.arange(len(per_row), device=ids.device), per_row)  # (T,) row of each
        key = row[:, None] * (int(ids.max()) + 1) + ids  # (T, K) (row, expert) of each pair
        return torch.bincount(key.reshape(-1))[key] >= self.many_rows

    def extra_repr(self) -> str:
        E, I2, H = self.w13.shape
        return (f"experts={E}, hidden={H}, inner={I2 // 2}, int8 rows, impl={self.impl}, "
                f"intmm from {self.many_rows} rows")


def _expert_groups(counts: list[int], most: int) -> list[list[int]]:
    """The experts with pairs (counts[e] > 0), in order, in runs of at most `most` pairs (one expert with more
    is a run of its own)."""
    groups, total = [], most
    for e, n in enumerate(counts):
        if n:
            if total + n > most:
                groups.append([])
                total = 0
            groups[-1].append(e)
            total += n
    return groups


def int8_linears(module: nn.Module) -> list[tuple[nn.Module, str]]:
    """(parent, name) of every nn.Linear below `module` (the router is not one)."""
    out = []
    for name, child in module.named_children():
        if isinstance(child, nn.Linear):
            out.append((module, name))
        else:
            out += int8_linears(child)
    return out


def quantized_modules(model: LLaDA2MoE) -> list[tuple[nn.Module, str]]:
    """(parent, name) of every module int8 replaces: each layer's routed experts and linears, in order."""
    out = []
    for layer in model.layers:
        out += int8_linears(layer.attention)
        if isinstance(getattr(layer.mlp, "experts", None), Experts):
            out.append((layer.mlp, "experts"))
        out += int8_linears(layer.mlp)  # dense SwiGLU or the shared experts
    return out
