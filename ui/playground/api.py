"""The API endpoints (`gradio_client`): /generate streams, /compare, /trace (see docs UI_CONTRACT).

Inputs arrive as the client sent them (the events skip the components' conversions), so a string where a
boolean belongs, a number as a prompt or an infinite length is refused with a message naming the field,
never coerced. A refusal or a failure is a `gr.Error` with that message.
"""

from __future__ import annotations

import gradio as gr

from llada.trace import Trace

from ..frame import Throttle, problem
from ..runs import LiveRun, interleave, start
from ..settings import Request, check_pokes, check_prompt, check_settings, presets_of
from .compare import compare_runs
from .run import CHART_FPS, partial_text


def generate_api(models, prompt, mode, tau_mask, tau_edit, mbe, block_length, gen_length, model=None, pokes=None):
    """Streams (text so far, stats); the last update is the final text and the run's stats.

    A named mode sets the thresholds; tau_mask / tau_edit given explicitly (not null) override it.
    model: an offered model's name (empty or null: the default model). pokes: null or a list of
    `STEP:POS:TOKEN` texts or {step, pos, token} objects, as the CLI's `--poke` takes them
    (`ui.settings.check_pokes`); with any, the stats list them as `pokes` ({step, pos, old, new}, as applied)."""
    try:
        prompt = check_prompt(prompt)
        path = models.path_of(model)
        settings = check_settings(presets_of(path or models.default), mode, tau_mask=tau_mask, tau_edit=tau_edit,
                                  mbe=mbe, block_length=block_length, gen_length=gen_length)
        pipe = models.get(path)
        req = Request(prompt, settings, check_pokes(pokes, pipe.poke_token))
        run = start(pipe, req)
    except Exception as err:  # noqa: BLE001 - refused or failed: a Gradio error (ui.frame.problem)
        raise problem(err).error() from None
    due = Throttle(1 / CHART_FPS)
    try:
        yield "", _stats(run, req), run.trace
        for record in run.records:
            if record.kind == "decode" and due.due():
                yield partial_text(run), _stats(run, req), run.trace
        run.close("done")
    except Exception as err:  # noqa: BLE001 - refused or failed: a Gradio error (ui.frame.problem)
        raise problem(err).error() from None
    finally:
        run.close()
    yield run.trace.text, _stats(run, req), run.trace


def _stats(run: LiveRun, req: Request) -> dict:
    """`api_stats` of a /generate run, with its pokes (as applied so far) when the request carries any."""
    poked = {"pokes": run.trace.poke_list()} if req.pokes else {}
    return api_stats(run.trace, run.pipe) | poked


def api_stats(trace: Trace, pipe=None) -> dict:
    """The stats dict of the API: forwards, tokens, tpf, tps, drafts, edits, mbe_edits, inserts, deletes (and their
    parts), and the engine that ran (`llada.fast.engine.EngineReport.to_dict`: engine, requested, reason,
    fell_back, self_check)."""
    keys = ("forwards", "decode_forwards", "cache_forwards", "tokens", "tpf", "tps", "seconds", "drafts", "edits",
            "mbe_edits", "inserts", "deletes")
    values = trace.stats()
    report = getattr(pipe, "engine", None)
    engine = {"engine": report.to_dict()} if report is not None else {}
    return {k: values[k] for k in keys} | {"status": trace.status, "note": trace.note} | engine


def compare_api(models, prompt, block_length, gen_length, model=None) -> dict:
    """Final stats and text of S and Q on one prompt (block_length null: each mode's own; model: an offered
    model's name, empty or null: the default)."""
    try:
        runs = compare_runs(models, models.path_of(model), prompt, block_length, gen_length)
        for _ in interleave(runs):
            pass  # interleave closes each run as it ends
    except Exception as err:  # noqa: BLE001 - refused or failed: a Gradio error (ui.frame.problem)
        raise problem(err).error() from None
    return {mode: api_stats(run.trace, run.pipe) | {"text": run.trace.text} for mode, run in runs.items()}


def trace_api(trace: Trace | None) -> dict:
    """The full trace of this session's last run (see docs/trace-schema.md)."""
    if trace is None:
        raise gr.Error("no run yet in this session: call /generate first", print_exception=False)
    return trace.to_dict()
