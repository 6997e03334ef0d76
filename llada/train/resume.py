"""Stopping and continuing a run: the built rows, the training state, and the held-out loss curve.

    OUT/rows.pt      the rows a run trains on (window, function and held-out function rows) and the
                     corpus summary; with OUT/tokenizer.json it replaces the corpus build on `--resume`
                     and for `--data-from OUT` (several runs on the same data)
    OUT/resume.pt    weights, optimizer state, the step, the seconds trained, the loss log and every
                     random state (noise, block choice, row order and position, task stream), written
                     at each checkpoint; `--resume` continues from it as if the run had not stopped
    OUT/checkpoints/MIN/   a loadable model directory per checkpoint (learning curves after the fact)

The held-out loss is the training loss (M2T + T2T, no self-draft) of a fixed set of held-out function
rows, under a fixed noise seed, so that points of one run, and of runs on the same data, compare.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .data import Rows
from .objective import Batch, diffusion_loss

ROWS, STATE = "rows.pt", "resume.pt"
HELD_OUT_SEED = 1234


def save_rows(out: Path, rows: dict[str, Rows], data: dict) -> Path:
    path = Path(out) / ROWS
    torch.save({"rows": {k: vars(r) for k, r in rows.items()}, "data": data}, path)
    return path


def load_rows(src: Path) -> tuple[dict[str, Rows], dict]:
    path = Path(src) / ROWS
    if not path.exists():
        raise ValueError(f"{path} does not exist: no built rows to continue from (train once without it)")
    saved = torch.load(path, weights_only=False)
    return {k: Rows(**v) for k, v in saved["rows"].items()}, saved["data"]


def _sampler_state(s) -> dict | None:
    return None if s is None else {"gen": s.gen.get_state(), "order": s.order, "cursor": s.cursor}


def _restore_sampler(s, state: dict | None) -> None:
    """The sampler's random state and place in its pass; a pass over rows that have since been rebuilt
    (another count) is dropped, and the sampler starts a new one."""
    if s is not None and state is not None:
        s.gen.set_state(state["gen"])
        if len(state["order"]) in (0, len(s.rows)):
            s.order, s.cursor = state["order"], state["cursor"]


def save_state(run, step: int, seconds: float) -> Path:
    """Everything `--resume` needs, written atomically (a stop mid-write keeps the previous state)."""
    code, tasks = run.built.code, run.built.tasks
    state = {"model": run.built.model.state_dict(), "opt": run.opt.state_dict(), "step": step, "seconds": seconds,
             "log": run.log, "curve": run.curve, "gen": run.gen.get_state(), "pick": run.pick.getstate(),
             "code_rng": code.rng.getstate(), "windows": _sampler_state(code.windows),
             "functions": _sampler_state(code.functions), "tasks_rng": tasks.rng.getstate()}
    path = Path(run.tc.out) / STATE
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)
    return path


def load_state(run) -> tuple[int, float]:
    """Restore a run from OUT/resume.pt; returns (step, seconds trained)."""
    path = Path(run.tc.out) / STATE
    if not path.exists():
        raise ValueError(f"{path} does not exist: nothing to resume (the run wrote no checkpoint yet)")
    state = torch.load(path, weights_only=False)
    run.built.model.load_state_dict(state["model"])
    run.opt.load_state_dict(state["opt"])
    run.log[:], run.curve[:] = state["log"], state["curve"]
    run.gen.set_state(state["gen"])
    run.pick.setstate(state["pick"])
    code = run.built.code
    code.rng.setstate(state["code_rng"])
    _restore_sampler(code.windows, state["windows"])
    _restore_sampler(code.functions, state["functions"])
    run.built.tasks.rng.setstate(state["tasks_rng"])
    return state["step"], state["seconds"]


@torch.no_grad()
def held_out_loss(run, rows: Rows, batch_size: int = 16) -> float:
    """Mean loss of the held-out rows under a fixed noise seed (the model is put back in training mode)."""
    model, mask_id = run.built.model, run.built.tokenizer.mask_token_id
    if not len(rows):
        return float("nan")
    gen = torch.Generator(device=run.device).manual_seed(HELD_OUT_SEED)
    block = max(b for b in run.tc.block_lengths if rows.ids.shape[1] % b == 0)
    model.eval()
    total, n = 0.0, 0
    for start in range(0, len(rows), batch_size):
        sl = slice(start, start + batch_size)
        batch = Batch(rows.ids[sl].long(), rows.prompt_len[sl].long(), rows.answer_len[sl].long()).to(run.device)
        total += float(diffusion_loss(model, batch, block, mask_id, run.tc.noise, gen)) * len(batch.ids)
        n += len(batch.ids)
    model.train()
    return total / n
