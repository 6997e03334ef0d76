"""Pure renderers: a hand-made trace in, canvas HTML / figures / tables / exports out (no model, no server)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest

from ui import canvas, charts, export, tables
from llada.trace import Trace
from ui_helpers import EOS, HTML, NL, TEXTS, hand_trace


class _Toks(HTMLParser):
    """Collects the attributes of every .tok element and of the canvas root."""

    def __init__(self):
        super().__init__()
        self.toks, self.root = [], None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "tok" in (a.get("class") or "").split():
            self.toks.append(a)
        if a.get("id", "").startswith("canvas") and self.root is None:
            self.root = a


def parse(html: str) -> _Toks:
    p = _Toks()
    p.feed(html)
    return p


def states(html: str) -> list[str]:
    return [t["data-state"] for t in parse(html).toks]


def test_step_zero_is_prompt_then_masks():
    p = parse(canvas.render(hand_trace(), 0))
    assert p.root["data-step"] == "0" and p.root["data-steps"] == "6"
    assert [t["data-state"] for t in p.toks] == ["prompt"] * 3 + ["mask"] * 5
    assert [int(t["data-pos"]) for t in p.toks] == list(range(8))
    assert [int(t["data-block"]) for t in p.toks] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_masks_beyond_the_active_block_are_counted_not_drawn():
    html = canvas.render(hand_trace(), 1)
    far = [t for t in parse(html).toks if "far" in t["class"].split()]
    assert [int(t["data-pos"]) for t in far] == [4, 5, 6, 7]
    assert "+ 4 masks in 1 later block" in html


def test_draft_edit_mbe_and_stable_states():
    trace = hand_trace()
    assert states(canvas.render(trace, 1))[3] == "draft"
    edit = parse(canvas.render(trace, 2)).toks[3]
    assert edit["data-state"] == "edit" and edit["data-p"] == "0.8000"
    assert edit["data-prev"] == TEXTS[HTML]  # attribute value, unescaped by the parser
    s3 = states(canvas.render(trace, 3))
    assert s3[3:6] == ["stable", "draft", "draft"] and s3[6:] == ["mask", "mask"]
    mbe = parse(canvas.render(trace, 4)).toks[3]
    assert mbe["data-state"] == "mbe" and mbe["data-prev"] == TEXTS[NL] and mbe["data-p"] == "0.9500"
    assert states(canvas.render(trace, 6))[3:] == ["stable"] * 5


def test_edit_shows_old_struck_through_then_new():
    html = canvas.render(hand_trace(), 2)
    tok = re.search(r'<span class="tok[^"]*" data-pos="3".*?</span></span>', html, re.S).group(0)
    assert '<span class="old">' in tok and '<span class="arrow">→</span>' in tok and '<span class="new">' in tok


def test_token_text_is_escaped():
    for step in range(7):
        html = canvas.render(hand_trace(), step, ghost=True)
        assert "<img" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in canvas.render(hand_trace(), 1)


def test_newlines_and_indentation_are_kept():
    assert '<span class="txt">\n    </span>' in canvas.render(hand_trace(), 3)


def test_tooltip_names_p_threshold_and_replaced_token():
    toks = parse(canvas.render(hand_trace(), 4)).toks
    assert "p=0.30 ≤ τ_mask 0.50: the most confident mask" in toks[6]["title"]
    assert "MBE edit of block 0" in toks[3]["title"] and "> τ_edit 0.00" in toks[3]["title"]


def test_ghost_shows_the_guess_inside_active_masks():
    html = canvas.render(hand_trace(), 3, ghost=True)
    assert html.count('class="ghost"') == 2  # the two masks of the active block
    assert 'class="ghost"' not in canvas.render(hand_trace(), 3, ghost=False)


def test_output_after_eos_is_dimmed():
    toks = parse(canvas.render(hand_trace(), 6)).toks
    assert ["cut" in t["class"].split() for t in toks[3:]] == [False, True, True, True, True]


def test_header_shows_the_thresholds_in_force():
    html = canvas.render(hand_trace(), 2)
    assert "τ_mask 0.50" in html and "τ_edit 0.00" in html and "MBE on (window 1)" in html


def test_empty_canvas_has_hooks():
    p = parse(canvas.render(None, 0))
    assert p.root["data-steps"] == "0" and p.toks == []


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
    assert "<style>" in html and 'id="step"' in html and html.count('data-steps=\\"6\\"') == 7


def test_tail_past_the_output_is_counted_not_drawn():
    from ui.canvas import cells, render

    trace = _eos_trace()
    html = render(trace, trace.steps)
    tail = [c for c in cells(trace, trace.steps) if c.tail]
    assert [c.pos for c in tail] == [8, 9, 10, 11] and all(c.cut for c in tail)  # active block 1 stays drawn
    assert f"+ {len(tail)} positions past the end of the output" in html
    assert html.count('class="tok') == trace.length  # every position keeps its element


def _eos_trace() -> Trace:
    """A 3-block run whose first generated token is EOS; block 2 was never decoded (tail)."""
    from llada.config import DecodeConfig
    from llada.trace import Change, StepRecord

    def draft(pos, p=0.9):
        return Change(pos, 0, 1, p)

    records = [StepRecord("decode", "draft", 1, 0, 1, (0, 4), (0, 4), drafts=[draft(2), draft(3)],
                          guesses=[5, 6, 0, 0], confidence=[0.1, 0.1, 0.9, 0.9], seconds=0.01),
               StepRecord("decode", "draft", 2, 1, 1, (4, 8), (4, 8), drafts=[draft(q) for q in range(4, 8)],
                          guesses=[0, 0, 0, 0], confidence=[0.9] * 4, seconds=0.01)]
    return Trace(prompt_ids=[5, 6], settings=DecodeConfig(block_length=4, gen_length=10), mask_id=1, eos_id=0,
                 model="m", prompt="ab", mode="S", texts={0: "<|endoftext|>", 1: "[MASK]", 5: "a", 6: "b"},
                 records=records)
