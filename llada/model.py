"""The LLaDA2 MoE forward pass: every layer of the model in this file, its three leaves beside it.

The leaves are imported from their own modules (this one re-exports nothing): RMSNorm and RoPE
(`llada.norm_rope`), the KV cache (`llada.kv_cache`), the row-exact products (`llada.row_exact`).

A pre-norm transformer whose attention is *block-causal*: the sequence is cut into blocks of
`block_length` tokens from position 0, and a query in block b sees every key in blocks 0..b
(bidirectionally inside b). Each layer:

    h = x + dense(attn(rope(qk_norm(split(qkv(rmsnorm(x)))))))      grouped-query attention
    y = h + ffn(rmsnorm(h))        ffn = SwiGLU (first layers) or MoE (the rest)

MoE: a sigmoid router in fp32 picks experts using biased scores, from the best groups (LLaDA2.1) or from
the experts its routing block of 32 tokens may use (LLaDA2.2, `block_topk`), weights them with the
unbiased scores (normalised, times routed_scaling_factor), and adds an always-on shared expert.
Letter legend: B batch, T tokens of this call, S keys (cache + T), H hidden, D head dim, E experts,
K experts per token, I expert width.

Because a finished block never sees later ones, its keys/values never change: `KVCache` keeps them
so that a decode step only runs the active window.

`forward_rows` runs several sequences (rows) in one forward, each with its own window, positions,
attention mask and KV cache. It is *row-exact*: a row's logits are bit for bit those it gets alone.
Token-wise work runs on all rows' tokens at once, and every matrix product runs on rows padded the
row-exact way (`llada.row_exact.padded_rows`): a BLAS picks its kernel, and so the order of its sums,
by the shape of a product, so a product over an arbitrary number of rows could round a row differently
than its own. Attention runs per group of alike rows, each (row, KV head) with the shapes of a lone run.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig
from .kv_cache import KVCache
from .norm_rope import RMSNorm, add_norm, norm_rope, rope_cos_sin, rope_table
from .row_exact import expert_products, linear, padded_counts, padded_rows, project, row_exact, row_exact_on

def block_causal_mask(groups: torch.Tensor, key_groups: torch.Tensor | None = None) -> torch.Tensor:
    """Boolean attention mask (T, S): query i may see key j iff group[j] <= group[i].

    `groups` is each position's block index (or a merged index for blocks that see each other)."""
    key_groups = groups if key_groups is None else key_groups
    return key_groups[None, :] <= groups[:, None]


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_head, self.n_kv, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        qkv_out = (self.n_head + 2 * self.n_kv) * self.head_dim
        self.query_key_value = nn.Linear(cfg.hidden_size, qkv_out, bias=cfg.use_qkv_bias)
        self.query_layernorm = RMSNorm(self.head_dim, cfg.rms_norm_eps) if cfg.use_qk_norm else nn.Identity()
        self.key_layernorm = RMSNorm(self.head_dim, cfg.rms_norm_eps) if cfg.use_qk_norm else nn.Identity()
        self.dense = nn.Linear(self.n_head * self.head_dim, cfg.hidden_size, bias=cfg.use_bias)

    def qkv(self, x, cos, sin) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, T, H) -> q (B, nH, T, D), k, v (B, nKV, T, D): projected, QK-normed, rotated."""
        B, T, _ = x.shape
        qkv = project(self.query_key_value, x).view(B, T, self.n_head + 2 * self.n_kv, self.head_dim)
        q, k, v = qkv.split([self.n_head, self.n_kv, self.n_kv], dim=2)
        q = norm_rope(self.query_layernorm, q, cos, sin)  # (B, nH, T, D)
        k = norm_rope(self.key_layernorm, k, cos, sin)  # (B, nKV, T, D)
        return q, k, v.transpose(1, 2)

    def attend(self, q, k, v, mask=None, cache: KVCache | None = None, layer: int = 0, start: int = 0):
        """Attention of q (B, nH, T, D) over the cache's keys and k, v (B, nKV, T, D) -> (B, nH, T, D)."""
        if cache is not None:
            k, v = cache.write(layer, start, k, v)  # (B, nKV, S, D)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.head_dim ** -0.5,
                                              enable_gqa=self.n_head != self.n_kv)

    def forward(self, x, cos, sin, mask=None, cache: KVCache | None = None, layer: int = 0, start: int = 0):
        B, T, _ = x.shape
        fused = getattr(self.query_layernorm, "qkv_rope_cache", None)
        if fused is not None and isinstance(start, torch.Tensor):  # the static path: one launch to the cache
            qkv = project(self.query_key_value, x).view(B, T, self.n_head + 2 * self.n_kv, self.head_dim)
            q = fused(qkv, self.key_layernorm, cos, sin, cache.k[layer], cache.v[layer], start)  # (B, nH, T, D)
            out = self.attend(q, cache.k[layer], cache.v[layer], mask)
        else:
            out = self.attend(*self.qkv(x, cos, sin), mask, cache, layer, start)  # (B, nH, T, D)
        return project(self.dense, out.transpose(1, 2).reshape(B, T, self.n_head * self.head_dim))

    def forward_rows(self, x, cos, sin, rows: list["RowInput"], layer: int):
        """x (N, H): the rows' tokens one after another (then padding) -> (N, H).

        The projections run over all N tokens; attention runs per group of alike rows (`attention_groups`),
        each row with its own cache and with contiguous inputs shaped as in a lone forward (padding tokens
        attend nothing). The attention of each (row, head) is computed on its own, so a group's rows get
        what each gets alone."""
        N = x.shape[0]
        qkv = project(self.query_key_value, x).view(N, self.n_head + 2 * self.n_kv, self.head_dim)
        outs, at = [], 0
        for group in attention_groups(rows) if len(rows) > 1 else [rows]:  # a group's rows share their positions
            T, R = group[0].ids.shape[0], len(group)
            heads = qkv[at:at + R * T].view(R, T, -1, self.head_dim)  # (R, T, nH + 2 nKV, D)
            qg, kg, vg = heads.split_with_sizes([self.n_head, self.n_kv, self.n_kv], 2)
            qg = norm_rope(self.query_layernorm, qg, cos[at:at + T], sin[at:at + T])  # (R, nH, T, D), contiguous
            kg = norm_rope(self.key_layernorm, kg, cos[at:at + T], sin[at:at + T])  # (R, nKV, T, D)
            vg = vg.transpose(1, 2).contiguous()  # (R, nKV, T, D)
            if group[0].cache is not None:  # earlier keys from each row's cache (at start 0 none)
                # (R, nKV, S, D)
                kg, vg = KVCache.write_rows([row.cache for row in group], layer, group[0].start, kg, vg)
            out = self.attend_rows(qg, kg, vg, group[0].mask)  # (R, nH, T, D)
            outs.append(out.transpose(1, 2).reshape(R * T, self.n_head * self.head_dim))
            at += R * T
        if at < N:  # padding tokens
            outs.append(qkv.new_zeros(N - at, self.n_head * self.head_dim))
        return project(self.dense, outs[0] if len(outs) == 1 else torch.cat(outs))  # (N, H)

    def attend_rows(self, q, k, v, mask=None):
        """q (R, nH, T, D) over k, v (R, nKV, S, D) -> (R, nH, T, D); on the CPU as two batched products with
        a softmax (at least fp32) between, each (row, KV head) one product of the shape it has alone; else SDPA."""
        if q.device.type != "cpu":
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.head_dim ** -0.5,
                                                  enable_gqa=self.n_head != self.n_kv)
        R, _, T, D = q.shape
        g = self.n_head // self.n_kv
        scores = torch.matmul(q.reshape(R, self.n_kv, g * T, D), k.transpose(-1, -2)) * self.head_dim ** -0.5
        if mask is not None:  # (T, S) bool, the same for every head of a group
            scores = scores.masked_fill(~mask.repeat(g, 1), float("-inf"))
        wide = scores.dtype in (torch.float32, torch.float64)  # else the softmax in fp32, rounded back
        probs = scores.softmax(-1) if wide else scores.softmax(-1, dtype=torch.float32).to(v.dtype)
        return torch.matmul(probs, v).view(R, self.n_head, T, D)


def attention_key(row: "RowInput") -> tuple:
    """Rows with equal keys and no mask attend alike: the same T, the same keys (cache or not, same start)."""
    return row.mask is not None, row.cache is None, row.ids.shape[0], row.start


def attention_groups(rows: list["RowInput"]) -> list[list["RowInput"]]:
    """Consecutive rows with one `attention_key` and no mask, as groups (a row with a mask is alone)."""
    groups: list[list[RowInput]] = []
    for row in rows:
        if groups and row.mask is None and groups[-1][0].mask is None and \
                attention_key(groups[-1][0]) == attention_key(row):
            groups[-1].append(row)
        else:
            groups.append([row])
    return groups


class SwiGLU(nn.Module):
    def __init__(self, hidden: int, inner: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)

    def forward(self, x):
        return project(self.down_proj, F.silu(project(self.gate_proj, x)) * project(self.up_proj, x))


class RoutingError(ValueError):
    """A forward whose tokens are not whole routing blocks at aligned positions (LLaDA2.2)."""


def block_topk(biased: torch.Tensor, capacity: int, block: int, top_k: int) -> torch.Tensor:
    """LLaDA2.2 block routing: biased scores r (T, E) -> expert ids (T, K).

    Each run of `block` tokens is one routing block: its `capacity` experts with the highest max-over-tokens
    r are allowed, and each token takes its top_k of r among them. Ties go to the lower expert id (stable
    sorts), in the block's choice and in the token's. T must be whole blocks (`RoutingError` otherwise)."""
    T, E = biased.shape
    if T % block:
        raise RoutingError(f"block routing needs whole routing blocks of {block} tokens; this forward routes "
                           f"{T} tokens ({T % block} left over)")
    blocks = biased.view(T // block, block, E)  # (NB, block, E)
    best = blocks.amax(1).sort(dim=-1, descending=True, stable=True).indices[:, :capacity]  # (NB, C)
    allowed = torch.zeros(T // block, E, dtype=torch.bool, device=biased.device).scatter_(1, best, True)
    r = blocks.masked_fill(~allowed[:, None, :], float("-inf"))  # (NB, block, E)
    return r.sort(dim=-1, descending=True, stable=True).indices[..., :top_k].reshape(T, top_k)


class Router(nn.Module):
    """Sigmoid router with expert bias, in fp32: group-limited top-k (2.1) or block routing (2.2, `block_topk`)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(cfg.num_experts, cfg.hidden_size))
        bias = torch.zeros(cfg.num_experts) if cfg.moe_router_enable_expert_bias else None
        self.register_buffer("expert_bias", bias)  # None: selection uses the plain scores
        self.top_k, self.n_group, self.topk_group = cfg.num_experts_per_tok, cfg.n_group, cfg.topk_group
        self.scale = cfg.routed_scaling_factor
        if cfg.block_routing:  # a 2.1 router has neither attribute (the 2.1 router kernel implements it alone)
            self.capacity, self.routing_block = cfg.expert_capacity, cfg.routing_block

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """h (T, H) -> expert ids (T, K) and combine weights (T, K) fp32."""
        scores = torch.sigmoid(linear(h.float(), self.weight.float()))  # (T, E)
        biased = scores if self.expert_bias is None else scores + self.expert_bias.float()
        ids = block_topk(biased, self.capacity, self.routing_block, self.top_k) if "capacity" in self.__dict__ \
            else self._grouped_topk(biased)  # (T, K)
        w = scores.gather(1, ids)  # the bias steers the choice, never the weights
        w = w / (w.sum(-1, keepdim=True) + 1e-20) * self.scale
        return ids, w

    def _grouped_topk(self, biased: torch.Tensor) -> torch.Tensor:
        """LLaDA2.1: top-k of the biased scores (T, E) within the topk_group best groups -> ids (T, K)."""
        T, E = biased.shape
        grouped = biased.view(T, self.n_group, E // self.n_group)
        group_score = grouped.topk(2, dim=-1).values.sum(-1)  # (T, n_group)
        keep = torch.zeros_like(group_score, dtype=torch.bool)
        keep.scatter_(1, group_score.topk(self.topk_group, dim=-1).indices, True)
        keep = keep[:, :, None].expand_as(grouped).reshape(T, E)
        return biased.masked_fill(~keep, float("-inf")).topk(self.top_k, dim=-1).indices  # (T, K)


def check_routing_blocks(cfg: ModelConfig, pieces: list[tuple[int | torch.Tensor, int]]) -> None:
    """Block routing: each (start, T) of a forward is whole routing blocks at aligned positions, so that no
    routing block mixes two sequences (a tensor start, the static path's, is not read on the host)."""
    R = cfg.routing_block
    for start, T in pieces if cfg.block_routing else ():
        if T % R or (not isinstance(start, torch.Tensor) and start % R):
            raise RoutingError(f"block routing (LLaDA2.2) routes whole blocks of {R} tokens from position 0; a forward"
                               f" of {T} tokens from position {start}: decode with a block_length multiple of {R}")


class Experts(nn.Module):
    """Stacked routed experts: w13 (E, 2I, H) = gate rows then up rows, w2 (E, H, I).

    Reference implementation: loop over the experts that received tokens."""

    def __init__(self, num_experts: int, hidden: int, inner: int):
        super().__init__()
        self.w13 = nn.Parameter(torch.zeros(num_experts, 2 * inner, hidden))
        self.w2 = nn.Parameter(torch.zeros(num_experts, hidden, inner))

    def forward(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """x (T, H), ids (T, K), weights (T, K) -> (T, H): sum_k weights * expert_k(x)."""
        T, K = ids.shape
        flat = ids.reshape(-1)  # (T*K,) pairs in (token, k) order
        order = flat.argsort(stable=True)  # pairs sorted by expert
        counts = torch.bincount(flat, minlength=self.w13.shape[0]).tolist()
        if row_exact_on():
            ys = self._tiled(x, order, counts, K)
        else:
            xs = x[order // K]  # (T*K, H) one row per pair, grouped by expert
            outs, begin = [], 0
            for e, n in enumerate(counts):
                if n:
                    gate, up = F.linear(xs[begin:begin + n], self.w13[e]).chunk(2, dim=-1)  # (n, I) each
                    outs.append(F.linear(F.silu(gate) * up, self.w2[e]))  # (n, H)
                    begin += n
            ys = torch.empty_like(xs)
            ys[order] = torch.cat(outs)  # back to (token, k) order
        return (ys.view(T, K, -1) * weights.to(x.dtype)[..., None]).sum(1)

    def _tiled(self, x: torch.Tensor, order: torch.Tensor, counts: list[int], K: int) -> torch.Tensor:
        """The row-exact path -> (T*K, H) in (token, k) order: each expert's pairs padded to `padded_rows` as
        `tiled_matmul` pads them (here with copies of token 0: a padding row's result is never read), all
        experts in one buffer of P rows, and every expert's two products (`expert_products`) written in place."""
        sizes = padded_counts(counts, x.device)  # buffer rows of each expert (0 for one without pairs)
        starts = [0, *itertools.accumulate(sizes)]  # first buffer row of each expert (and the total, P)
        used = [e for e, n in enumerate(counts) if n]
        slots = [starts[e] + j for e in used for j in range(counts[e])]  # buffer row of each pair, sorted
        slot = torch.tensor(slots, device=x.device)  # (T*K,) buffer row of each pair, sorted by expert
        source = x.new_zeros(starts[-1], dtype=torch.long)  # padding rows read row 0 (no row depends on another:
        source[slot] = order.div(K, rounding_mode="floor")  # their results are never read)
        xp = x.index_select(0, source)  # (P, H)
        gate, up = expert_products(xp, self.w13, starts, used).chunk(2, dim=-1)  # (P, I) each
        y = expert_products(F.silu(gate) * up, self.w2, starts, used)  # (P, H)
        back = torch.empty_like(slot)
        back[order] = slot  # (T*K,): buffer row of each pair in (token, k) order
        return y.index_select(0, back)


class MoE(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate = Router(cfg)
        self.experts = Experts(cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size)
        shared = cfg.moe_intermediate_size * cfg.num_shared_experts
        self.shared_experts = SwiGLU(cfg.hidden_size, shared) if shared else None

    def forward(self, h: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """h (B, T, H) or (N, H) -> experts(h) + shared(h) [+ residual], shaped as h; experts with `forward_add`
        sum them in one launch."""
        H = h.shape[-1]
        flat = h if h.ndim == 2 else h.reshape(-1, H)  # (N, H)
        ids, w = self.gate(flat)
        shared = self.shared_experts(h) if self.shared_experts is not None else None
        adds = [t if t.ndim == 2 else t.reshape(-1, H) for t in (shared, residual) if t is not None]
        fused = getattr(self.experts, "forward_add", None)
        if fused is not None:
            return fused(flat, ids, w, adds).view(h.shape)
        out = self.experts(flat, ids, w)
        for t in adds:  # (out + shared) + residual, as the plain ops round it
            out = out + t
        return out if h.ndim == 2 else out.view(h.shape)


class Layer(nn.Module):
    def __init__(self, cfg: ModelConfig, index: int):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.attention = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MoE(cfg) if cfg.is_moe_layer(index) else SwiGLU(cfg.hidden_size, cfg.intermediate_size)
        self.index = index

    def forward(self, x, cos, sin, mask, cache, start):
        h = self.attention(self.input_layernorm(x), cos, sin, mask, cache, self.index, start)
        return self.ffn(*add_norm(self.post_attention_layernorm, x, h))

    def forward_rows(self, x, cos, sin, rows: list["RowInput"]):
        return self.ffn(*add_norm(self.post_attention_layernorm, x,
                                  self.attention.forward_rows(self.input_layernorm(x), cos, sin, rows, self.index)))

    def ffn(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """The residual stream x plus the FFN of its norm h, (B, T, H); an MoE adds x itself."""
        return self.mlp(h, residual=x) if isinstance(self.mlp, MoE) else x + self.mlp(h)


class RowInput(NamedTuple):
    """One sequence of a row-batched forward (`LLaDA2MoE.forward_rows`)."""

    ids: torch.Tensor  # (T,) long: the tokens of this call, at absolute positions start..start+T-1
    start: int = 0
    mask: torch.Tensor | None = None  # bool (T, S) as for `forward`; None = all visible
    cache: KVCache | None = None  # this row's own cache (keys [0, start) read, [start, start+T) written)
    logits: bool = True  # False: only the cache is wanted (no lm_head for this row)


class LLaDA2MoE(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        weight = torch.empty(cfg.vocab_size, cfg.hidden_size)  # (V, H)
        self.word_embeddings = nn.Embedding.from_pretrained(weight, freeze=False)
        if not weight.is_meta:  # on `meta` there are no values to draw (and normal_ there imports ~150 MB)
            self.word_embeddings.reset_parameters()
        self.layers = nn.ModuleList(Layer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    @property
    def device(self) -> torch.device:
        return self.word_embeddings.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.word_embeddings.weight.dtype

    @torch.no_grad()
    def init_weights(self, std: float = 0.02, seed: int | None = None) -> "LLaDA2MoE":
        """Fresh weights: N(0, std), output projections N(0, std / sqrt(2 * layers)), norms 1, expert bias 0.

        Works in place on any device (after `to_empty` too); `seed` makes it reproducible."""
        gen = None if seed is None else torch.Generator(device=self.device).manual_seed(seed)
        out_std = std / (2 * self.config.num_hidden_layers) ** 0.5
        for name, t in [*self.named_parameters(), *self.named_buffers()]:
            if name.endswith("norm.weight"):
                t.fill_(1.0)
            elif name.endswith(("expert_bias", ".bias")):
                t.zero_()
            elif name.endswith(("dense.weight", "down_proj.weight", "w2")):
                t.normal_(0.0, out_std, generator=gen)
            else:
                t.normal_(0.0, std, generator=gen)
        return self

    def new_cache(self, max_len: int, batch: int = 1) -> KVCache:
        return KVCache(self.config, batch, max_len, self.dtype, self.device)

    def forward(self, input_ids: torch.Tensor, start: int | torch.Tensor = 0, mask: torch.Tensor | None = None,
                cache: KVCache | None = None, positions: torch.Tensor | None = None,
                hidden_only: bool = False) -> torch.Tensor:
        """input_ids (B, T) at absolute positions start..start+T-1 -> fp32 logits (B, T, V).

        mask: bool (T, S) with S = start+T keys when a cache is given, else S = T; None = all visible.
        With a cache, keys/values of positions [0, start) are read from it and this call's are written
        at [start, start+T) (committed only by `cache.commit`). positions (T,) overrides the absolute
        positions used by RoPE (training lays a clean and a noisy copy of a sequence side by side).

        Static path (CUDA graphs, `llada.fast.graphs`): `start` a 0-d long tensor on the device, a cache,
        and a mask over all cache.capacity keys. Nothing then depends on start's value on the host."""
        B, T = input_ids.shape
        check_routing_blocks(self.config, [(start, T)])
        static = isinstance(start, torch.Tensor)
        if static and (cache is None or mask is None or mask.shape[-1] != cache.capacity):
            raise ValueError("a tensor start needs a KV cache and a (T, cache.capacity) mask")
        if cache is None and not static and start:
            raise ValueError("start > 0 needs a KV cache holding the earlier positions")
        if positions is None:
            positions = start + torch.arange(T, device=input_ids.device)
        if static:  # tables of every cache slot, made once: one gather a forward
            cos, sin = rope_table(self, positions, cache.capacity, self.config.rotary_dim, self.config.rope_theta)
        else:
            cos, sin = rope_cos_sin(positions, self.config.rotary_dim, self.config.rope_theta)
        x = self.word_embeddings(input_ids)  # (B, T, H)
        for layer in self.layers:
            x = layer(x, cos, sin, mask, cache, start)
        x = self.norm(x)
        return x if hidden_only else project(self.lm_head, x).float()

    def forward_rows(self, rows: list[RowInput]) -> list[torch.Tensor | None]:
        """Several sequences in one forward -> per row fp32 logits (T, V), or None where not wanted.

        Row-exact (module docstring): each row's logits and cache writes are bit for bit those of
        `forward_rows([row])`. All rows' tokens run together, padded as `padded_rows` says, alike rows side
        by side (`attention_key`) so that their attention runs as one call."""
        if len(rows) == 1:  # a lone row: nothing to sort
            return self._forward_rows(rows)
        order = sorted(range(len(rows)), key=lambda i: attention_key(rows[i]))
        logits = self._forward_rows([rows[i] for i in order])
        out: list[torch.Tensor | None] = [None] * len(rows)
        for i, row_logits in zip(order, logits):
            out[i] = row_logits
        return out

    def _forward_rows(self, rows: list[RowInput]) -> list[torch.Tensor | None]:
        sizes = [row.ids.shape[0] for row in rows]
        if self.config.block_routing:
            check_routing_blocks(self.config, [(row.start, T) for row, T in zip(rows, sizes)])
        n = sum(sizes)
        device = rows[0].ids.device
        pad = padded_rows(n, device) - n
        if len(rows) == 1 and not pad:  # a lone row of whole blocks: its own ids and positions
            ids, positions = rows[0].ids, torch.arange(rows[0].start, rows[0].start + n, device=device)
        else:
            ids = torch.cat([row.ids for row in rows] + [torch.zeros(pad, dtype=torch.long, device=device)])
            positions = torch.tensor([p for row, T in zip(rows, sizes) for p in range(row.start, row.start + T)]
                                     + [0] * pad, dtype=torch.long, device=device)
        cos, sin = rope_cos_sin(positions, self.config.rotary_dim, self.config.rope_theta)  # (N, rotary_dim)
        with row_exact(sizes):
            x = self.word_embeddings(ids)  # (N, H)
            for layer in self.layers:
                x = layer.forward_rows(x, cos, sin, rows)
            x = self.norm(x)  # (N, H)
            if len(rows) == 1:  # a lone row: the padded rows as they are
                return [project(self.lm_head, x).float()[:n] if rows[0].logits else None]
            ends = list(itertools.accumulate(sizes))
            wanted = [(end - T, end) for row, T, end in zip(rows, sizes, ends) if row.logits]
            if not wanted:
                return [None] * len(rows)
            # every row wants logits: the padded rows as they are (a row's product does not depend on the others)
            h = x if len(wanted) == len(rows) else torch.cat([x[a:b] for a, b in wanted])
            logits = project(self.lm_head, h).float()  # (sum T (+ padding), V)
        out, at = [], 0
        for row, T in zip(rows, sizes):
            out.append(logits[at:at + T] if row.logits else None)
            at += T if row.logits else 0
        return out
