"""Pure renderers: a hand-made trace in, figures / tables / exports out (no model, no server)."""

from __future__ import annotations

import json
import re

import pytest

from ui import canvas, charts, export, tables
from llada.trace import Trace
from ui_helpers import EOS, HTML, NL, TEXTS, hand_trace


def test_stats_and_edit_log():
    trace = hand_trace()
    s = trace.stats()
    assert (s["steps"], s["drafts"], s["edits"], s["mbe_edits"], s["forwards"]) == (6, 5, 1, 1, 6)
    assert s["tokens"] == 1 and s["tpf"] == 1 / 6  # output is cut after the EOS at position 3
    log = tables.edit_log(trace)
    assert log["kind"].tolist() == ["T2T", "MBE"] and log["position"].tolist() == [3, 3]
    assert log["old"].tolist() == [TEXTS[HTML], TEXTS[NL]] and log["new"].tolist() == [TEXTS[NL], TEXTS[EOS]]
    assert len(trace.edit_events()) == 2
    assert "forwards 6" in tables.stats_line(trace) and "MBE edits 1" in tables.stats_line(trace)


def test_stats_table_and_diff():
    trace = hand_trace()
    table = tables.stats_table([("S", trace), ("Q", trace)])
    assert table.columns.tolist() == tables.STATS_COLUMNS and table["run"].tolist() == ["S", "Q"]
    diff = tables.diff_html("a <b> c", "a <i> c")
    assert "&lt;<del>b</del><ins>i</ins>&gt;" in diff  # word-level, escaped
    assert "identical outputs" in tables.diff_html("same", "same")


def test_charts_overlay_runs():
    trace = hand_trace()
    tps, tpf, steps = charts.all_figures([("S", trace), ("Q", trace)])
    assert [t.name for t in tps.data] == ["S", "Q"] and [t.name for t in tpf.data] == ["S", "Q"]
    # output tokens after each forward (1, 1, 3, then 1 once EOS lands at the first position) / forwards
    assert list(tpf.data[0].y) == pytest.approx([1 / 1, 1 / 2, 3 / 3, 1 / 4, 1 / 5, 1 / 6])
    assert list(tps.data[0].x) == pytest.approx([0.01, 0.02, 0.03, 0.04, 0.05, 0.06])  # engine seconds so far
    assert {t.name for t in steps.data} == {"S drafts", "S edits (T2T)", "S MBE edits", "Q drafts", "Q edits (T2T)",
                                            "Q MBE edits"}
    assert list(steps.data[0].y) == [1, 0, 2, 1, 1, 0]


def test_trace_json_round_trip():
    trace = hand_trace()
    back = Trace.from_dict(json.loads(json.dumps(trace.to_dict())))
    assert back.texts == trace.texts and back.records == trace.records and back.steps == 6
    assert all(canvas.render(back, k) == canvas.render(trace, k) for k in range(7))


def test_replay_html_is_self_contained():
    trace = hand_trace()
    trace.texts[HTML] = "</script><script>alert(1)</script>"
    html = export.replay_html(trace)
    assert html.count("</script>") == 2  # the frames' JSON and the player; token text cannot close them
    assert not re.search(r'(src|href)=["\']?(https?:)?//', html)
    assert "<style>" in html and 'id="step"' in html and "window.lladaCanvas" in html
    data = json.loads(re.search(r'<script type="application/json" id="frames">(.*?)</script>', html, re.S)
                      .group(1).replace("<\\/", "</"))
    assert data["first"] == canvas.render(trace, 0, legend=False) and data["steps"] == 6
    assert [p["step"] for p in data["patches"]] == [1, 2, 3, 4, 5, 6]  # one patch per step, not a canvas per step
