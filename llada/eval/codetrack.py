"""The code track of `python -m llada.eval`: held-out functions, completed in every mode, then checked.

Items are functions of held-out files (`sources`, split by file path) with a docstring: the prompt is
the signature and the docstring, the model writes the body (`code.py`). Per mode the report gives

    parses      share of completions with which the function parses (`ast.parse`)
    in_scope    share that parse and read only names in scope (builtins, the module's names, the
                enclosing functions' names, names bound in the function)
    multi_line  share that parse with a body of two lines or more (docstring left out): a one-line
                `return ...` parses easily, a body that does several things is the harder target
    tpf, tps, edits_per_100, mbe_runs   as in the task track

and `reference` scores the held-out functions' own bodies the same way: the ceiling of the checks
(a body may read a name the module creates dynamically, e.g. through `globals()`).

JSON, under the report's "code" key:

    {"n": N, "gen_length": G, "reference": {"parses": .., "in_scope": .., "multi_line": ..},
     "modes": {"S": {"threshold": .., "editing_threshold": .., "parses": .., "in_scope": .., "multi_line": ..,
                     "tpf": .., "tps": .., "edits_per_100": .., "mbe_runs": ..}, ...}}
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from ..presets import tau_text
from .batched import BATCH, decode_texts
from ..data.code import CodeFunction, check_completion, code_items
from ..data.sources import load_sources, source_roots
from .tally import MODES, Tally, mode_config, run_tally


@dataclass
class CodeTally(Tally):
    parses: int = 0
    in_scope: int = 0
    multi_line: int = 0

    def code_summary(self) -> dict:
        base = self.summary()
        n = max(self.items, 1)
        return {"parses": self.parses / n, "in_scope": self.in_scope / n, "multi_line": self.multi_line / n,
                **{k: base[k] for k in ("tpf", "tps", "edits_per_100", "mbe_runs")}}


def held_out_items(n: int, seed: int, roots: list[str | Path] | None = None) -> list[CodeFunction]:
    """`n` held-out functions of the installed Python source (or of `roots`)."""
    roots = source_roots() if roots is None else [Path(r) for r in roots]
    return code_items(load_sources(roots, split="eval"), n, seed)


def reference_scores(items: list[CodeFunction]) -> dict:
    """The checks applied to the functions' own bodies."""
    scores = [check_completion(it, it.body) for it in items]
    n = max(len(items), 1)
    return {"parses": sum(s.parses for s in scores) / n, "in_scope": sum(s.in_scope for s in scores) / n,
            "multi_line": sum(s.parses and s.body_lines >= 2 for s in scores) / n}


def evaluate_code(pipe, items: list[CodeFunction], modes: list[str] | None = None, gen_length: int = 128,
                  progress: bool = True, batch: int = BATCH) -> dict:
    """The code track of every mode on the same items, `batch` decoded at once (the same outputs as one by one)."""
    cfgs = {mode: mode_config(pipe, mode, gen_length) for mode in (modes or list(MODES))}
    return evaluate_code_configs(pipe, items, cfgs, progress, batch)


def evaluate_code_configs(pipe, items: list[CodeFunction], cfgs: dict, progress: bool = True,
                          batch: int = BATCH) -> dict:
    """The code track of every named DecodeConfig of `cfgs` ({name: cfg}, one generation length) on `items`."""
    from tqdm import tqdm

    lengths = {cfg.gen_length for cfg in cfgs.values()}
    if len(lengths) != 1:
        raise ValueError(f"the code track compares one generation length, got {sorted(lengths)}")
    jobs = [(name, item) for item in items for name in cfgs]  # one batch; an item's settings side by side (memo)
    bar = tqdm(total=len(jobs), desc="eval code", file=sys.stderr, disable=not progress)
    runs = decode_texts(pipe, [it.prompt for _, it in jobs], [cfgs[name] for name, _ in jobs], batch,
                        progress=bar.update)
    bar.close()
    tallies = {name: CodeTally() for name in cfgs}
    for (name, item), (text, result, seconds) in zip(jobs, runs):
        score = check_completion(item, text)
        tallies[name].add(CodeTally(**(asdict(run_tally(result, cfgs[name])) | {"seconds": seconds}),
                                    parses=int(score.parses), in_scope=int(score.in_scope),
                                    multi_line=int(score.parses and score.body_lines >= 2)))
    out = {name: {"threshold": cfg.threshold, "editing_threshold": cfg.editing_threshold,
                  **tallies[name].code_summary()} for name, cfg in cfgs.items()}
    return {"n": len(items), "gen_length": lengths.pop(), "reference": reference_scores(items), "modes": out}


def format_code_table(code: dict) -> str:
    """Markdown table of the code track: one row per mode."""
    head = ["mode", "tau_mask", "tau_edit", "parses %", "in scope %", "≥ 2 lines %", "TPF", "TPS", "edits/100",
            "MBE runs %"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, m in code["modes"].items():
        cells = [name, f"{m['threshold']:g}", tau_text(m['editing_threshold']), f"{100 * m['parses']:.1f}",
                 f"{100 * m['in_scope']:.1f}", f"{100 * m.get('multi_line', 0):.1f}", f"{m['tpf']:.2f}",
                 f"{m['tps']:.0f}", f"{m['edits_per_100']:.1f}", f"{100 * m['mbe_runs']:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    ref = code["reference"]
    return (f"code track: {code['n']} held-out functions, gen_length {code['gen_length']} "
            f"(their own bodies: parses {100 * ref['parses']:.0f}%, in scope {100 * ref['in_scope']:.0f}%, "
            f"≥ 2 lines {100 * ref.get('multi_line', 0):.0f}%)\n\n"
            + "\n".join(lines))
