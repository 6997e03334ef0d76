"""Plotly figures of one or more runs: running TPS, running TPF, changes per step, and p per position.

* `tps_figure` / `tpf_figure` — *running* values (output tokens so far / engine seconds so far, and
  / forwards so far), one line per run, labelled as running values;
* `steps_figure` — per-step counts of drafts, edits and MBE edits in the canvas's colours (stacked
  bars for one run; lines, one dash per run, when runs are overlaid), whole-number steps;
* `confidence_figure` — the teaching heatmap: the model's confidence p at every position of the window
  each step scored, with the drafts and edits of that step marked where p crossed the threshold.

Each function takes `runs`, a list of (label, Trace) (the heatmap takes one Trace). Figures are built
from plain dicts with transparent backgrounds and a neutral ink, so they read in light and dark themes.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from llada.presets import tau_text
from llada.trace import Trace

KIND_COLOURS = {"drafts": "#22c55e", "edits": "#f59e0b", "mbe_edits": "#a855f7",  # as in assets/style.css
                "inserts": "#db2777", "deletes": "#ef4444"}  # LLaDA2.2's moves
KIND_NAMES = {"drafts": "drafts (M2T)", "edits": "edits (T2T)", "mbe_edits": "MBE edits",
              "inserts": "inserts (SPLIT)", "deletes": "deletes (DELETE)"}
RARE = ("mbe_edits", "inserts", "deletes")  # drawn only when a run made some (MBE off, a 2.1 model)
RUN_COLOURS = ("#3b82f6", "#ef4444", "#14b8a6", "#eab308")  # one per overlaid run
RUN_DASH = ("solid", "dot", "dash", "dashdot")
INK, GRID = "#8b93a1", "rgba(139, 147, 161, 0.25)"  # readable on white and on near-black
MAX_HEATMAP_CELLS = 60_000  # beyond this the heatmap shows every k-th step
AXIS = {"gridcolor": GRID, "zerolinecolor": GRID, "linecolor": GRID, "color": INK}
# template "none" plus explicit styling: a named template costs ~10 ms per figure to validate
LAYOUT = {"margin": {"l": 52, "r": 12, "t": 64, "b": 44}, "height": 280, "template": "none",
          "paper_bgcolor": "rgba(0,0,0,0)", "plot_bgcolor": "rgba(0,0,0,0)",
          "font": {"family": "system-ui, sans-serif", "size": 11, "color": INK},
          "legend": {"orientation": "h", "x": 1, "xanchor": "right", "y": 1.0, "yanchor": "bottom",
                     "font": {"size": 10}},
          "hovermode": "x unified"}


def integer_axis(top: int) -> dict:
    """Ticks on whole numbers only (steps and forwards), about ten of them."""
    return {"tickmode": "linear", "tick0": 0, "dtick": max(1, math.ceil(top / 10)), "tickformat": "d"}


def _figure(traces: list[dict], title: str, xtitle: str, ytitle: str, integer_x: int = 0, subtitle: str = "",
            **layout) -> go.Figure:
    """A figure; `integer_x` > 0 puts whole-number ticks on an x axis that runs to that value; a `subtitle` is
    a second, smaller line under the title (one long line would be cut on a phone)."""
    xaxis = AXIS | {"title": {"text": xtitle}} | (integer_axis(integer_x) if integer_x else {})
    head = {"text": title, "font": {"size": 13}, "x": 0.01, "xanchor": "left", "y": 0.97}
    if subtitle:  # two lines: placed by Plotly inside the top margin (a fixed y would push the first one out)
        head = {"text": f"{title}<br><sup>{subtitle}</sup>", "font": {"size": 13}, "x": 0.01, "xanchor": "left"}
    spec = LAYOUT | {"title": head,
                     "xaxis": xaxis, "yaxis": AXIS | {"title": {"text": ytitle}, "rangemode": "tozero"}} | layout
    return go.Figure({"data": traces, "layout": spec}, skip_invalid=True)


def tps_points(trace: Trace) -> tuple[list[float], list[float]]:
    """(engine seconds, output tokens so far / engine seconds) after every forward."""
    pairs = [(t, n / t) for t, n in zip(trace.elapsed, trace.output_lengths) if t > 0]
    return [t for t, _ in pairs], [y for _, y in pairs]


def tpf_points(trace: Trace) -> tuple[list[int], list[float]]:
    """(forwards so far, output tokens so far / forwards) after every forward."""
    xs = list(range(1, len(trace.records) + 1))
    return xs, [n / f for f, n in zip(xs, trace.output_lengths)]


def step_counts(trace: Trace) -> dict[str, list[int]]:
    """Per decode step: how many drafts, T2T edits, MBE edits, inserts and deletes it made."""
    decodes = [trace.step_record(k) for k in range(1, trace.steps + 1)]
    return {"step": list(range(1, trace.steps + 1))} | {kind: [len(getattr(r, kind)) for r in decodes]
                                                          for kind in KIND_COLOURS}


def _line_figure(runs: list[tuple[str, Trace]], points, title: str, x_title: str, y_title: str,
                 integer_x: bool = False) -> go.Figure:
    traces = []
    for i, (label, trace) in enumerate(runs):
        xs, ys = points(trace)
        traces.append({"type": "scatter", "mode": "lines", "name": label, "x": xs, "y": ys,
                       "line": {"color": RUN_COLOURS[i % len(RUN_COLOURS)], "dash": RUN_DASH[i % len(RUN_DASH)]}})
    top = max((len(t.records) for _, t in runs), default=0) if integer_x else 0
    return _figure(traces, title, x_title, y_title, top, showlegend=len(runs) > 1)


def tps_figure(runs: list[tuple[str, Trace]]) -> go.Figure:
    return _line_figure(runs, tps_points, "Running TPS: tokens so far / seconds so far", "engine seconds",
                        "tokens per second (running)")


def tpf_figure(runs: list[tuple[str, Trace]]) -> go.Figure:
    return _line_figure(runs, tpf_points, "Running TPF: tokens so far / forwards so far", "forwards (decode + cache)",
                        "tokens per forward (running)", integer_x=True)


def steps_figure(runs: list[tuple[str, Trace]]) -> go.Figure:
    """Per-step changes: stacked bars for one run, one line per (run, kind) when runs are overlaid."""
    traces, drawn = [], set()
    for i, (label, trace) in enumerate(runs):
        counts = step_counts(trace)
        for kind, colour in KIND_COLOURS.items():
            if kind in RARE and not any(counts[kind]):
                continue
            drawn.add(kind)
            name = KIND_NAMES[kind] if len(runs) == 1 else f"{label} {KIND_NAMES[kind]}"
            if len(runs) == 1:
                traces.append({"type": "bar", "name": name, "x": counts["step"], "y": counts[kind],
                               "marker": {"color": colour}})
            else:
                traces.append({"type": "scatter", "mode": "lines+markers", "name": name, "x": counts["step"],
                               "y": counts[kind], "marker": {"size": 4, "color": colour},
                               "line": {"color": colour, "dash": RUN_DASH[i % len(RUN_DASH)], "shape": "hv"}})
    top = max((t.steps for _, t in runs), default=1)
    moved = drawn & {"inserts", "deletes"}  # a LLaDA2.2 run's moves: the title names them too
    title = "Per step: tokens drafted, edited, inserted and deleted" if moved else "Per step: tokens drafted and edited"
    return _figure(traces, title, "decode step", "tokens (this step)",
                   integer_x=max(top, 1), barmode="stack", bargap=0.15)


def all_figures(runs: list[tuple[str, Trace]]) -> tuple[go.Figure, go.Figure, go.Figure]:
    return tps_figure(runs), tpf_figure(runs), steps_figure(runs)


def confidence_grid(trace: Trace) -> dict:
    """The heatmap's data: steps (rows), positions (columns) and p (None outside the scored window)."""
    if trace.steps == 0:
        return {"steps": [], "positions": [], "p": [], "stride": 1}
    lo = min(trace.step_record(k).window[0] for k in range(1, trace.steps + 1))
    hi = max(trace.step_record(k).window[1] for k in range(1, trace.steps + 1))
    stride = max(1, math.ceil(trace.steps * (hi - lo) / MAX_HEATMAP_CELLS))
    steps = list(range(1, trace.steps + 1, stride))
    rows = []
    for k in steps:
        r = trace.step_record(k)
        row = [None] * (hi - lo)
        row[r.window[0] - lo:r.window[1] - lo] = [round(p, 3) for p in r.confidence]
        rows.append(row)
    return {"steps": steps, "positions": list(range(lo, hi)), "p": rows, "stride": stride}


def confidence_figure(trace: Trace) -> go.Figure:
    """p per position and step; the changes each step made are marked where p crossed its threshold."""
    grid = confidence_grid(trace)
    data = [{"type": "heatmap", "x": grid["positions"], "y": grid["steps"], "z": grid["p"], "zmin": 0, "zmax": 1,
             "colorscale": "Viridis", "colorbar": {"title": {"text": "p"}, "thickness": 10},
             "hovertemplate": "step %{y} · position %{x} · p=%{z:.2f}<extra></extra>"}]
    shown = set(grid["steps"])
    for kind, colour in KIND_COLOURS.items():
        marks = [(c.pos, k) for k in range(1, trace.steps + 1) if k in shown
                 for c in getattr(trace.step_record(k), kind)]
        if marks:
            data.append({"type": "scatter", "mode": "markers", "name": KIND_NAMES[kind],
                         "x": [m[0] for m in marks], "y": [m[1] for m in marks],
                         "marker": {"symbol": "circle-open" if kind == "drafts" else "x-thin-open", "size": 7,
                                    "color": colour, "line": {"width": 2, "color": colour}},
                         "hovertemplate": f"{KIND_NAMES[kind]} · step %{{y}} · position %{{x}}<extra></extra>"})
    s = trace.settings
    tau_edit = tau_text(s.editing_threshold, ".2f")
    every = f" (every {grid['stride']}th step)" if grid["stride"] > 1 else ""
    title = f"Confidence p per position and step{every}"
    marks = f"marks: where p passed τ_mask {s.threshold:.2f} / τ_edit {tau_edit}"
    height = min(420, 230 + 18 * len(grid["steps"]))  # the plot area, plus the title and the legend at the foot
    foot = {"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom", "x": 0, "xanchor": "left",
            "font": {"size": 10}}  # at the figure's foot: on a phone its two rows stay off the subtitle
    return _figure(data, title, "position", "decode step", subtitle=marks, height=height, hovermode="closest",
                   legend=foot, margin=LAYOUT["margin"] | {"t": 56, "b": 88},
                   yaxis=AXIS | integer_axis(max(trace.steps, 1)) | {"title": {"text": "decode step"},
                                                                      "autorange": "reversed", "tick0": 1})
