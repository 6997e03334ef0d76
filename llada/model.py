"""The LLaDA2 MoE forward pass, whole, in one file.

A pre-norm transformer whose attention is *block-causal*: the sequence is cut into blocks of
`block_length` tokens from position 0, and a query in block b sees every key in blocks 0..b
(bidirectionally inside b). Each layer:

    h = x + dense(attn(rope(qk_norm(split(qkv(rmsnorm(x)))))))      grouped-query attention
    y = h + ffn(rmsnorm(h))        ffn = SwiGLU (first layers) or MoE (the rest)

MoE: a sigmoid router in fp32 picks experts from the best groups using biased scores, weights them
with the unbiased scores (normalised, times routed_scaling_factor), and adds an always-on shared
expert. Letter legend: B batch, T tokens of this call, S keys (cache + T), H hidden, D head dim,
E experts, K experts per token, I expert width.

Because a finished block never sees later ones, its keys/values never change: `KVCache` keeps them
so that a decode step only runs the active window.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def rope_cos_sin(positions: torch.Tensor, rotary_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """NeoX rotary tables for absolute `positions` (T,) -> cos, sin of shape (T, rotary_dim), fp32."""
    inv_freq = theta ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float32, device=positions.device) / rotary_dim)
    freqs = positions.float()[:, None] * inv_freq[None, :]  # (T, rotary_dim/2)
    emb = torch.cat([freqs, freqs], dim=-1)  # (T, rotary_dim): dim j pairs with j + rotary_dim/2
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first rotary_dim dims of every head of x (B, h, T, D); the rest pass through."""
    rd = cos.shape[-1]
    rot, rest = x[..., :rd], x[..., rd:]
    half = rd // 2
    rotated_half = torch.cat([-rot[..., half:], rot[..., :half]], dim=-1)
    rot = (rot.float() * cos + rotated_half.float() * sin).to(x.dtype)
    return torch.cat([rot, rest], dim=-1)


def block_causal_mask(groups: torch.Tensor, key_groups: torch.Tensor | None = None) -> torch.Tensor:
    """Boolean attention mask (T, S): query i may see key j iff group[j] <= group[i].

    `groups` is each position's block index (or a merged index for blocks that see each other)."""
    key_groups = groups if key_groups is None else key_groups
    return key_groups[None, :] <= groups[:, None]


class KVCache:
    """Preallocated keys/values of finished blocks for every layer: (layers, B, KVheads, max_len, D).

    A forward at `start` writes its keys/values into slots [start, start+T) and attends to [0, start+T);
    only `commit` makes them part of the cache (`length`), so a window can be recomputed freely."""

    def __init__(self, cfg: ModelConfig, batch: int, max_len: int, dtype: torch.dtype, device):
        shape = (cfg.num_hidden_layers, batch, cfg.num_key_value_heads, max_len, cfg.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.length = 0

    @property
    def capacity(self) -> int:
        return self.k.shape[3]

    def write(self, layer: int, start: int | torch.Tensor, k: torch.Tensor,
              v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v (B, KVheads, T, D) at [start, start+T) of `layer`; return keys/values of [0, start+T).

        With `start` a 0-d device tensor (the static path) every slot is returned (S = capacity),
        and the caller's mask hides those past start+T: the shapes no longer depend on `start`."""
        if isinstance(start, torch.Tensor):
            slots = start + torch.arange(k.shape[2], device=k.device)  # (T,)
            self.k[layer].index_copy_(2, slots, k)
            self.v[layer].index_copy_(2, slots, v)
            return self.k[layer], self.v[layer]  # (B, KVheads, capacity, D)
        end = start + k.shape[2]
        self.k[layer, :, :, start:end] = k
        self.v[layer, :, :, start:end] = v
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]  # (B, KVheads, S, D)

    def commit(self, end: int) -> None:
        """Keys/values of positions [0, end) are final."""
        if end > self.capacity:
            raise ValueError(f"cannot commit {end} positions: cache holds {self.capacity}")
        self.length = end


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_head, self.n_kv, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        qkv_out = (self.n_head + 2 * self.n_kv) * self.head_dim
        self.query_key_value = nn.Linear(cfg.hidden_size, qkv_out, bias=cfg.use_qkv_bias)
        self.query_layernorm = RMSNorm(self.head_dim, cfg.rms_norm_eps) if cfg.use_qk_norm else nn.Identity()
        self.key_layernorm = RMSNorm(self.head_dim, cfg.rms_norm_eps) if cfg.use_qk_norm else nn.Identity()
        self.dense = nn.Linear(self.n_head * self.head_dim, cfg.hidden_size, bias=cfg.use_bias)

    def forward(self, x, cos, sin, mask=None, cache: KVCache | None = None, layer: int = 0, start: int = 0):
        B, T, _ = x.shape
        qkv = self.query_key_value(x).view(B, T, self.n_head + 2 * self.n_kv, self.head_dim)
        q, k, v = qkv.split([self.n_head, self.n_kv, self.n_kv], dim=2)
        q = apply_rope(self.query_layernorm(q).transpose(1, 2), cos, sin)  # (B, nH, T, D)
        k = apply_rope(self.key_layernorm(k).transpose(1, 2), cos, sin)  # (B, nKV, T, D)
        v = v.transpose(1, 2)  # (B, nKV, T, D)
        if cache is not None:
            k, v = cache.write(layer, start, k, v)  # (B, nKV, S, D)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.head_dim ** -0.5,
                                             enable_gqa=self.n_head != self.n_kv)  # (B, nH, T, D)
        return self.dense(out.transpose(1, 2).reshape(B, T, self.n_head * self.head_dim))


class SwiGLU(nn.Module):
    def __init__(self, hidden: int, inner: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Router(nn.Module):
    """Sigmoid router with expert bias and group-limited top-k, in fp32."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(cfg.num_experts, cfg.hidden_size))
        bias = torch.zeros(cfg.num_experts) if cfg.moe_router_enable_expert_bias else None
        self.register_buffer("expert_bias", bias)  # None: selection uses the plain scores
        self.top_k, self.n_group, self.topk_group = cfg.num_experts_per_tok, cfg.n_group, cfg.topk_group
        self.scale = cfg.routed_scaling_factor

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """h (T, H) -> expert ids (T, K) and combine weights (T, K) fp32."""
        scores = torch.sigmoid(F.linear(h.float(), self.weight.float()))  # (T, E)
        biased = scores if self.expert_bias is None else scores + self.expert_bias.float()
        T, E = biased.shape
        grouped = biased.view(T, self.n_group, E // self.n_group)
        group_score = grouped.topk(2, dim=-1).values.sum(-1)  # (T, n_group)
        keep = torch.zeros_like(group_score, dtype=torch.bool)
        keep.scatter_(1, group_score.topk(self.topk_group, dim=-1).indices, True)
        keep = keep[:, :, None].expand_as(grouped).reshape(T, E)
        ids = biased.masked_fill(~keep, float("-inf")).topk(self.top_k, dim=-1).indices  # (T, K)
        w = scores.gather(1, ids)
        w = w / (w.sum(-1, keepdim=True) + 1e-20) * self.scale
        return ids, w


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


class MoE(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate = Router(cfg)
        self.experts = Experts(cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size)
        shared = cfg.moe_intermediate_size * cfg.num_shared_experts
        self.shared_experts = SwiGLU(cfg.hidden_size, shared) if shared else None

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        B, T, H = h.shape
        flat = h.reshape(B * T, H)
        ids, w = self.gate(flat)
        out = self.experts(flat, ids, w).view(B, T, H)
        return out + self.shared_experts(h) if self.shared_experts is not None else out


class Layer(nn.Module):
    def __init__(self, cfg: ModelConfig, index: int):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.attention = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MoE(cfg) if cfg.is_moe_layer(index) else SwiGLU(cfg.hidden_size, cfg.intermediate_size)
        self.index = index

    def forward(self, x, cos, sin, mask, cache, start):
        x = x + self.attention(self.input_layernorm(x), cos, sin, mask, cache, self.index, start)
        return x + self.mlp(self.post_attention_layernorm(x))


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

        Static path (CUDA graphs, `llada.graphs`): `start` a 0-d long tensor on the device, a cache,
        and a mask over all cache.capacity keys. Nothing then depends on start's value on the host."""
        B, T = input_ids.shape
        static = isinstance(start, torch.Tensor)
        if static and (cache is None or mask is None or mask.shape[-1] != cache.capacity):
            raise ValueError("a tensor start needs a KV cache and a (T, cache.capacity) mask")
        if cache is None and not static and start:
            raise ValueError("start > 0 needs a KV cache holding the earlier positions")
        if positions is None:
            positions = start + torch.arange(T, device=input_ids.device)
        cos, sin = rope_cos_sin(positions, self.config.rotary_dim, self.config.rope_theta)
        x = self.word_embeddings(input_ids)  # (B, T, H)
        for layer in self.layers:
            x = layer(x, cos, sin, mask, cache, start)
        x = self.norm(x)
        return x if hidden_only else self.lm_head(x).float()
