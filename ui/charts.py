"""Plotly figures of one or more runs: throughput over time, TPF over forwards, drafts vs edits per step.

Each function takes `runs`, a list of (label, Trace), and overlays them (S and Q in the comparison).
Figures are built from plain dicts (no per-point validation work), so a live update stays cheap.
"""

from __future__ import annotations

import plotly.graph_objects as go

from llada.trace import Trace

RUN_COLOURS = ("#2563eb", "#d97706", "#059669", "#7c3aed")  # one per overlaid run
KIND_DASH = {"drafts": "solid", "edits": "dash", "mbe_edits": "dot"}
AXIS = {"gridcolor": "#e5e7eb", "zerolinecolor": "#cbd5e1", "linecolor": "#cbd5e1"}
# template "none" plus explicit styling: a named template costs ~10 ms per figure to validate
LAYOUT = {"margin": {"l": 48, "r": 12, "t": 36, "b": 40}, "height": 260, "template": "none",
          "paper_bgcolor": "white", "plot_bgcolor": "white", "font": {"family": "system-ui, sans-serif", "size": 11},
          "legend": {"orientation": "h", "y": -0.3}, "hovermode": "x unified"}


def _figure(traces: list[dict], title: str, xtitle: str, ytitle: str) -> go.Figure:
    layout = LAYOUT | {"title": {"text": title, "font": {"size": 14}}, "xaxis": AXIS | {"title": {"text": xtitle}},
                       "yaxis": AXIS | {"title": {"text": ytitle}, "rangemode": "tozero"}}
    return go.Figure({"data": traces, "layout": layout}, skip_invalid=True)


def _colour(i: int) -> str:
    return RUN_COLOURS[i % len(RUN_COLOURS)]


def tps_points(trace: Trace) -> tuple[list[float], list[float]]:
    """(engine seconds, output tokens so far / engine seconds) after every forward."""
    pairs = [(t, n / t) for t, n in zip(trace.elapsed, trace.output_lengths) if t > 0]
    return [t for t, _ in pairs], [y for _, y in pairs]


def tpf_points(trace: Trace) -> tuple[list[int], list[float]]:
    """(forwards so far, output tokens so far / forwards) after every forward."""
    xs = list(range(1, len(trace.records) + 1))
    return xs, [n / f for f, n in zip(xs, trace.output_lengths)]


def step_counts(trace: Trace) -> dict[str, list[int]]:
    """Per decode step: how many drafts, T2T edits and MBE edits it made."""
    decodes = [trace.step_record(k) for k in range(1, trace.steps + 1)]
    return {"step": list(range(1, trace.steps + 1))} | {kind: [len(getattr(r, kind)) for r in decodes]
                                                          for kind in ("drafts", "edits", "mbe_edits")}


def _line_figure(runs: list[tuple[str, Trace]], points, title: str, x_title: str, y_title: str) -> go.Figure:
    """One line per run, from `points(trace) -> (xs, ys)`."""
    traces = []
    for i, (label, trace) in enumerate(runs):
        xs, ys = points(trace)
        traces.append({"type": "scatter", "mode": "lines", "name": label, "x": xs, "y": ys,
                       "line": {"color": _colour(i)}})
    return _figure(traces, title, x_title, y_title)


def tps_figure(runs: list[tuple[str, Trace]]) -> go.Figure:
    return _line_figure(runs, tps_points, "Throughput: tokens/s over wall time", "seconds (engine)", "TPS")


def tpf_figure(runs: list[tuple[str, Trace]]) -> go.Figure:
    return _line_figure(runs, tpf_points, "TPF: tokens per forward", "forwards (decode + cache)", "TPF")


def steps_figure(runs: list[tuple[str, Trace]]) -> go.Figure:
    traces = []
    for i, (label, trace) in enumerate(runs):
        counts = step_counts(trace)
        for kind, name in (("drafts", "drafts"), ("edits", "edits (T2T)"), ("mbe_edits", "MBE edits")):
            if kind == "mbe_edits" and not any(counts["mbe_edits"]):
                continue
            traces.append({"type": "scatter", "mode": "lines+markers", "name": f"{label} {name}",
                           "x": counts["step"], "y": counts[kind], "marker": {"size": 4},
                           "line": {"color": _colour(i), "dash": KIND_DASH[kind], "shape": "hv"}})
    return _figure(traces, "Drafts vs edits per step", "step", "tokens")


def all_figures(runs: list[tuple[str, Trace]]) -> tuple[go.Figure, go.Figure, go.Figure]:
    return tps_figure(runs), tpf_figure(runs), steps_figure(runs)
