"""HumanEval+ as a task of a Score | TPF sweep: its items decode as EvalPlus prompts and are checked in the sandbox.

    items = humaneval_items(10)                   # the first 10 problems, as sweep items (task "humaneval+")
    item, ids, cfg = items[0].prepare(pipe, cfg)  # EvalPlus's prompt for this model, the room it leaves
    item.check(completion_text)                   # True when the solution passes HumanEval+ (base and plus)

An item is right when the program cut out of its completion (`humaneval_prompt.solution_of`) passes the
base and the plus inputs (`humaneval_score.Evaluator`), so a sweep's accuracy on this task is HumanEval+
pass@1 (greedy). Its decodes write up to `GEN_LENGTH` tokens whatever the sweep's generation length for the
short tasks (cut to what the model's positions leave), and stop at the first finished block with EOS.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache

from .humaneval import fit_gen_length
from .humaneval_data import Problem, load_problems
from .humaneval_prompt import Prompt, build_prompt, solution_of
from .humaneval_score import Evaluator
from ..data.tasks import Item

HUMANEVAL = "humaneval+"
GEN_LENGTH = 512  # tokens a HumanEval decode may write (as `python -m llada.eval humaneval`)


@dataclass(frozen=True)
class HumanEvalItem(Item):
    """A HumanEval+ problem as a sweep item (`answer` is the canonical body, for reading only)."""

    problem: Problem | None = field(default=None, compare=False, repr=False)
    evaluator: Evaluator | None = field(default=None, compare=False, repr=False)
    prompt_kind: Prompt | None = field(default=None, compare=False, repr=False)  # set by `prepare`

    def prepare(self, pipe, cfg) -> tuple["HumanEvalItem", list[int], object]:
        """This item with its prompt for `pipe`, the prompt's ids, and `cfg` with the room it leaves to write."""
        prompt = build_prompt(pipe.tokenizer, self.problem)
        positions = pipe.model.config.max_position_embeddings
        room = fit_gen_length(len(prompt.ids), GEN_LENGTH, cfg.block_length, positions)
        if room < 1:
            raise ValueError(f"{self.problem.task_id}: the prompt ({len(prompt.ids)} tokens) leaves no room to "
                             f"write in the model's {positions} positions")
        return replace(self, prompt_kind=prompt), prompt.ids, replace(cfg, gen_length=room, eos_early_stop=True)

    def check(self, text: str) -> bool:
        """Does the solution in `text` (the completion, EOS removed) pass HumanEval+?"""
        prompt = self.prompt_kind or Prompt([], self.prompt, False, ())
        verdict = self.evaluator.check(self.problem, solution_of(self.problem, prompt, text), plus=True)
        return bool(verdict.base and verdict.plus)


def humaneval_items(n: int) -> list[HumanEvalItem]:
    """The first `n` problems of HumanEval+ (all 164 at most) as sweep items."""
    problems = _problems(min(n, 164))
    evaluator = _evaluator(len(problems))
    return [HumanEvalItem(HUMANEVAL, p.prompt.strip() + "\n", p.canonical_solution, p, evaluator) for p in problems]


@lru_cache(maxsize=4)
def _problems(n: int) -> tuple[Problem, ...]:
    return tuple(load_problems()[:n])


@lru_cache(maxsize=4)
def _evaluator(n: int) -> Evaluator:
    """One evaluator per subset and process: the canonical outputs are read (or computed) once."""
    return Evaluator(list(_problems(n)))
