"""Tile configurations of the fused MoE GEMMs: what each knob means, the starting table, tuned tables.

A routed-expert GEMM at decode sizes is a weight stream with a thin activation: at T = 32 tokens,
top-8 of 256 experts, each touched expert sees ~1.6 (token, expert) pairs, and the tile holds
BLOCK_M pairs of one expert. Hopper's FP8 tensor-core instruction, `wgmma.m64nNk32.e4m3`, needs 64
rows on its M side and takes N = 8..256 on the other; Triton lowers a dot whose M side is 16 or 32
to `mma.sync` on f16 instead, converting every e4m3 operand in registers. So a tile with fewer than
64 pairs is computed *swapped*: acc^T (BLOCK_N weight rows, BLOCK_M pairs) = W_tile @ X_tile^T, the
weight rows on the M side (64 or 128, two wgmma's), the pairs on N (`wgmma.m64n16k32` at BLOCK_M 16).
Both operands are K-contiguous in memory, which is what FP8 wgmma requires.

    block_m       pairs per tile (16, 32 or 64); every expert's run is padded to a multiple of it
    swap_ab       weight rows on the MMA M side (required below 64 pairs: see above)
    up_n          intermediate columns per gate/up tile (the tile reads up_n gate + up_n up rows)
    up_split_k    the gate/up GEMM's H axis cut into this many slices, summed by the down kernel: more
                  CTAs when few experts are touched (T = 1 touches 8 experts: 64 tiles for 132 SMs); at 1
                  the bf16 gate/up GEMM forms silu(gate) * up itself (the SiLU pass is one launch fewer)
    down_n        hidden columns per down tile
    *_warps, *_stages   Triton's num_warps and software-pipelining depth per kernel

Provenance. `default_config` is a starting point derived from the constraints above (wgmma shapes,
tiles per SM on a 132-SM H100), *not from measurement*: no GPU was available when it was written.
`python -m llada.bench kernels --tune` measures the candidate configurations (`candidates`) on the
GPU it runs on and writes `llada/fast/kernels/tuned/<gpu>.json` (every candidate's time kept beside the
winner); `choose_config` prefers such a table for the current GPU and model shape when one exists.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path

TUNED_DIR = Path(__file__).resolve().parent / "tuned"
H100_SMS = 132  # streaming multiprocessors on an H100 SXM; the default when no GPU is present
GROUP_K = 128  # the K step of every GEMM (one FP8 scale group)
SMEM_SLACK = 2048  # barriers and small vectors (scales) the pipeline stages beside the tiles


@dataclass(frozen=True)
class MoEConfig:
    block_m: int = 16
    swap_ab: bool = True
    up_n: int = 64
    up_split_k: int = 1
    up_warps: int = 4
    up_stages: int = 4
    down_n: int = 64
    down_warps: int = 4
    down_stages: int = 4

    def __post_init__(self) -> None:
        if self.block_m not in (16, 32, 64):
            raise ValueError(f"block_m must be 16, 32 or 64, got {self.block_m}")
        if self.block_m < 64 and not self.swap_ab:
            raise ValueError(f"block_m {self.block_m} < 64 needs swap_ab: Hopper's FP8 wgmma takes 64 rows on M")
        for name in ("up_n", "down_n"):
            if getattr(self, name) not in (64, 128):
                raise ValueError(f"{name} must be 64 or 128, got {getattr(self, name)}")
        if self.up_split_k not in (1, 2, 4, 8):
            raise ValueError(f"up_split_k must be 1, 2, 4 or 8, got {self.up_split_k}")

    def to_dict(self) -> dict:
        return asdict(self)


def expected_touched(pairs: int, experts: int) -> float:
    """Experts that receive at least one of `pairs` uniformly routed pairs: E (1 - (1 - 1/E)^pairs)."""
    return experts * (1.0 - (1.0 - 1.0 / experts) ** pairs)


def default_config(tokens: int, top_k: int, experts: int, inner: int, hidden: int = 2048,
                   sms: int = H100_SMS) -> MoEConfig:
    """The starting point (see Provenance): tile height from pairs per touched expert, split-K for SMs."""
    pairs = max(tokens * top_k, 1)
    touched = max(expected_touched(pairs, experts), 1.0)
    rows = pairs / touched  # pairs per touched expert
    block_m = 16 if rows <= 16 else 32 if rows <= 32 else 64
    swap = block_m < 64
    n = 64 if swap else 128
    tiles = touched * -(-rows // block_m) * -(-inner // n)  # gate/up tiles with work
    split = 1
    while tiles * split < 2 * sms and split < min(4, -(-hidden // 128)):  # ~2 tiles per SM; <= H steps
        split *= 2
    stages = 4 if swap else 3
    warps = 4 if swap else 8  # 64 x 128 fp32 gate and up accumulators spill on 4 warps (sm90 compile)
    return MoEConfig(block_m=block_m, swap_ab=swap, up_n=n, up_split_k=split, up_warps=warps, up_stages=stages,
                     down_n=n, down_warps=warps, down_stages=stages)


STAGES = (3, 4)  # the pipeline depths `--tune` tries by default (`--tune-stages` goes deeper)


def candidates(block_ms: tuple[int, ...] = (16, 32, 64), stages: tuple[int, ...] = STAGES) -> list[MoEConfig]:
    """The configurations `--tune` measures: each block_m with swap where wgmma allows both; 4 warps at every
    depth in `stages`, 8 warps at the shallowest (deeper ones that do not fit a device are skipped by `fits`)."""
    if not stages or min(stages) < 2:
        raise ValueError(f"stages must be depths of at least 2, got {stages}")
    shapes = [(4, s) for s in sorted(set(stages))] + [(8, min(stages))]
    out = []
    for block_m in block_ms:
        for swap in ((True,) if block_m < 64 else (True, False)):
            for up_n in (64, 128):
                for split in (1, 2, 4):
                    for warps, stages_ in shapes:
                        out.append(MoEConfig(block_m=block_m, swap_ab=swap, up_n=up_n, up_split_k=split,
                                             up_warps=warps, up_stages=stages_, down_n=up_n,
                                             down_warps=warps, down_stages=stages_))
    return out


def device_slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3' (the tuned table's file name)."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def shape_key(hidden: int, inner: int, experts: int, top_k: int) -> str:
    return f"H{hidden}-I{inner}-E{experts}-K{top_k}"


@functools.lru_cache(maxsize=16)
def load_tuned(path: Path) -> dict:
    """A tuned table: {"device", "date", "command", "shapes": {shape_key: [{"tokens", "config", ...}]}}."""
    if not path.exists():
        return {}
    return json.loads(path.read_text())


def tuned_config(table: dict, tokens: int, key: str) -> MoEConfig | None:
    """The entry measured at the smallest token count >= tokens (the largest one past the table)."""
    rows = sorted(table.get("shapes", {}).get(key, []), key=lambda r: r["tokens"])
    if not rows:
        return None
    row = next((r for r in rows if r["tokens"] >= tokens), rows[-1])
    return MoEConfig(**row["config"])


def smem_bytes(cfg: MoEConfig, fp8: bool = True, arch: int = 90, *, fp32: bool = False) -> dict[str, int]:
    """Shared memory each GEMM kernel of `cfg` needs, estimated *before* compiling, in bytes.

    Triton's software pipeline keeps copies of every tile a K step loads for the tensor cores (the
    gate/up kernel: the pairs' tile and two weight tiles; the down kernel: h and one weight tile),
    128 wide, 1 byte per element in FP8 and 2 in bf16: `stages` copies on Hopper (wgmma reads its
    operands from shared memory), `stages - 1` before it (`mma.sync` reads registers; the current
    step's tile leaves shared memory first). The epilogue reuses that space to reorder the fp32
    accumulators for the store. `tests/test_kernels_aot.py` checks the estimate against what the
    compiler reports for every configuration the engine picks on sm80, sm89 and sm90: never below it,
    at most 4 KB above.

    `fp32`: fp32 weights (tests, and the CPU-trained tiny models), which `_scaled_dot` multiplies as an
    IEEE fp32 dot: 4 bytes per element, and no tensor core reads shared memory, so `stages - 1`
    copies on every arch. At block_m 64, up_n 128 and 3 stages that is 2 x (64 + 2 x 128) x 128 x 4 =
    327,680 B for the gate/up kernel, what an H200 (232,448 B per block) refused to load."""
    elt = 1 if fp8 else 4 if fp32 else 2
    tc = not fp32  # tensor cores: wgmma from sm90 on reads its operands from shared memory
    up = max(pipeline_bytes(cfg.block_m + 2 * cfg.up_n, cfg.up_stages, elt, arch, tc),
             2 * cfg.block_m * cfg.up_n * 4)
    down = max(pipeline_bytes(cfg.block_m + cfg.down_n, cfg.down_stages, elt, arch, tc), cfg.block_m * cfg.down_n * 4)
    return {"_up_kernel": up + SMEM_SLACK, "_down_kernel": down + SMEM_SLACK}


def pipeline_bytes(rows: int, stages: int, elt: int, arch: int, tensor_cores: bool = True) -> int:
    """Shared memory of the pipelined operand tiles: `rows` x 128 elements per stage (see smem_bytes)."""
    copies = stages if arch >= 90 and tensor_cores else max(stages - 1, 1)
    return copies * rows * GROUP_K * elt


def fits(cfg: MoEConfig, spec, fp8: bool = True, *, fp32: bool = False) -> bool:
    """Both GEMMs of `cfg` fit the device's shared memory (and FP8 is only asked of a GPU that has it)."""
    if spec is None:  # the CPU interpreter: no shared-memory limit
        return True
    return (spec.fp8 or not fp8) and max(smem_bytes(cfg, fp8, spec.arch, fp32=fp32).values()) <= spec.smem


def fit_config(cfg: MoEConfig, spec, fp8: bool = True, *, fp32: bool = False) -> MoEConfig:
    """`cfg` if it fits `spec`, else the nearest that does: fewer stages first, then narrower tiles.

    Every configuration a launcher is given passes here, a caller's own included: one that asks for
    more shared memory than a block may have compiles and then fails to load (`OutOfResources`)."""
    if spec is not None and fp8 and not spec.fp8:
        raise ValueError(f"FP8 weights need a GPU of compute capability 8.9 or later; {spec.name} is "
                         f"sm{spec.arch}: use bf16 weights there")
    if fits(cfg, spec, fp8, fp32=fp32):
        return cfg  # as given (the search below ties down_n to up_n)
    for n in dict.fromkeys((cfg.up_n, 64)):
        for stages in range(max(cfg.up_stages, cfg.down_stages), 1, -1):
            trial = replace(cfg, up_n=n, down_n=n, up_stages=min(stages, cfg.up_stages),
                            down_stages=min(stages, cfg.down_stages))
            if fits(trial, spec, fp8, fp32=fp32):
                return trial
    raise ValueError(f"no tile configuration near {cfg} fits {spec.smem} B of shared memory on {spec.name}")


def choose_config(tokens: int, hidden: int, inner: int, experts: int, top_k: int, spec=None,
                  fp8: bool = True, *, fp32: bool = False) -> MoEConfig:
    """The tuned entry for this GPU and shape when a table exists, else `default_config`; fitted to the
    device (`spec`, a `llada.fast.kernels.devices.DeviceSpec`; None on CPU) before anything compiles."""
    found = None
    if spec is not None:
        table = load_tuned(TUNED_DIR / f"{device_slug(spec.name)}.json")
        key = shape_key(hidden, inner, experts, top_k) + ("" if fp8 else "-bf16")
        found = tuned_config(table, tokens, key)
    sms = spec.sms if spec is not None else H100_SMS
    cfg = found or default_config(tokens, top_k, experts, inner, hidden, sms)
    if found is None and spec is not None and spec.arch < 90 and not cfg.swap_ab:
        cfg = replace(cfg, up_n=64, down_n=64)  # mma.sync holds the 64 x 128 gate + up accumulators in
        # registers and spills (sm89 compile): half-width tiles before Hopper
    return fit_config(cfg, spec, fp8, fp32=fp32)
