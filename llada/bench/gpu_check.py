"""One command for a GPU owner: self-check, compiled kernel tests, tuner, benchmarks, expected vs measured.

    python -m llada.bench gpu-check --out bench/results/NAME.json [--skip tests tune ...] [--plan]

Steps, each in its own process so that one failure never stops the rest (their JSON lands beside
--out, in NAME-parts/):

    self-check  the fast engine against the PyTorch reference on a mini-shaped MoE layer at M = 1, 32
                (bf16 weights, and FP8 where the GPU has it): `llada.fast.engine.self_check`
    tests       the kernel, graph and engine tests, compiled on this GPU (pytest)
    tune        `python -m llada.bench kernels --tune` at M = 1..512 (-> llada/fast/kernels/tuned/<gpu>.json)
    kernels     the MoE layer at M = 1..512: time, GB/s, share of copy bandwidth, vs bf16 PyTorch
    forward     one mini-shaped forward (32-token block over 1,024 cached): CUDA graph vs eager
    decode      the decode loop at the mini's shape, FP8 experts: dynamic forward vs CUDA graphs

Then each figure is printed next to what it should be (`expectations`): the targets in docs/gpu.md
("Targets") and the per-kernel estimates of its "Per-kernel estimates" table, which are
estimates on paper, not measurements. Without CUDA it says so in one line and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ["tests/test_kernels_fp8.py", "tests/test_kernels_moe.py", "tests/test_kernels_routing.py",
         "tests/test_kernels_launches.py", "tests/test_kernels_poison.py", "tests/test_kernels_configs.py",
         "tests/test_kernels_norms.py", "tests/test_kernels_fused_ops.py", "tests/test_kernels_census.py",
         "tests/test_graphs.py", "tests/test_graphs_fast.py", "tests/test_quantize.py", "tests/test_engine_select.py",
         "tests/test_engine_self_check.py", "tests/test_engine_fallback.py"]
STEPS = ("self-check", "tests", "tune", "kernels", "forward", "decode")
H200_FORWARD_MS = 3.9  # the forward target on an H200 (docs/gpu.md, "Targets"); scaled by copy bandwidth elsewhere
H200_COPY_GB_S = 4000.0  # ~83% of the H200's 4.8 TB/s peak: what a device copy reaches (estimate)
SHARE_TARGET = 0.70  # the MoE layer at M = 32 streams its weights at >= 70% of the copy bandwidth


def commands(parts: Path, fp8: bool = True) -> dict[str, list[str]]:
    """The command line of each step (run from the repository root); without FP8 (sm80, sm86) the
    tuner, the layer bench, the forward and the decode run bf16 experts."""
    py = [sys.executable]
    quantize = ["--quantize", "fp8" if fp8 else "none"]
    weights = ["--weights", "fp8" if fp8 else "bf16"]
    return {
        "self-check": py + ["-m", "llada.bench.gpu_check", "--self-check-only", str(parts / "self-check.json")],
        "tests": py + ["-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS],
        "tune": py + ["-m", "llada.bench", "kernels", "--tune", *weights, "--tokens", "1", "8", "32", "128", "512",
                      "--out", str(parts / "kernels-tune.json")],
        "kernels": py + ["-m", "llada.bench", "kernels", *weights, "--out", str(parts / "kernels.json")],
        "forward": py + ["-m", "llada.bench", "forward", "--shape", "llada2.1-mini", "--random-weights", *quantize,
                         "--out", str(parts / "forward.json")],
        "decode": py + ["-m", "llada.bench", "decode", "--shape", "llada2.1-mini", *quantize, "--gen-lengths", "256",
                        "--forward", "dynamic", "graph", "--out", str(parts / "decode.json")],
    }


def run_step(name: str, argv: list[str], timeout: float) -> dict:
    print(f"[gpu-check] {name}: {' '.join(argv[1:])}", file=sys.stderr)
    start = time.perf_counter()
    try:
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        rc, tail = done.returncode, (done.stdout + done.stderr)[-4000:]
    except subprocess.TimeoutExpired as err:
        rc, tail = 124, f"timed out after {timeout:.0f} s: {str(err.stdout or '')[-2000:]}"
    seconds = time.perf_counter() - start
    print(f"[gpu-check] {name}: {'ok' if rc == 0 else f'FAILED (exit {rc})'} in {seconds:.0f} s", file=sys.stderr)
    return {"step": name, "command": " ".join(argv[1:]), "returncode": rc, "seconds": seconds, "tail": tail}


def self_check_only(out: str) -> int:
    """A mini-shaped two-layer model (bf16, then FP8 where the GPU has it) through `llada.fast.engine.self_check`."""
    import torch

    from ..config import ModelConfig
    from ..fast.engine import to_fast, self_check
    from ..fast.kernels.devices import spec_of
    from ..fast.quantize import quantize_model_fp8
    from .forward import SHAPES, random_model

    cfg = ModelConfig(**{**SHAPES["llada2.1-mini"], "num_hidden_layers": 2, "vocab_size": 1024})
    device = torch.device("cuda")
    results = {"spec": vars(spec_of(device))}
    for weights in ("bf16", "fp8") if spec_of(device).fp8 else ("bf16",):
        model = random_model(cfg, device, torch.bfloat16)
        if weights == "fp8":
            quantize_model_fp8(model, impl="torch")  # the reference quantizer: the kernels are under test
        try:
            results[weights] = self_check(to_fast(model))
        except Exception as err:  # noqa: BLE001  (a compile or launch failure is the finding)
            results[weights] = [{"ok": False, "error": f"{type(err).__name__}: {str(err)[:300]}"}]
    Path(out).write_text(json.dumps(results, indent=1) + "\n")
    return 0 if all(c["ok"] for k in ("bf16", "fp8") for c in results.get(k, [])) else 1


def expectations(parts: dict[str, dict | None]) -> list[dict]:
    """Each measured figure beside what it should be (targets and paper estimates), with a verdict."""
    rows = []
    check = parts.get("self-check") or {}
    for weights in ("bf16", "fp8"):
        for c in check.get(weights, []):
            rows.append(_row(f"self-check {weights} M={c.get('tokens', '?')}", "rel. RMSE < 0.02, routers agree",
                             c.get("error") or f"{c['experts_rel_rmse']:.2g}, {c['router_agreement']:.2f}", c["ok"]))
    kernels = parts.get("kernels") or {}
    copy = kernels.get("copy_gb_per_s")
    for row in kernels.get("rows", []):
        floor_us = row["weight_bytes"] / (copy * 1e9) * 1e6 if copy else None  # every touched weight once
        if row["tokens"] == 32:
            rows.append(_row("MoE layer M=32, share of copy bandwidth", f">= {SHARE_TARGET:.0%} (target)",
                             f"{row['layer_share_of_copy']:.0%}", row["layer_share_of_copy"] >= SHARE_TARGET))
        if "gemm_ms" in row and floor_us:
            rows.append(_row(f"GEMMs M={row['tokens']} (gate/up + SiLU + down)",
                             f"~{floor_us:.0f} us (weights at copy speed; estimate)", f"{1e3 * row['gemm_ms']:.0f} us",
                             1e3 * row["gemm_ms"] <= 1.5 * floor_us + 10))
    forward = parts.get("forward") or {}
    if forward.get("forward_ms"):
        target = H200_FORWARD_MS * H200_COPY_GB_S / forward["copy_gb_per_s"]
        rows.append(_row("mini forward, CUDA graph", f"<= {target:.2f} ms (3.9 ms on an H200, scaled by copy)",
                         f"{forward['forward_ms']:.2f} ms", forward["forward_ms"] <= target))
        rows.append(_row("host syncs per forward", "0", str(forward.get("host_syncs_per_forward")),
                         forward.get("host_syncs_per_forward") == 0))
    return rows


def _row(figure: str, expected: str, actual: str, ok: bool) -> dict:
    return {"figure": figure, "expected": expected, "actual": actual, "ok": bool(ok)}


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m llada.bench gpu-check", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=None, help="the report (default bench/results/gpu-check-<gpu>.json)")
    parser.add_argument("--skip", nargs="+", default=[], choices=STEPS, help="steps to leave out")
    parser.add_argument("--plan", action="store_true", help="print the steps' commands and exit (no GPU needed)")
    parser.add_argument("--step-timeout", type=float, default=3600.0, help="seconds per step")
    parser.add_argument("--self-check-only", default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.self_check_only:
        return self_check_only(args.self_check_only)
    import torch

    out = Path(args.out or "bench/results/gpu-check.json")
    parts_dir = out.with_name(out.stem + "-parts")
    cuda = torch.cuda.is_available()
    fp8 = _has_fp8() if cuda else True
    steps = {k: v for k, v in commands(parts_dir, fp8).items() if k not in args.skip}
    if args.plan:
        for name, argv_ in steps.items():
            print(f"{name:10s} {' '.join(argv_[1:])}")
        return 0
    if not cuda:
        print("error: gpu-check measures a CUDA GPU and this machine has none (torch "
              f"{torch.__version__}); --plan lists what it would run", file=sys.stderr)
        return 2
    if not fp8:
        print("[gpu-check] this GPU has no FP8 (sm80 / sm86): every step runs bf16 experts", file=sys.stderr)
    return _run_all(steps, out, parts_dir, args.step_timeout)


def _has_fp8() -> bool:
    from ..fast.kernels.devices import spec_of

    return spec_of(0).fp8


def _run_all(steps: dict, out: Path, parts_dir: Path, timeout: float) -> int:
    from .timing import device_info

    import torch

    parts_dir.mkdir(parents=True, exist_ok=True)
    ran = [run_step(name, argv, timeout) for name, argv in steps.items()]
    parts = {name: _read(parts_dir / f"{name}.json") for name in ("self-check", "kernels", "forward", "decode")}
    table = expectations(parts)
    report = device_info(torch.device("cuda")) | {"bench": "gpu-check", "steps": ran, "parts": parts,
                                                  "expected_vs_actual": table}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"\n{'figure':45s} {'expected':52s} {'actual':18s}", file=sys.stderr)
    for row in table:
        print(f"{row['figure']:45s} {row['expected']:52s} {row['actual']:18s} {'ok' if row['ok'] else 'MISS'}",
              file=sys.stderr)
    print(f"[gpu-check] wrote {out}", file=sys.stderr)
    return 0 if all(r["returncode"] == 0 for r in ran) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
