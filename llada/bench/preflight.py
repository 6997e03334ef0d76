"""A lease's first seconds: is the stack whole? Versions, the GPU, one Triton kernel compiled and run.

    python -m llada.bench.preflight OUT.json [--dry-run]

Writes {"ok", "python", "torch", "triton", "cuda", "gpu", "capability", "memory_gb", "fp8", "tuned_table",
"kernel_ms", "error"} and exits 0 when a trivial kernel (`_add_one`: y = x + 1 over 1,000 elements) compiled, ran
and gave the right answer on the GPU; 1 otherwise, with the reason. `--dry-run` runs the same kernel
under Triton's CPU interpreter (TRITON_INTERPRET=1, set before triton is imported) so that the
command is exercised without a GPU. A broken driver, a torch built for another CUDA, or a Triton that
cannot compile for this GPU all fail here in seconds, before a lease spends minutes on them.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path


def add_one(x):
    """x + 1 through a one-line Triton kernel: (N,) fp32 -> (N,) fp32."""
    import triton
    import triton.language as tl

    @triton.jit
    def _add_one(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < N) + 1.0, mask=offs < N)

    y = x.new_empty(x.shape)
    _add_one[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
    return y


def check(dry_run: bool) -> dict:
    """The versions, the device and the kernel's verdict; never raises."""
    report: dict = {"ok": False, "python": platform.python_version(), "dry_run": dry_run}
    try:
        import torch

        report["torch"], report["cuda"] = torch.__version__, torch.version.cuda
        import triton

        report["triton"] = triton.__version__
        device = _device(torch, dry_run, report)
        x = torch.arange(1000, dtype=torch.float32, device=device)
        start = time.perf_counter()
        y = add_one(x)
        if device.type == "cuda":
            torch.cuda.synchronize()
        report["kernel_ms"] = round(1e3 * (time.perf_counter() - start), 1)  # compile included
        if not torch.equal(y, x + 1):
            raise RuntimeError("the kernel ran and gave a wrong answer")
        report["ok"] = True
    except Exception as err:  # noqa: BLE001  (any failure is the finding, in one line)
        report["error"] = f"{type(err).__name__}: {str(err).strip().splitlines()[0][:300] if str(err) else ''}"
    return report


def _device(torch, dry_run: bool, report: dict):
    if dry_run:
        report["gpu"] = None
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError(f"torch {torch.__version__} sees no CUDA device (use --dry-run without a GPU)")
    props = torch.cuda.get_device_properties(0)
    report |= {"gpu": props.name, "capability": f"{props.major}.{props.minor}",
               "memory_gb": round(props.total_memory / 2**30, 1), "sms": props.multi_processor_count,
               "fp8": (props.major, props.minor) >= (8, 9), "tuned_table": tuned_table(props.name)}
    return torch.device("cuda")


def tuned_table(gpu: str) -> str | None:
    """The tuned tile table the MoE kernels read on this GPU (`configs.choose_config`), or None."""
    from ..fast.kernels.configs import TUNED_DIR, device_slug

    path = TUNED_DIR / f"{device_slug(gpu)}.json"
    return f"llada/fast/kernels/tuned/{path.name}" if path.exists() else None


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print("usage: python -m llada.bench.preflight OUT.json [--dry-run]", file=sys.stderr)
        return 2
    dry_run = "--dry-run" in argv
    if dry_run:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    report = check(dry_run)
    Path(argv[0]).write_text(json.dumps(report, indent=1) + "\n")
    print(f"[preflight] {'ok' if report['ok'] else 'FAILED: ' + report['error']}: torch {report.get('torch')}, "
          f"triton {report.get('triton')}, {report.get('gpu') or 'CPU (interpreter)'}", file=sys.stderr)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
