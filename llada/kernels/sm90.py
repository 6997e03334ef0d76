"""Compile every kernel specialization for Hopper (sm_90) on a machine without a GPU, and read the code.

Triton compiles for whatever target its active driver reports. `Sm90Driver` is a stand-in driver
that reports CUDA compute capability 9.0 (an H100/H200) and a device 0; with it active,
`JITFunction.warmup` runs Triton's whole pipeline (TTIR -> TTGIR -> LLVM IR -> PTX -> cubin via the
bundled ptxas) without launching anything. The launches compiled are the engine's own: the
launchers' `plan_*` functions build them from CPU tensors of the LLaDA2.1-mini shapes, so dtypes,
16-byte alignment and unit strides specialize exactly as they would on the GPU.

For each launch the report gives the MMA instructions in the PTX (`wgmma.mma_async...e4m3.e4m3` is
Hopper's FP8 tensor core; `mma.sync...f16` plus `cvt...e4m3` conversions is the emulated path), the
matching SASS (`QGMMA.64x16x32.F32.E4M3.E4M3`, read with the bundled cuobjdump) and register/spill
counts. Run it in its own process (the stand-in replaces the driver for the whole process):

    python -m llada.kernels.sm90 [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass

import torch

MINI = {"hidden": 2048, "inner": 512, "experts": 256, "top_k": 8, "n_group": 8, "topk_group": 4}
TOKENS = (1, 8, 32, 128, 512, 4096)  # the benchmark's M values and a prefill


class Sm90Driver:
    """The part of Triton's driver interface that compiling needs, answering as an sm_90 GPU would."""

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_active_torch_device(self) -> torch.device:
        return torch.device("cpu")

    def map_python_to_cpp_type(self, ty: str) -> str:
        raise RuntimeError("the sm_90 stand-in driver compiles kernels; it cannot launch them")


@dataclass
class Compiled:
    kernel: str
    tokens: int
    meta: dict
    mma: list[str]  # distinct MMA instruction shapes in the PTX
    gmma: list[str]  # distinct warpgroup MMAs in the SASS: QGMMA (fp8), HGMMA (16-bit); [] without cuobjdump
    e4m3_converts: int  # e4m3 -> f16 conversions in the PTX (the operands of emulated FP8 dots)
    registers: int
    spills: int  # local-memory (stack) bytes per thread

    @property
    def fp8_wgmma(self) -> bool:
        return any(m.startswith("wgmma") and m.endswith("e4m3.e4m3") for m in self.mma)


def engine_launches(tokens: int, shape: dict = MINI) -> list:
    """The launches one MoE layer, the FP8 quantizers and an FP8 linear make at `tokens` tokens."""
    from . import fp8, fused_moe, router
    from .reference import FP8

    T, H, I, E, K = tokens, shape["hidden"], shape["inner"], shape["experts"], shape["top_k"]
    x = torch.empty(T, H, dtype=torch.bfloat16)  # untouched CPU memory: only shapes and pointers matter
    gate_w, bias = torch.empty(E, H, dtype=torch.bfloat16), torch.empty(E, dtype=torch.bfloat16)
    ids, weights, routing = router.plan_route(x, gate_w, bias, K, shape["n_group"], shape["topk_group"], 2.5)
    w13, s13 = torch.empty(E, 2 * I, H, dtype=FP8), torch.empty(E, 2 * I // 128, H // 128)
    w2, s2 = torch.empty(E, H, I, dtype=FP8), torch.empty(E, H // 128, I // 128)
    launches = list(routing)
    for cfg in _configs(T, shape):
        launches += fused_moe.plan_fused_moe(x, w13, s13, w2, s2, ids, weights, cfg)[1]
    launches += fused_moe.plan_fp8_linear(x, torch.empty(3 * H, H, dtype=FP8), torch.empty(3 * H // 128, H // 128))[1]
    launches += fp8.plan_quantize_weight(torch.empty(E, 2 * I, H, dtype=torch.bfloat16))[2]
    return launches


def _configs(tokens: int, shape: dict) -> list:
    """The default configuration at this size and every tuned one recorded for this shape."""
    from . import configs

    key = configs.shape_key(shape["hidden"], shape["inner"], shape["experts"], shape["top_k"])
    found = [configs.default_config(tokens, shape["top_k"], shape["experts"], shape["inner"], shape["hidden"])]
    for path in sorted(configs.TUNED_DIR.glob("*.json")):
        for row in configs.load_tuned(path).get("shapes", {}).get(key, []):
            if row["tokens"] == tokens:
                found.append(configs.MoEConfig(**row["config"]))
    return list(dict.fromkeys(found))


def compile_launch(launch, tokens: int, sass: dict | None = None) -> tuple[str, Compiled]:
    """Compile one launch for sm_90 (Triton's cache answers repeats); returns (kernel hash, report).

    `sass` memoizes the cuobjdump reading per kernel hash (a second of CPU per call)."""
    kernel = launch.kernel.warmup(*launch.args, grid=launch.grid, **launch.meta)
    ptx = kernel.asm["ptx"]
    mma = sorted(set(re.findall(r"\b((?:wgmma\.mma_async|mma\.sync)[\w.]*)", ptx)))
    meta = {k: v for k, v in launch.meta.items() if not isinstance(v, float)}
    sass = {} if sass is None else sass
    if kernel.hash not in sass:
        sass[kernel.hash] = _cuobjdump(kernel.asm["cubin"])
    gmma, registers, spills = sass[kernel.hash]
    return kernel.hash, Compiled(kernel=launch.name, tokens=tokens, meta=meta, mma=mma, gmma=gmma,
                                 e4m3_converts=len(re.findall(r"cvt\.rn\.f16x2\.e4m3x2", ptx)),
                                 registers=registers, spills=spills)


def _cuobjdump(cubin: bytes) -> tuple[list[str], int, int]:
    """(warpgroup MMAs in the SASS, registers, spill bytes) from the bundled cuobjdump; ([], -1, -1) without it."""
    import subprocess
    import tempfile

    from triton import knobs

    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        try:
            text = subprocess.run([knobs.nvidia.cuobjdump.path, "-sass", "-res-usage", f.name],
                                  capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):  # the PTX check still stands
            return [], -1, -1
    regs = re.search(r"REG:(\d+)", text)
    spills = re.findall(r"(?:STACK|LOCAL):(\d+)", text)
    return (sorted(set(re.findall(r"\b[HQ]GMMA\.[\w.]+", text))), int(regs.group(1)) if regs else -1,
            sum(int(v) for v in spills))


def compile_all(tokens: tuple[int, ...] = TOKENS, shape: dict = MINI, progress=None) -> list[Compiled]:
    """Compile every launch of `engine_launches` at each token count; one report per launch and count
    (a specialization met again is answered by Triton's cache; `progress` sees only new ones)."""
    from triton.runtime.driver import driver

    driver.set_active(Sm90Driver())
    seen, out, sass = set(), [], {}
    for T in tokens:
        for launch in engine_launches(T, shape):
            digest, report = compile_launch(launch, T, sass)
            out.append(report)
            if progress and digest not in seen:
                progress(report)
            seen.add(digest)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m llada.kernels.sm90", description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=list(TOKENS))
    parser.add_argument("--json", default=None, help="write the report here ('-' for stdout)")
    args = parser.parse_args(argv)

    def show(c: Compiled) -> None:
        print(f"[sm90] T={c.tokens:5d} {c.kernel:16s} {' '.join(c.mma) or '-':58s} {' '.join(c.gmma) or '-':34s} "
              f"cvt.e4m3 {c.e4m3_converts:3d} regs {c.registers:3d} spills {c.spills}", file=sys.stderr)

    report = [asdict(c) | {"fp8_wgmma": c.fp8_wgmma} for c in compile_all(tuple(args.tokens), progress=show)]
    if args.json == "-":
        print(json.dumps(report))
    elif args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
