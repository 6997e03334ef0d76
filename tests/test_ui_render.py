"""Pure renderers: a hand-made trace in, figures / tables / exports out (no model, no server)."""

from __future__ import annotations

import json
import re

import pytest

from ui import export
from ui.render.narrate import visible
from ui.render import canvas, charts, tables
from llada.trace import Trace
from ui_helpers import EOS, HTML, NL, TEXTS, hand_trace


def test_stats_and_edit_log():
    trace = hand_trace()
    s = trace.stats()
    assert (s["steps"], s["drafts"], s["edits"], s["mbe_edits"], s["forwards"]) == (6, 5, 1, 1, 6)
    assert s["tokens"] == 1 and s["tpf"] == 1 / 6  # output is cut after the EOS at position 3
    log = tables.edit_log(trace)
    assert log["kind"].tolist() == ["T2T", "MBE"] and log["position"].tolist() == [3, 3]
    shown = visible(TEXTS[NL])  # a line break and spaces, drawn so the cell is not blank
    assert shown.strip() and log["old"].tolist() == [visible(TEXTS[HTML]), shown]
    assert log["new"].tolist() == [shown, TEXTS[EOS]]
    assert len(trace.edit_events()) == 2
    assert "forwards 6" in tables.stats_line(trace) and "MBE edits 1" in tables.stats_line(trace)
    line = "engine: reference (the fast engine failed its self-check (M = 1: <x> & y); running the PyTorch reference)"
    shown = tables.stats_line(trace, engine=line)
    assert shown.startswith(tables.stats_line(trace) + "  \n") and "(M = 1: &lt;x&gt; &amp; y)" in shown
    assert tables.stats_line(None, engine=line) == tables.NO_RUN  # before a run: the hint, no engine line


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
    assert {t.name for t in steps.data} == {f"{run} {kind}" for run in "SQ"
                                            for kind in ("drafts (M2T)", "edits (T2T)", "MBE edits")}
    assert list(steps.data[0].y) == [1, 0, 2, 1, 1, 0]
    assert [t.line.color for t in steps.data[:3]] == ["#22c55e", "#f59e0b", "#a855f7"]  # the canvas's colours
    assert "Running TPF" in tpf.layout.title.text and tpf.layout.xaxis.dtick == 1  # whole-number forwards


def test_one_run_gets_stacked_bars_in_the_canvas_colours():
    steps = charts.steps_figure([("S", hand_trace())])
    assert [t.type for t in steps.data] == ["bar"] * 3 and steps.layout.barmode == "stack"
    assert [list(t.y) for t in steps.data] == [[1, 0, 2, 1, 1, 0], [0, 1, 0, 0, 0, 0], [0, 0, 0, 1, 0, 0]]


def test_confidence_heatmap_marks_where_p_crossed_the_threshold():
    trace = hand_trace()
    grid = charts.confidence_grid(trace)
    assert grid["steps"] == [1, 2, 3, 4, 5, 6] and grid["positions"] == list(range(8))
    assert grid["p"][0] == [0.25] * 4 + [None] * 4 and grid["p"][2] == [0.25] * 8  # step 3 scored 0..8 (MBE)
    fig = charts.confidence_figure(trace)
    marks = {t.name: list(zip(t.x, t.y)) for t in fig.data[1:]}
    assert marks == {"drafts (M2T)": [(3, 1), (4, 3), (5, 3), (6, 4), (7, 5)], "edits (T2T)": [(3, 2)],
                     "MBE edits": [(3, 4)]}


def test_verdict_and_correctness_of_checkable_prompts():
    from llada.data.check import expected_answer

    assert expected_answer("317+985=") == "1302" and expected_answer("sort 73914=") == "13479"
    assert expected_answer("reverse red fox sun:") == " sun fox red" and expected_answer("hello") is None
    assert expected_answer("def square(kelto):\n") == "    return kelto * kelto\n"
    from llada.trace import StepRecord

    fast = hand_trace()
    slow = Trace(fast.prompt_ids, fast.settings, fast.mask_id, fast.eos_id, texts=fast.texts,  # one more forward
                 records=fast.records + [StepRecord("decode", "verify", 7, 1, 3, (0, 8), (4, 8), seconds=0.01)])
    fast.prompt = slow.prompt = "1+1="
    fast.finish(text="3")
    slow.finish(text="2")
    assert tables.correctness(fast) == "wrong" and tables.correctness(slow) == "right"
    verdict = tables.verdict(("S", fast), ("Q", slow))
    assert verdict == "S: 1.2× fewer forwards than Q (TPF 0.17 vs 0.14), S wrong, Q right"


def test_output_notes_explain_empty_cut_and_stopped_outputs():
    trace = hand_trace().finish()  # its output is a lone EOS
    assert "first token was the end of text" in tables.output_note(trace)
    assert tables.output_note(hand_trace().finish("stopped", "budget reached")).startswith(
        "Stopped at forward 6 (budget reached)")


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


def test_accuracy_gets_a_wilson_interval():
    from ui.render import pareto

    low, high = pareto.wilson(1.0, 10)  # 10 of 10 right: still compatible with 72%
    assert abs(low - 0.7225) < 1e-3 and abs(high - 1.0) < 1e-9
    s, q = pareto.wilson(0.892, 400), pareto.wilson(0.935, 400)  # 400 items: S and Q told apart
    assert s[1] < q[1] and s[0] < q[0] and abs(s[0] - 0.8578) < 1e-3
    assert pareto.wilson(0.5, 0) == (0.0, 1.0)
