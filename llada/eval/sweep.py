"""Score | TPF sweeps: accuracy against tokens per forward over a grid of (τ_mask, τ_edit), MBE off and on.

    python -m llada.eval.sweep --model assets/model --n 10                # a readable table
    python -m llada.eval.sweep --model assets/model --n 10 --csv          # or --json; progress on stderr
    torchrun --nproc-per-node N -m llada.eval.sweep --per-task 10 ...     # the cells split across N ranks

The LLaDA2.1 paper reports each decoding setting as a pair (score, TPF) (its Tables 1 and 4). A sweep
measures that pair for every cell of a grid (`llada.eval.sweep_grid`) on the checkable tasks
(`llada.data.tasks`), so the trade-off reads as a curve: the Pareto front is the set of cells that no
other cell beats on both accuracy and TPF. Every cell decodes the same held-out items (`eval_items`)
with `eos_early_stop`, each decode bounded by a `Budget` (`llada.budget`: a decode cut by it counts as
wrong and as `cut`). The numbers mean what they mean in `llada.eval.harness` (`Tally` and `ModeReport`
add them up): accuracy is the mean of the per-task accuracies, TPF generated tokens over all forwards
(cache refreshes included). A sweep's decodes run `BATCH` at a time, sharing forwards (`llada.decode`), in
cell order, the next cell's decodes joining as a cell's last ones finish (`_Rows`), and a forward memo
(`llada.forward_memo`) answers every row that another decode already ran (the settings of a grid decode
an item through mostly the same forwards): each decode's trace is the one it gets alone, so a point
depends on neither the batch nor the memo.

`sweep(pipe, spec)` is a generator of `Progress`, one after every decode and one with the `Point` of
each cell as it completes, so a caller can draw the chart as it grows, stop at any time or bound the time
(`max_seconds`). Given a `SweepCache` (llada/eval/sweep_cache.py), finished points are written as they
complete and read back by the next sweep of the same model and items: a second sweep is instant, a
stopped one continues where it stopped, and a grid that adds one value decodes only the new cells.
Rows, CSV, JSON and the table of the command line are `llada.eval.sweep_report`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Iterator, NamedTuple

from ..decode import SharedBatch
from ..budget import Budget
from ..decode import BatchDecoder
from ..forward_memo import ForwardMemo
from .sweep_cache import SweepCache
from .humaneval_task import HumanEvalItem
from .sweep_grid import GEN_LENGTH, PRESETS, TAU_MASKS, TASK_SETS, Cell, Point, SweepSpec, pareto_front, point_of
from .tally import Tally
from ..data.tasks import TASKS, Item
from .sweep_report import format_table, to_csv, to_json

__all__ = ["Budget", "Cell", "Point", "Progress", "SweepSpec", "engine_of", "main", "pareto_front", "score", "sweep"]
MAX_DECODES = 20_000  # cells x tasks x items of one sweep (~25 min of the shipped model on one CPU thread)
DECODE_BUDGET = Budget(forwards=256, seconds=10.0)  # per decode of a sweep
BATCH = 32  # decodes run this many at a time, sharing forwards (the same traces as one by one)


def score(pipe, item: Item, cfg, budget: Budget) -> tuple[Tally, bool]:
    """Decode one item within `budget`; its tally and whether the budget cut it (a cut item counts wrong)."""
    item, ids, cfg = _prepared(pipe, item, cfg)
    trace = pipe.new_trace(ids, cfg)
    return _tally(pipe, item, trace, budget.bound(pipe.stream(ids, cfg)))


def _prepared(pipe, item: Item, cfg) -> tuple[Item, list[int], object]:
    """The item, its prompt's ids and its settings (a HumanEval item: EvalPlus's prompt, room to write)."""
    if isinstance(item, HumanEvalItem):
        return item.prepare(pipe, cfg)
    return item, pipe.encode(item.prompt), cfg


def _tally(pipe, item: Item, trace, bounded, seconds=None) -> tuple[Tally, bool]:
    """Run a bounded decode into `trace`; its tally and whether the budget cut it (a cut item counts wrong).

    `seconds()`: the decode's time when it is not the trace's (a share of shared forwards)."""
    for _ in trace.follow(bounded):
        pass
    cut = bool(bounded.cut)
    text = pipe.decode_text([t for t in trace.output_ids if t != pipe.eos_id])
    tally = Tally(correct=int(not cut and item.check(text)), items=1, tokens=len(trace.output_ids),
                  forwards=trace.forwards, seconds=trace.seconds if seconds is None else seconds(),
                  edits=trace.edits + trace.mbe_edits)
    return tally, cut


class Progress(NamedTuple):
    """One update of a sweep: how far it is, every point so far, and the point this update completed."""

    done: int  # decodes finished (a cached cell counts all its decodes)
    total: int  # decodes of the whole sweep
    cells: int  # cells of the whole sweep
    points: tuple[Point, ...]  # in the spec's cell order
    point: Point | None = None  # the point completed by this update
    cached: int = 0  # points read from the cache
    decoded: int = 0  # decodes run by this sweep so far (the rest came from the cache)
    status: str = "running"  # "running", "done" or "stopped"
    note: str = ""  # why the sweep stopped early
    seconds: float = 0.0  # wall time so far


def engine_of(pipe) -> str:
    """Where and in which number formats a pipeline decodes, e.g. "cpu/float32" (part of the cache's key)."""
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in pipe.model.parameters()})
    return f"{pipe.model.device.type}/{'+'.join(dtypes)}"


def sweep(pipe, spec: SweepSpec, cache=None, budget: Budget = DECODE_BUDGET,
          max_seconds: float | None = None, max_decodes: int = MAX_DECODES,
          cells: list[Cell] | None = None) -> Iterator[Progress]:
    """Measure every cell of `spec` on `pipe` (or only `cells` of them: a rank's share), yielding `Progress`;
    the last update says done or stopped."""
    cells = spec.cells(pipe.presets) if cells is None else cells
    items = spec.items()
    per_cell = sum(map(len, items.values()))
    total = len(cells) * per_cell
    if total > max_decodes:
        raise ValueError(f"this sweep needs {total:,} decodes ({len(cells)} cells x {per_cell} items); at most "
                         f"{max_decodes:,}: choose fewer values or items")
    started = time.monotonic()
    where = (pipe.path, engine_of(pipe)) if cache is not None and pipe.path is not None else None
    known = cache.load(*where, spec, budget) if where else {}
    points = {c.key: known[c.key] for c in cells if c.key in known}
    state = _State(cells, points, total, per_cell, started, cached=len(points))
    yield state.update()
    todo = [c for c in cells if c.key not in points]
    if todo:
        pipe.generate(pipe.encode(items[spec.tasks[0]][0].prompt), todo[0].config(pipe, spec.gen_length))  # warm-up
    rows = _Rows(pipe, items, spec, budget, _to_measure(pipe, todo, points, cells, spec.gen_length))
    for cell in todo:
        point = _same_setting(pipe, cell, state, spec.gen_length)
        if point is None:
            point = yield from _measure(pipe, cell, rows, state, max_seconds)
        if point is None:
            yield state.update(status="stopped", note=f"time budget reached: {max_seconds:g} s per sweep")
            return
        state.points[cell.key] = point
        if where:
            cache.save(*where, spec, budget, point)
        yield state.update(point=point)
    yield state.update(status="done")


def _same_setting(pipe, cell: Cell, state: "_State", gen_length: int) -> Point | None:
    """The point of a measured cell that decodes exactly as `cell` does (a preset equal to a grid cell)."""
    cfg = cell.config(pipe, gen_length)
    for other in state.cells:
        if other.key in state.points and other.config(pipe, gen_length) == cfg:
            state.copied += 1
            return replace(state.points[other.key], cell=cell)
    return None


@dataclass
class _State:
    cells: list[Cell]
    points: dict[str, Point]  # cell key -> point, filled as cells complete
    total: int
    per_cell: int
    started: float
    cached: int = 0  # points read from the cache
    copied: int = 0  # points copied from an equal cell (a preset that is also a grid cell)
    decoded: int = 0  # decodes run by this sweep

    def update(self, point: Point | None = None, status: str = "running", note: str = "") -> Progress:
        ordered = tuple(self.points[c.key] for c in self.cells if c.key in self.points)
        done = (self.cached + self.copied) * self.per_cell + self.decoded
        return Progress(done, self.total, len(self.cells), ordered, point, self.cached, self.decoded, status, note,
                        time.monotonic() - self.started)


def _to_measure(pipe, todo: list[Cell], points: dict, cells: list[Cell], gen_length: int) -> list[Cell]:
    """The cells of `todo` that will be decoded: not those that `_same_setting` will copy from a cell before them."""
    out, seen = [], [c.config(pipe, gen_length) for c in cells if c.key in points]
    for cell in todo:
        cfg = cell.config(pipe, gen_length)
        if cfg not in seen:
            out.append(cell)
        seen.append(cfg)
    return out


class _Rows:
    """One `BatchDecoder` for every decode of a sweep, in cell order: decodes join as others finish, the
    next cell's as this cell's last ones finish, so forwards stay `BATCH` rows wide however long the decode
    being read takes. A decode is added (its state allocated) only when `BATCH` others wait no more."""

    def __init__(self, pipe, items: dict[str, list[Item]], spec: SweepSpec, budget: Budget, cells: list[Cell]):
        self.pipe, self.budget, self.tasks = pipe, budget, list(items)
        self.jobs = ((cell, task, item) for cell in cells for task, task_items in items.items() for item in task_items)
        self.gen_length = spec.gen_length
        batch = BatchDecoder(pipe.model, pipe.mask_id, pipe.eos_id, max_batch=BATCH, memo=ForwardMemo())
        self.streams = SharedBatch(batch, self._feed)
        self.added: deque = deque()  # (row index, cell key, task, item, ids, cfg) added and not yet read

    def _feed(self, batch: BatchDecoder) -> None:
        """Add decodes until `BATCH` wait (called before each step, under the streams' lock)."""
        while len(batch.waiting) < BATCH:
            job = next(self.jobs, None)
            if job is None:
                return
            cell, task, item = job
            item, ids, cfg = _prepared(self.pipe, item, cell.config(self.pipe, self.gen_length))
            row = batch.add(ids, cfg, may_continue=self.budget.allows)  # no forward past its budget
            self.added.append((row, cell.key, task, item, ids, cfg))

    def next(self, cell: Cell) -> tuple:
        """The next decode of `cell` to read: (row, task, item, ids, cfg)."""
        if not self.added:
            self.streams.top_up()
        row, key, *rest = self.added.popleft()
        if key != cell.key:
            raise RuntimeError(f"sweep rows out of order: {key} read for {cell.key}")
        return (row, *rest)

    def drop_all(self) -> None:
        """Stop every decode added and not read (a sweep out of time)."""
        with self.streams.lock:
            for row, *_ in self.added:
                self.streams.batch.drop(row)
            self.added.clear()
            self.jobs = iter(())


def _measure(pipe, cell: Cell, rows: _Rows, state: _State, max_seconds: float | None):
    """Read every decode of one cell from the sweep's shared batch (`_Rows`: each decode as alone), yielding
    progress after each; returns its Point (None: out of time).

    Each decode keeps its own budget. Its seconds are its share of the steps it took part in (each step's
    time divided among the decodes it served), so that the decodes' seconds add up to the sweep's engine
    time, as when they ran one after another: a decode that shares its forwards with 15 others is not
    charged 16 times for them (the budget's seconds bound what a decode costs, not how full its batch was)."""
    tallies, cut = {task: Tally() for task in rows.tasks}, 0
    for index in range(state.per_cell):
        if max_seconds is not None and time.monotonic() - state.started > max_seconds:
            state.decoded -= index  # this cell's decodes are dropped
            rows.drop_all()
            return None
        row, task, item, ids, row_cfg = rows.next(cell)
        trace, stream = pipe.new_trace(ids, row_cfg), rows.streams.row(row)

        def clock(stream=stream) -> float:  # the decode's share of the forwards it took part in
            return stream.seconds

        tally, was_cut = _tally(pipe, item, trace, rows.budget.bound(stream, clock=clock), clock)
        tallies[task].add(tally)
        cut += was_cut
        state.decoded += 1
        yield state.update()
    return point_of(cell, tallies, cut)


# ---- command line --------------------------------------------------------------------------------------

def _floats(text: str, name: str, allow_off: bool = False) -> tuple:
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        if allow_off and part.lower() == "off":
            out.append(None)
            continue
        try:
            out.append(float(part))
        except ValueError:
            raise ValueError(f"--{name}: {part!r} is not a number{' or off' if allow_off else ''}") from None
    return tuple(out)


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, SweepSpec]:
    ap = argparse.ArgumentParser(prog="python -m llada.eval.sweep", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="assets/model", help="model directory")
    ap.add_argument("--tau-mask", default=",".join(f"{v:g}" for v in TAU_MASKS), help="comma list of τ_mask")
    ap.add_argument("--tau-edit", default="off,0,0.5,0.9", help="comma list of τ_edit (off: editing off)")
    ap.add_argument("--mbe", default="off,on", help="MBE series: off, on or off,on")
    ap.add_argument("--presets", default=",".join(PRESETS), help="the model's presets to mark ('' for none)")
    ap.add_argument("--tasks", default=",".join(TASKS), help=f"comma list of {', '.join(TASK_SETS)}")
    ap.add_argument("--n", "--per-task", type=int, default=10, help="items per task (humaneval+: its first n "
                    "problems; --per-task under torchrun, whose own options make --n ambiguous)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--split", choices=("eval", "train"), default="eval")
    ap.add_argument("--block-length", type=int, default=None, help="the grid's block length (default: S's)")
    ap.add_argument("--gen-length", type=int, default=GEN_LENGTH)
    ap.add_argument("--cache-dir", default=None, help="where finished points are kept (default: "
                                                      "~/.cache/llada-playground/explorer)")
    ap.add_argument("--no-cache", action="store_true", help="neither read nor write cached points")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    out = ap.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print JSON")
    out.add_argument("--csv", action="store_true", help="print CSV")
    args = ap.parse_args(argv)
    try:
        mbe = tuple({"off": False, "on": True}[m.strip()] for m in args.mbe.split(",") if m.strip())
        spec = SweepSpec(_floats(args.tau_mask, "tau-mask"), _floats(args.tau_edit, "tau-edit", True), mbe,
                         tuple(p for p in args.presets.split(",") if p), tuple(args.tasks.split(",")), args.n,
                         args.seed, args.split, args.block_length, args.gen_length)
    except KeyError as err:
        ap.error(f"--mbe: {err.args[0]!r} is not off or on")
    except ValueError as err:
        ap.error(str(err))
    return args, spec


def main(argv: list[str] | None = None) -> None:
    """The sweep's table, CSV or JSON. Under torchrun each rank measures every W-th cell (`llada.dist.share`)
    and rank 0 prints the points of all of them, in the grid's order, as one process would."""
    import torch
    from tqdm import tqdm

    from ..dist.group import Ranks
    from ..dist.share import gather, share
    from ..fast.heap import keep_freed_memory
    from ..pipeline import Pipeline

    args, spec = parse_args(argv)
    keep_freed_memory()
    torch.set_num_threads(args.threads)
    ranks = Ranks.start(torch.device("cpu"))  # None for one process
    lead = ranks is None or ranks.lead
    pipe = Pipeline.load(args.model)
    cache = None if args.no_cache else SweepCache(args.cache_dir)
    bar = tqdm(desc="sweep", unit="decode", file=sys.stderr, disable=not lead)
    try:
        for progress in sweep(pipe, spec, cache, cells=share(spec.cells(pipe.presets), ranks)):
            bar.total = progress.total
            bar.update(progress.done - bar.n)
            if progress.point is not None:
                bar.set_postfix_str(f"{progress.point.cell.key} acc {progress.point.accuracy:.2f} "
                                    f"TPF {progress.point.tpf:.2f}")
    except ValueError as err:  # the same settings on every rank: every rank stops here, before any collective
        sys.exit(f"error: {err}" if lead else 2)
    bar.close()
    points, cached = gather(list(progress.points), ranks), gather([progress.cached], ranks)
    if ranks is not None:
        ranks.stop()
    if not lead:
        return
    print(f"sweep of {pipe.name}: {len(points)} points ({sum(cached)} from the cache) in "
          f"{progress.seconds:.1f} s", file=sys.stderr)
    if args.json:
        print(json.dumps(to_json(pipe, spec, points), indent=2))
    elif args.csv:
        print(to_csv(points), end="")
    else:
        print(format_table(points))


if __name__ == "__main__":
    main()
