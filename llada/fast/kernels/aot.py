"""Compile every kernel specialization for sm80, sm89 and sm90 on a machine without a GPU, and read the code.

Triton compiles for whatever target its active driver reports. `StandInDriver` reports one of the
`llada.fast.kernels.devices.KNOWN` GPUs (an A100, an L4, an H100) and answers its device number with the
arch, so Triton keeps one in-memory cache per target; with it active, `JITFunction.warmup` runs
Triton's whole pipeline (TTIR -> TTGIR -> LLVM IR -> PTX -> cubin via the bundled ptxas) without
launching anything. The launches compiled are the engine's own: the launchers' `plan_*` functions
build them from CPU tensors of the LLaDA2.1-mini shapes with the configuration `choose_config` picks
for that GPU, so dtypes, 16-byte alignment, unit strides and tiles specialize exactly as on the GPU.

Per arch the fused MoE runs FP8 weights where the GPU has FP8 (sm89, sm90) and bf16 weights
everywhere (the only path on sm80). For each launch the report gives the MMA instructions in the PTX
(`wgmma.mma_async...e4m3.e4m3` is Hopper's FP8 tensor core, `mma.sync...e4m3` Ada's, `mma.sync...bf16`
Ampere's), the matching SASS (read with the bundled cuobjdump), registers, spills, and the shared
memory the compiled kernel needs beside the estimate `configs.smem_bytes` made before compiling and
the device's limit. Run it in its own process (the stand-in replaces the driver for the whole process):

    python -m llada.fast.kernels.aot [--arch 80 89 90] [--tokens 1 8 32 128 512 2048] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass

import torch

from .devices import KNOWN, DeviceSpec

MINI = {"hidden": 2048, "inner": 512, "experts": 256, "top_k": 8, "n_group": 8, "topk_group": 4,
        "heads": 16, "kv_heads": 4, "head_dim": 128, "rotary_dim": 64}
TOKENS = (1, 8, 32, 128, 512, 2048)  # the benchmark's M values and a prefill
ARCHS = (80, 89, 90)
CACHE_SLOTS = 4096  # KV cache slots of the static forward (prompt + generation)
# read back with cuobjdump: registers and spills (a few ms each) of the GEMMs, the router's (whose top-k holds a
# whole row per program) and the k-sum; the disassembly (~0.4 s of CPU each) only where warpgroup MMAs
# can appear, Hopper's GEMMs
SASS_KERNELS = ("_up_kernel", "_down_kernel", "_linear_kernel", "_route_kernel", "_route_logits_kernel",
                "_route_select_kernel", "_ksum_kernel")
GMMA_KERNELS = ("_up_kernel", "_down_kernel", "_linear_kernel")
GMMA_ARCHS = (90,)


class StandInDriver:
    """The part of Triton's driver interface that compiling needs, answering as the GPU `spec` would."""

    def __init__(self, spec: DeviceSpec):
        self.spec = spec

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", self.spec.arch, 32)

    def get_current_device(self) -> int:
        return self.spec.arch  # one Triton kernel cache per target

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_active_torch_device(self) -> torch.device:
        return torch.device("cpu")

    def map_python_to_cpp_type(self, ty: str) -> str:
        raise RuntimeError("the stand-in driver compiles kernels; it cannot launch them")


@dataclass
class Compiled:
    arch: int
    kernel: str
    tokens: int
    weights: str  # "fp8", "bf16" or "-" (kernels outside the expert GEMMs)
    meta: dict
    mma: list[str]  # distinct MMA instruction shapes in the PTX
    gmma: list[str]  # distinct warpgroup MMAs in the SASS: QGMMA (fp8), HGMMA (16-bit); [] without cuobjdump
    e4m3_converts: int  # e4m3 -> f16 conversions in the PTX (the operands of emulated FP8 dots)
    registers: int  # -1: SASS not read (only SASS_KERNELS') or no cuobjdump here
    spills: int  # local-memory (stack) bytes per thread; -1 as for registers
    shared: int  # bytes of shared memory the compiled kernel needs
    shared_estimate: int  # what `configs.smem_bytes` said before compiling (0: not a tiled GEMM)
    shared_limit: int  # the device's per-block maximum

    @property
    def fp8_wgmma(self) -> bool:
        return any(m.startswith("wgmma") and m.endswith("e4m3.e4m3") for m in self.mma)


def engine_launches(tokens: int, spec: DeviceSpec, shape: dict = MINI) -> list[tuple[str, object, int]]:
    """(weights, launch, estimate) for one MoE layer of each weight kind the GPU runs, the FP8
    quantizers and an FP8 linear (where it has FP8), at `tokens` tokens."""
    from . import configs, fp8, fused_moe, linear, router
    from .reference import FP8

    T, H, I, E, K = tokens, shape["hidden"], shape["inner"], shape["experts"], shape["top_k"]
    x = torch.empty(T, H, dtype=torch.bfloat16)  # untouched CPU memory: only shapes and pointers matter
    gate_w, bias = torch.empty(E, H, dtype=torch.bfloat16), torch.empty(E, dtype=torch.bfloat16)
    ids, weights, routing, _ = router.plan_route(x, gate_w, bias, K, shape["n_group"], shape["topk_group"], 2.5)
    ids1, weights1, fused_routing, _ = router.plan_route(x, gate_w, bias, K, shape["n_group"], shape["topk_group"],
                                                         2.5, shared=True, norm=(x, x[0], 1e-6))
    out = [("-", launch, 0) for launch in routing + fused_routing]  # FP8 experts' router; bf16's with add + norm
    kinds = {"bf16": (torch.empty(E, 2 * I, H, dtype=torch.bfloat16), None,
                      torch.empty(E, H, I, dtype=torch.bfloat16), None)}
    if spec.fp8:
        kinds["fp8"] = (torch.empty(E, 2 * I, H, dtype=FP8), torch.empty(E, 2 * I // 128, H // 128),
                        torch.empty(E, H, I, dtype=FP8), torch.empty(E, H // 128, I // 128))
    for kind, (w13, s13, w2, s2) in kinds.items():
        for cfg in _configs(T, spec, shape, kind == "fp8"):
            estimate = configs.smem_bytes(cfg, kind == "fp8", spec.arch)
            # bf16: the shared expert as expert E, the k-sum adding the residual and making the next layer's
            # input norm (`llada.fast.layers.FusedMoE`)
            shared = (w13[0], w2[0]) if kind == "bf16" else None
            args = (ids1, weights1, cfg, (x,), shared, (x[0], 1e-6)) if kind == "bf16" else (ids, weights, cfg)
            for launch in fused_moe.plan_fused_moe(x, w13, s13, w2, s2, *args)[1]:
                out.append((kind, launch, estimate.get(launch.name, 0)))
    out += [("bf16", launch, 0) for launch in norm_launches(T, shape)]
    if spec.fp8:
        out += [("fp8", launch, 0) for launch in
                linear.plan_fp8_linear(x, torch.empty(3 * H, H, dtype=FP8), torch.empty(3 * H // 128, H // 128))[1]]
        weight = torch.empty(E, 2 * I, H, dtype=torch.bfloat16)
        out += [("fp8", launch, 0) for launch in fp8.plan_quantize_weight(weight)[2]]
    return out


def norm_launches(tokens: int, shape: dict = MINI) -> list:
    """A layer's fused small ops at `tokens` tokens: RMSNorm, residual add + RMSNorm, QK-norm + RoPE of q and
    of k, q/k/v into the KV cache, silu * up of the shared expert, and the window's attention mask."""
    from . import masks, norms, qkv_cache, swiglu

    T, H, D, R = tokens, shape["hidden"], shape["head_dim"], shape["rotary_dim"]
    x, w = torch.empty(1, T, H, dtype=torch.bfloat16), torch.empty(H, dtype=torch.bfloat16)
    qkv = torch.empty(1, T, shape["heads"] + 2 * shape["kv_heads"], D, dtype=torch.bfloat16)  # (B, T, heads, D)
    cos = torch.empty(T, R)  # fp32 tables
    q, k, _ = qkv.split([shape["heads"], shape["kv_heads"], shape["kv_heads"]], dim=2)
    cache = torch.empty(1, shape["kv_heads"], CACHE_SLOTS, D, dtype=torch.bfloat16)  # (B, nKV, S, D)
    start, bounds = torch.empty((), dtype=torch.long), torch.empty(3, dtype=torch.long)
    both = torch.empty(T, 2 * shape["inner"], dtype=torch.bfloat16)  # the shared expert's gate | up product
    return [*norms.plan_rms_norm(x, w, 1e-6)[2], *norms.plan_rms_norm(x, w, 1e-6, x)[2],
            *(launch for part in (q, k) for launch in norms.plan_qk_norm_rope(part, w[:D], 1e-6, cos, cos)[1]),
            *qkv_cache.plan_qkv_rope_cache(qkv, w[:D], w[:D], 1e-6, cos, cos, cache, cache, start)[1],
            *swiglu.plan_silu_mul(*both.chunk(2, dim=-1))[1],
            *masks.plan_step_mask(bounds, T, CACHE_SLOTS, 32, torch.bfloat16)[1]]


def _configs(tokens: int, spec: DeviceSpec, shape: dict, fp8: bool) -> list:
    """The configuration `choose_config` picks for this GPU and every tuned one recorded for it, fitted."""
    from . import configs

    key = configs.shape_key(shape["hidden"], shape["inner"], shape["experts"], shape["top_k"])
    dims = (tokens, shape["hidden"], shape["inner"], shape["experts"], shape["top_k"])
    found = [configs.choose_config(*dims, spec, fp8=fp8)]
    for path in sorted(configs.TUNED_DIR.glob("*.json")):
        table = configs.load_tuned(path)
        if table.get("arch", spec.arch) != spec.arch:
            continue
        for row in table.get("shapes", {}).get(key, []):
            if row["tokens"] == tokens and row.get("weights", "fp8") == ("fp8" if fp8 else "bf16"):
                found.append(configs.fit_config(configs.MoEConfig(**row["config"]), spec, fp8))
    return list(dict.fromkeys(found))


def compile_launch(launch, tokens: int, spec: DeviceSpec, weights: str, estimate: int,
                   sass: dict | None = None) -> tuple[str, Compiled]:
    """Compile one launch for `spec` (Triton's cache answers repeats); returns (kernel hash, report).

    `sass` memoizes the cuobjdump reading per kernel hash."""
    kernel = launch.kernel.warmup(*launch.args, grid=launch.grid, **launch.meta)
    ptx = kernel.asm["ptx"]
    mma = sorted(set(re.findall(r"\b((?:wgmma\.mma_async|mma\.sync)[\w.]*)", ptx)))
    meta = {k: v for k, v in launch.meta.items() if not isinstance(v, float)}
    sass = {} if sass is None else sass
    if kernel.hash not in sass:
        gmma = spec.arch in GMMA_ARCHS and launch.name in GMMA_KERNELS  # disassemble: warpgroup MMAs possible
        sass[kernel.hash] = _cuobjdump(kernel.asm["cubin"], gmma) if launch.name in SASS_KERNELS else ([], -1, -1)
    gmma, registers, spills = sass[kernel.hash]
    return kernel.hash, Compiled(arch=spec.arch, kernel=launch.name, tokens=tokens, weights=weights, meta=meta,
                                 mma=mma, gmma=gmma, e4m3_converts=len(re.findall(r"cvt\.rn\.f16x2\.e4m3x2", ptx)),
                                 registers=registers, spills=spills, shared=int(kernel.metadata.shared),
                                 shared_estimate=estimate, shared_limit=spec.smem)


def _cuobjdump(cubin: bytes, gmma: bool = True) -> tuple[list[str], int, int]:
    """(warpgroup MMAs in the SASS, registers, spill bytes) from the bundled cuobjdump; ([], -1, -1) without it.

    `gmma=False` reads the resource usage alone (no disassembly): no MMAs listed."""
    import subprocess
    import tempfile

    from triton import knobs

    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        try:
            text = subprocess.run([knobs.nvidia.cuobjdump.path, *(["-sass"] if gmma else []), "-res-usage", f.name],
                                  capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):  # the PTX check still stands
            return [], -1, -1
    regs = re.search(r"REG:(\d+)", text)
    spills = re.findall(r"(?:STACK|LOCAL):(\d+)", text)
    return (sorted(set(re.findall(r"\b[HQ]GMMA\.[\w.]+", text))), int(regs.group(1)) if regs else -1,
            sum(int(v) for v in spills))


def compile_all(archs: tuple[int, ...] = ARCHS, tokens: tuple[int, ...] = TOKENS, shape: dict = MINI,
                progress=None) -> list[Compiled]:
    """Compile every launch of `engine_launches` per arch and token count; one report per launch, arch and
    count (a specialization met again is answered by Triton's cache; `progress` sees only new ones)."""
    from triton.runtime.driver import driver

    seen, out, sass = set(), [], {}
    for arch in archs:  # the stand-in stays active: this process compiles, it never launches
        spec = KNOWN[arch]
        driver.set_active(StandInDriver(spec))
        for T in tokens:
            for weights, launch, estimate in engine_launches(T, spec, shape):
                digest, report = compile_launch(launch, T, spec, weights, estimate, sass)
                out.append(report)
                if progress and (arch, digest) not in seen:
                    progress(report)
                seen.add((arch, digest))
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m llada.fast.kernels.aot", description=__doc__.split("\n")[0])
    parser.add_argument("--arch", type=int, nargs="+", default=list(ARCHS), choices=sorted(KNOWN))
    parser.add_argument("--tokens", type=int, nargs="+", default=list(TOKENS))
    parser.add_argument("--json", default=None, help="write the report here ('-' for stdout)")
    args = parser.parse_args(argv)

    def show(c: Compiled) -> None:
        print(f"[sm{c.arch}] T={c.tokens:5d} {c.weights:4s} {c.kernel:15s} {' '.join(c.mma) or '-':58s} "
              f"{' '.join(c.gmma) or '-':30s} regs {c.registers:3d} spills {c.spills} "
              f"smem {c.shared} (est. {c.shared_estimate}, limit {c.shared_limit})", file=sys.stderr)

    report = [asdict(c) | {"fp8_wgmma": c.fp8_wgmma}
              for c in compile_all(tuple(args.arch), tuple(args.tokens), progress=show)]
    if args.json == "-":
        print(json.dumps(report))
    elif args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
