"""The Score | TPF chart and table of a sweep (pure: points in, a figure or a table out).

The chart is the LLaDA2.1 paper's Tables 1 and 4 drawn as a plane: every cell of the sweep is a point at
(TPF, accuracy), MBE off and MBE on are two series (colour and marker shape), each series' Pareto front
is a dashed (MBE off) or dotted (MBE on) line through the cells nothing beats on both axes, and the model's
presets are stars named S, Q, M2T. Every point carries its settings as `customdata` (`settings_of`), which
is what a click loads into the playground; the table holds the same points, one row each, settings first.
"""

from __future__ import annotations

import math

from typing import NamedTuple

import pandas as pd
import plotly.graph_objects as go

from llada.eval.sweep import Point, pareto_front
from llada.presets import tau_text

class Style(NamedTuple):
    name: str
    colour: str
    marker: dict  # MBE on is drawn hollow and larger: where both series coincide, both stay visible
    dash: str


SERIES = {False: Style("MBE off", "#2563eb", {"symbol": "circle", "size": 9, "line": {"color": "white", "width": 1}},
                       "dash"),
          True: Style("MBE on", "#d97706", {"symbol": "diamond-open", "size": 13, "line": {"width": 2}}, "dot")}
PRESET_SYMBOL = "star"
INK, GRID = "#8b93a1", "rgba(139, 147, 161, 0.3)"  # readable on white and on near-black
AXIS = {"gridcolor": GRID, "zerolinecolor": GRID, "linecolor": GRID, "automargin": True}
# transparent, so the chart sits on the page's own background (light or dark); assets/style.css gives its text
# the theme's ink; template "none" is cheap
# a top margin for the two-line title and, under it, the names of presets drawn at 100%
LAYOUT = {"margin": {"l": 56, "r": 16, "t": 76, "b": 48}, "height": 440, "template": "none",
          "paper_bgcolor": "rgba(0,0,0,0)", "plot_bgcolor": "rgba(0,0,0,0)",
          "font": {"family": "system-ui, sans-serif", "size": 12, "color": INK},
          # a legend at the foot of the figure (not of the plot area) pushes the margin: it never meets the axis title
          "legend": {"orientation": "h", "yref": "container", "yanchor": "bottom", "y": 0, "x": 0},
          "hovermode": "closest", "clickmode": "event"}
COLUMNS = ["series", "preset", "τ_mask", "τ_edit", "block", "accuracy %", "TPF", "TPS then", "edits/100", "front",
           "95% interval", "items"]
Z95 = 1.959964  # the normal quantile of a two-sided 95% interval


def wilson(accuracy: float, n: int) -> tuple[float, float]:
    """The Wilson score interval (95%) of an accuracy measured on `n` items, as (low, high) in [0, 1]: with
    few items it is wide, so two points whose intervals overlap are not told apart by this sweep."""
    if n <= 0:
        return 0.0, 1.0
    z2 = Z95 * Z95
    centre = (accuracy + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(accuracy * (1 - accuracy) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


class Settings(NamedTuple):
    """What a point loads into the playground."""

    tau_mask: float
    tau_edit: float | None  # None: editing off
    mbe: bool
    block_length: int


def settings_of(point: Point) -> list:
    """A point's settings as JSON-able `customdata`: [τ_mask, τ_edit ("off" or a number), MBE, block]."""
    c = point.cell
    return [c.tau_mask, tau_text(c.tau_edit), c.mbe, c.block_length]


def parse_settings(values) -> Settings:
    """Settings from a point's customdata or a table row (series first); ValueError when they are not."""
    values = list(values)
    try:
        if values and values[0] in ("MBE off", "MBE on"):  # a table row: series, preset, τ_mask, τ_edit, block
            values = [values[2], values[3], values[0] == "MBE on", values[4]]
        tau_mask, tau_edit, mbe, block = values[:4]
        edit = None if str(tau_edit).strip().lower() == "off" else float(tau_edit)
        mbe = mbe if isinstance(mbe, bool) else str(mbe).lower() in ("true", "on", "1")
        return Settings(float(tau_mask), edit, mbe, int(float(block)))
    except (TypeError, ValueError, IndexError) as err:
        raise ValueError(f"not a sweep point's settings: {values!r} ({err})") from None


def _hover(point: Point) -> str:
    c = point.cell
    name = f"<b>{c.preset} preset</b><br>" if c.preset else ""
    return (f"{name}τ_mask {c.tau_mask:g} · τ_edit {tau_text(c.tau_edit)} · block {c.block_length}<br>"
            f"accuracy {100 * point.accuracy:.1f}% of {point.items} items (95%: {_interval(point)}) · "
            f"TPF {point.tpf:.2f}<br>edits/100 {point.edits_per_100:.1f}"
            f"{f' · cut {point.cut}' if point.cut else ''}<br><i>click: load into the playground</i>")


def _interval(p: Point) -> str:
    low, high = wilson(p.accuracy, p.items)
    return f"{100 * low:.0f}–{100 * high:.0f}%"


def _markers(points: list[Point], style: Style) -> dict:
    bounds = [wilson(p.accuracy, p.items) for p in points]
    return {"type": "scatter", "mode": "markers", "name": style.name, "legendgroup": style.name,
            "x": [p.tpf for p in points], "y": [100 * p.accuracy for p in points], "cliponaxis": False,
            "customdata": [settings_of(p) for p in points], "text": [_hover(p) for p in points],
            "hovertemplate": "%{text}<extra>%{fullData.name}</extra>",
            "error_y": {"type": "data", "symmetric": False, "thickness": 1, "width": 3, "color": style.colour,
                        "array": [100 * (hi - p.accuracy) for p, (_, hi) in zip(points, bounds)],
                        "arrayminus": [100 * (p.accuracy - lo) for p, (lo, _) in zip(points, bounds)]},
            "marker": style.marker | {"color": style.colour}}


def _front(points: list[Point], style: Style) -> dict:
    front = pareto_front(points)
    return {"type": "scatter", "mode": "lines", "name": f"{style.name}: Pareto front", "legendgroup": style.name,
            "x": [p.tpf for p in front], "y": [100 * p.accuracy for p in front], "hoverinfo": "skip",
            "cliponaxis": False, "line": {"color": style.colour, "dash": style.dash, "width": 1.5, "shape": "vh"}}


def preset_labels(marked: list[Point]) -> list[str]:
    """One label per place: presets drawn on the same spot share it ("Q / Q + MBE"), the others stay blank."""
    names: dict[tuple, list[str]] = {}
    for p in marked:
        names.setdefault((p.tpf, p.accuracy), []).append(p.cell.preset + (" + MBE" if p.cell.mbe else ""))
    labels, seen = [], set()
    for p in marked:
        spot = (p.tpf, p.accuracy)
        labels.append("" if spot in seen else " / ".join(names[spot]))
        seen.add(spot)
    return labels


def _presets(points: list[Point]) -> dict:
    marked = [p for p in points if p.cell.preset]
    return {"type": "scatter", "mode": "markers+text", "name": "presets (S, Q, M2T)",
            "x": [p.tpf for p in marked], "y": [100 * p.accuracy for p in marked], "cliponaxis": False,
            "text": preset_labels(marked), "textposition": "top center", "textfont": {"size": 12, "color": INK},
            "customdata": [settings_of(p) for p in marked], "hovertext": [_hover(p) for p in marked],
            "hovertemplate": "%{hovertext}<extra>preset</extra>",
            "marker": {"symbol": PRESET_SYMBOL, "size": 16, "color": [SERIES[p.cell.mbe].colour for p in marked],
                       "line": {"color": "#111827", "width": 1.5}}}


def accuracy_range(points: list[Point]) -> list[float]:
    """The y range (%): the points with a margin, inside [0, 100], at least 10 points tall."""
    ys = [100 * p.accuracy for p in points] or [0.0, 100.0]
    lo, hi = max(min(ys) - 5, 0.0), min(max(ys) + 5, 100.0)
    if hi - lo < 10:
        lo, hi = (lo, lo + 10) if lo < 50 else (hi - 10, hi)
    return [lo, hi]


def figure(points: list[Point], title: str = "Accuracy vs TPF", subtitle: str = "") -> go.Figure:
    """The chart of `points`: two series with their Pareto fronts, presets starred (a note when there are none)."""
    traces = []
    for mbe, style in SERIES.items():
        series = [p for p in points if p.cell.mbe == mbe]
        if series:
            traces += [_front(series, style), _markers([p for p in series if not p.cell.preset], style)]
    if any(p.cell.preset for p in points):
        traces.append(_presets(points))
    text = f"{title}<br><sup>{subtitle}</sup>" if subtitle else title
    layout = LAYOUT | {"title": {"text": text, "font": {"size": 15}, "x": 0.02, "xanchor": "left"},
                       "xaxis": AXIS | {"title": {"text": "TPF: tokens per forward (faster →)"}},
                       "yaxis": AXIS | {"title": {"text": "accuracy (%)"}, "range": accuracy_range(points)}}
    if not points:
        layout["annotations"] = [{"text": "No points yet:<br>choose a grid and press Run sweep.", "showarrow": False,
                                  "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5, "font": {"size": 14}}]
    return go.Figure({"data": traces, "layout": layout}, skip_invalid=True)


def table(points: list[Point]) -> pd.DataFrame:
    """One row per point, the settings first (a row's click loads them), best accuracy first per series."""
    fronts = {p.cell.key for mbe in (False, True) for p in pareto_front([q for q in points if q.cell.mbe == mbe])}
    ordered = sorted(points, key=lambda p: (p.cell.mbe, -p.accuracy, -p.tpf))
    rows = [[SERIES[p.cell.mbe].name, p.cell.preset, f"{p.cell.tau_mask:g}", tau_text(p.cell.tau_edit),
             p.cell.block_length, round(100 * p.accuracy, 1), round(p.tpf, 2), round(p.tps, 1),
             round(p.edits_per_100, 1), "★" if p.cell.key in fronts else "", _interval(p), p.items] for p in ordered]
    return pd.DataFrame(rows, columns=COLUMNS)
