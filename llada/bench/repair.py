"""Repair rates: how often a model's own T2T edits undo one corrupted token of a finished answer.

    python -m llada.bench repair --model assets/model --n 100 --out bench/results/repair-cpu-embedded.json

Each trial takes a held-out task item (`llada.data.tasks.eval_items`, the tasks in turn), decodes it once
unpoked, then writes one random token (never a special one nor the token that was there) at one random
answer position and decodes again with that poke (`llada.records.Poke`). The trial is **repaired** when the
poked run's final text equals the unpoked run's. Two kinds of trial:

* **finished** — the poke comes after the run's last forward, so the block it lands in re-opens and is
  decoded again from the damaged text (docs/cli.md, "Changing the text mid-run"). Measured at each setting
  of `SETTINGS`: Q's τ_edit, S's, the paper's S (τ_edit 0), and editing off, the baseline (T2T can never
  touch a written token, so nothing is repaired unless the re-opened block happens to be written again).
* **earlier block** — in blocks of `--mbe-block` tokens, the poke lands in a finished block after the first
  forward of the next one, without and with MBE (window 1). Without MBE a finished block is frozen; with MBE
  it stays in the forward and may take an MBE edit.

The same items, positions and tokens are used at every setting (one `random.Random(seed)`), so the rates
compare like with like. The JSON gives per setting the trials, the repaired ones (in all and per task), the
rate, the poked runs whose answer is still right, and the extra forwards a poked run took over its unpoked
one.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import dataclass, field

import torch

from ..records import Poke
from .timing import cpu_report, emit

# name -> (mode, settings over the mode's preset): the finished-answer trials
SETTINGS = {"Q": ("Q", {}), "S": ("S", {}), "S (official)": ("S_OFFICIAL", {}),
            "editing off": ("Q", {"editing_threshold": None})}
MBE_MODE = "Q"  # the earlier-block trials: Q's thresholds in short blocks, MBE off and on


@dataclass(frozen=True)
class Trial:
    """One corruption: the item, and where and what to write (the offset in the answer, a token id)."""

    task: str
    prompt: str
    answer: str
    pos: int  # offset in the generated region (0 = the first generated token)
    token: int


@dataclass
class Tally:
    """One setting's trials, in all and per task."""

    trials: int = 0
    repaired: int = 0
    right: int = 0  # poked runs whose final answer is still right
    extra_forwards: int = 0  # summed over trials: the poked run's forwards minus the unpoked run's
    by_task: dict = field(default_factory=dict)  # task -> [trials, repaired]

    def add(self, task: str, repaired: bool, right: bool, extra: int) -> None:
        self.trials += 1
        self.repaired += int(repaired)
        self.right += int(right)
        self.extra_forwards += extra
        counts = self.by_task.setdefault(task, [0, 0])
        counts[0] += 1
        counts[1] += int(repaired)

    def as_dict(self) -> dict:
        n = max(self.trials, 1)
        return {"trials": self.trials, "repaired": self.repaired, "rate": round(self.repaired / n, 4),
                "still_right": self.right, "extra_forwards_mean": round(self.extra_forwards / n, 2),
                "by_task": {task: {"trials": t, "repaired": r} for task, (t, r) in self.by_task.items()}}


def special_ids(pipe) -> set[int]:
    return {pipe.mask_id, pipe.eos_id, *pipe.model.config.stop_token_ids}


def random_token(pipe, old: int, rng: random.Random) -> int:
    """A token drawn uniformly from the vocabulary, never a special one nor `old`."""
    banned = special_ids(pipe) | {old}
    while (token := rng.randrange(pipe.model.config.vocab_size)) in banned:
        pass
    return token


def answer_offsets(pipe, trace) -> list[int]:
    """Offsets (in the generated region) of the answer's tokens: EOS, stops and masks left out."""
    banned = special_ids(pipe)
    return [i for i, t in enumerate(trace.output_ids) if t not in banned]


def decode(pipe, item, cfg, pokes: tuple[Poke, ...] = ()):
    """(trace, its answer text) of one run of `item`."""
    trace = pipe.generate(pipe.encode(item.prompt), cfg, pokes=pokes)
    return trace, pipe.decode_text([t for t in trace.output_ids if t not in special_ids(pipe)])


def poke_after_end(pipe, trace, rng: random.Random) -> tuple[int, int] | None:
    """(offset, token) of a corruption of the finished answer; None for an empty answer."""
    offsets = answer_offsets(pipe, trace)
    if not offsets:
        return None
    pos = rng.choice(offsets)
    return pos, random_token(pipe, trace.output_ids[pos], rng)


def poke_in_earlier_block(pipe, trace, rng: random.Random) -> Poke | None:
    """A corruption of an answer token in a block that is finished while a later block decodes, due after that
    later block's first forward; None when the whole answer lies in one block."""
    P, B = trace.prompt_length, trace.block_length
    firsts = {r.block: r.step for r in trace.records if r.kind == "decode" and r.block_step == 1}
    offsets = [i for i in answer_offsets(pipe, trace) if (P + i) // B + 1 in firsts]
    if not offsets:
        return None
    pos = rng.choice(offsets)
    return Poke(firsts[(P + pos) // B + 1], pos, random_token(pipe, trace.output_ids[pos], rng))


def score(pipe, item, cfg, clean, poke: Poke, tally: Tally) -> None:
    clean_trace, clean_text = clean
    trace, text = decode(pipe, item, cfg, (poke,))
    tally.add(item.task, text == clean_text, item.check(text), trace.forwards - clean_trace.forwards)


def finished_trials(pipe, items, rng: random.Random, gen_length: int) -> dict:
    """{setting: Tally} over one corruption per item, poked after each setting's last forward. The corruption
    (offset, token) is drawn on the first setting's run and used at every setting whose run wrote another
    answer token there (a setting whose answer differs at that offset skips the item)."""
    configs = {name: pipe.config(mode, gen_length=gen_length, eos_early_stop=True, **extra)
               for name, (mode, extra) in SETTINGS.items()}
    tallies = {name: Tally() for name in SETTINGS}
    for item in items:
        clean = {name: decode(pipe, item, cfg) for name, cfg in configs.items()}
        drawn = poke_after_end(pipe, clean[next(iter(SETTINGS))][0], rng)
        if drawn is None:
            continue
        pos, token = drawn
        for name, cfg in configs.items():
            trace = clean[name][0]
            if pos in answer_offsets(pipe, trace) and trace.output_ids[pos] != token:
                score(pipe, item, cfg, clean[name], Poke(trace.steps, pos, token), tallies[name])
    return tallies


def earlier_block_trials(pipe, items, rng: random.Random, gen_length: int, block: int) -> dict:
    """{"MBE off": Tally, "MBE on": Tally}: a corruption in a finished block, due while the next one decodes."""
    tallies = {"MBE off": Tally(), "MBE on": Tally()}
    for item in items:
        off = pipe.config(MBE_MODE, gen_length=gen_length, eos_early_stop=True, block_length=block)
        clean_off = decode(pipe, item, off)
        poke = poke_in_earlier_block(pipe, clean_off[0], rng)
        if poke is None:
            continue
        score(pipe, item, off, clean_off, poke, tallies["MBE off"])
        on = pipe.config(MBE_MODE, gen_length=gen_length, eos_early_stop=True, block_length=block, mbe=True,
                         mbe_window=1)
        clean_on = decode(pipe, item, on)
        if poke_fits(clean_on[0], poke):
            score(pipe, item, on, clean_on, poke, tallies["MBE on"])
    return tallies


def poke_fits(trace, poke: Poke) -> bool:
    """The MBE run wrote the same token there and reached the same step with a later block active."""
    if poke.pos >= len(trace.output_ids) or trace.output_ids[poke.pos] == poke.token:
        return False
    record = trace.step_record(poke.step)
    return record is not None and record.block > (trace.prompt_length + poke.pos) // trace.block_length


def trial_items(tasks: list[str], n: int, seed: int):
    """`n` held-out items, the tasks in turn."""
    from ..data.tasks import eval_items

    per_task = {task: eval_items(task, -(-n // len(tasks)), seed) for task in tasks}
    return [per_task[tasks[i % len(tasks)]][i // len(tasks)] for i in range(n)]


def measure(pipe, n: int, seed: int, tasks: list[str], gen_length: int, block: int) -> dict:
    items = trial_items(tasks, n, seed)
    finished = finished_trials(pipe, items, random.Random(seed), gen_length)
    earlier = earlier_block_trials(pipe, items, random.Random(seed + 1), gen_length, block)
    presets = {name: {"mode": mode, "tau_mask": cfg.threshold, "tau_edit": cfg.editing_threshold,
                      "block_length": cfg.block_length}
               for name, (mode, extra) in SETTINGS.items() for cfg in [pipe.config(mode, **extra)]}
    return {"finished": {k: t.as_dict() for k, t in finished.items()}, "settings": presets,
            "earlier_block": {k: t.as_dict() for k, t in earlier.items()} | {"block_length": block,
                                                                             "mode": MBE_MODE, "mbe_window": 1}}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m llada.bench repair", description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="assets/model")
    ap.add_argument("--n", type=int, default=100, help="corruptions (items, the tasks in turn)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tasks", default="add,sort,reverse,rename")
    ap.add_argument("--gen-length", type=int, default=32)
    ap.add_argument("--mbe-block", type=int, default=8, help="block length of the earlier-block trials")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="", help="also write the JSON here")
    args = ap.parse_args(argv)
    if args.n < 1:
        ap.error(f"--n must be at least 1, got {args.n}")
    from ..pipeline import Pipeline

    torch.set_num_threads(args.threads)
    pipe = Pipeline.load(args.model)
    if pipe.model.config.version != "2.1":
        print(f"{args.model} is a LLaDA{pipe.model.config.version} model: this bench measures LLaDA2.1 runs only "
              f"(its settings are the 2.1 modes, its earlier-block trials 2.1's MBE); 2.2 runs take pokes "
              f"(docs/llada22.md) but their repair rates are not measured here yet", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    results = measure(pipe, args.n, args.seed, args.tasks.split(","), args.gen_length, args.mbe_block)
    emit(cpu_report("repair", argv, t0, args.threads, model=args.model, n=args.n, seed=args.seed,
                    results=results), args.out)
    return 0
