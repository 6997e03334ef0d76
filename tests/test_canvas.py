"""The token canvas: states, escaping, what is counted instead of drawn, and patches that equal renders."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from llada.config import DecodeConfig
from llada.trace import Change, StepRecord, Trace
from ui.render import canvas
from ui_helpers import HTML, NL, TEXTS, hand_trace


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


def test_whitespace_is_drawn_as_glyphs_and_newlines_still_break():
    html = canvas.render(hand_trace(), 3)
    assert '<span class="txt"><span class="ws">↵\n</span>' + '<span class="ws">·</span>' * 4 + '</span>' in html


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


def test_what_lies_past_the_output_is_counted_not_drawn():
    trace = _eos_trace()
    html = canvas.render(trace, trace.steps)
    toks = parse(html).toks
    classes = [set(t["class"].split()) for t in toks]
    assert [q for q, c in enumerate(classes) if "far" in c] == [8, 9, 10, 11]  # the undecoded last block
    assert "+ 4 masks in 1 later block" in html
    assert toks[2]["data-run"] == "6" and all("run" in classes[q] for q in range(3, 8))  # EOS x6 in one cell
    assert [t["data-state"] for t in toks[4:8]] == ["draft"] * 4  # folded cells keep their state
    assert all("cut" in classes[q] for q in range(3, 12)) and "cut" not in classes[2]  # the output ends at its EOS
    assert html.count('class="tok') == trace.length  # every position keeps its element


def test_tail_outside_the_active_block_is_counted():
    trace = _eos_trace()
    html = canvas.render(trace, 1)  # block 0 active: block 1 is all masks, nothing past the output yet
    assert "+ 8 masks in 2 later blocks" in html
    records = trace.records + [StepRecord("decode", "draft", 3, 2, 1, (8, 12), (8, 12),
                                          drafts=[Change(q, 7, 1, 0.9) for q in range(8, 12)],
                                          guesses=[7] * 4, confidence=[0.9] * 4, seconds=0.01)]
    later = Trace(trace.prompt_ids, trace.settings, 1, 0, texts=trace.texts | {7: "z"}, records=records)
    toks = parse(canvas.render(later, 3)).toks
    assert [int(t["data-pos"]) for t in toks if "tail" in t["class"].split()] == [5, 6, 7]
    assert "+ 3 positions past the end of the output" in canvas.render(later, 3)


def _eos_trace() -> Trace:
    """A 3-block run whose first generated token is EOS; block 2 was never decoded (tail)."""
    def draft(pos, p=0.9):
        return Change(pos, 0, 1, p)

    records = [StepRecord("decode", "draft", 1, 0, 1, (0, 4), (0, 4), drafts=[draft(2), draft(3)],
                          guesses=[5, 6, 0, 0], confidence=[0.1, 0.1, 0.9, 0.9], seconds=0.01),
               StepRecord("decode", "draft", 2, 1, 1, (4, 8), (4, 8), drafts=[draft(q) for q in range(4, 8)],
                          guesses=[0, 0, 0, 0], confidence=[0.9] * 4, seconds=0.01)]
    return Trace(prompt_ids=[5, 6], settings=DecodeConfig(block_length=4, gen_length=10), mask_id=1, eos_id=0,
                 model="m", prompt="ab", mode="S", texts={0: "<|endoftext|>", 1: "[MASK]", 5: "a", 6: "b"},
                 records=records)


def _written_trace(tokens: list[int], texts: dict, partial: dict | None = None) -> Trace:
    """A one-step trace whose single forward drafted `tokens` after a 1-token prompt (block 8)."""
    record = StepRecord("decode", "draft", 1, 0, 1, (0, 8), (0, 8),
                        drafts=[Change(1 + i, t, 1, 0.9) for i, t in enumerate(tokens)],
                        guesses=[0] * 8, confidence=[0.5] * 8, seconds=0.01)
    return Trace([5], DecodeConfig(block_length=8, gen_length=7), mask_id=1, eos_id=0, mode="S",
                 texts={0: "<|endoftext|>", 1: "[MASK]", 5: "x"} | texts, partial=partial or {}, records=[record])


class _CellText(HTMLParser):
    """The text drawn inside every .tok, by position."""

    def __init__(self):
        super().__init__()
        self.text, self.pos, self.depth = {}, None, 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "tok" in (a.get("class") or "").split():
            self.pos, self.depth = int(a["data-pos"]), 0
            self.text[self.pos] = ""
        elif self.pos is not None:
            self.depth += 1

    def handle_endtag(self, tag):
        if self.pos is not None:
            self.depth -= 1
            if self.depth < 0:
                self.pos = None

    def handle_data(self, data):
        if self.pos is not None:
            self.text[self.pos] += data


def _texts(html: str) -> list[str]:
    p = _CellText()
    p.feed(html)
    return [p.text[q] for q in sorted(p.text)]


def test_a_character_split_across_tokens_is_joined_where_it_starts():
    # "H" + "é" split into two byte tokens + "llo": the pieces alone decode to U+FFFD
    trace = _written_trace([7, 8, 9, 10], {7: "H", 8: "\ufffd", 9: "\ufffd", 10: "llo"},
                           partial={8: "c3", 9: "a9"})
    assert _texts(canvas.render(trace, 1))[1:5] == ["H", "é", "", "llo"]


def test_eos_after_the_output_collapses_into_a_counted_run():
    trace = _written_trace([7, 0, 0, 0, 0, 0, 0], {7: "a"})
    toks = parse(canvas.render(trace, 1)).toks
    assert toks[2]["data-state"] == "draft" and toks[2]["data-run"] == "6"  # six EOS drafted: one cell, x6
    settled = Trace(trace.prompt_ids, trace.settings, 1, 0, texts=trace.texts,
                    records=trace.records + [StepRecord("decode", "verify", 2, 0, 2, (0, 8), (0, 8), seconds=0.01)])
    toks = parse(canvas.render(settled, 2)).toks
    assert toks[2].get("data-run") == "6" and all("run" in t["class"].split() for t in toks[3:])


def test_a_long_prompt_is_folded_to_its_two_ends():
    P = 3 * canvas.PROMPT_ENDS + 10
    trace = Trace([5] * P, DecodeConfig(block_length=8, gen_length=8), mask_id=1, eos_id=0, texts={5: "x"})
    html = canvas.render(trace, 0)
    folded = [int(t["data-pos"]) for t in parse(html).toks if "fold" in t["class"].split()]
    assert folded == list(range(canvas.PROMPT_ENDS, P - canvas.PROMPT_ENDS))
    assert f"{P - 2 * canvas.PROMPT_ENDS} prompt tokens folded" in html


def test_step_labels_say_what_happened():
    trace = hand_trace()
    assert canvas.step_label(canvas.view(trace, 1)).endswith("block 0 · 1 drafted")
    assert "1 edited (T2T)" in canvas.step_label(canvas.view(trace, 2))
    assert "1 drafted, 1 edited in earlier blocks (MBE)" in canvas.step_label(canvas.view(trace, 4))
    assert "no change, the block is done" in canvas.step_label(canvas.view(trace, 6))


def test_the_active_block_is_marked_and_in_the_legend():
    html = canvas.render(hand_trace(), 3)
    assert '<span class="blk act" data-block="1">' in html and "active block" in html


def _cells(trace, step, ghost=False):
    v = canvas.view(trace, step, ghost)
    return [canvas.cell_html(v, pos) for pos in range(trace.length)], [canvas.block_class(v, b) for b in
                                                                       range(trace.length // v.B)]


def assert_patches_rebuild_every_step(trace: Trace, ghost: bool = False, since_every: int = 1):
    """Applying patch(base, k) to the render of `base` gives exactly the render of step k."""
    for base in range(0, trace.steps, since_every):
        cells, blocks = _cells(trace, base, ghost)
        for k in range(base + 1, min(base + since_every, trace.steps) + 1):
            p = canvas.patch(trace, base, k, ghost)
            got_cells, got_blocks = list(cells), list(blocks)
            for pos, html in p["cells"]:
                got_cells[pos] = html
            for b, cls in p["blocks"]:
                got_blocks[b] = cls
            want_cells, want_blocks = _cells(trace, k, ghost)
            assert got_cells == want_cells, (base, k)
            assert got_blocks == want_blocks, (base, k)
            assert p["head"] == canvas.header_html(canvas.view(trace, k, ghost)) and p["step"] == k


@pytest.mark.parametrize("ghost", [False, True])
def test_patches_rebuild_the_hand_trace(ghost):
    assert_patches_rebuild_every_step(hand_trace(), ghost)
    assert_patches_rebuild_every_step(hand_trace(), ghost, since_every=3)  # cumulative since a keyframe


def test_patches_rebuild_a_real_run_with_mbe(tiny_model_dir):
    from llada.pipeline import Pipeline

    pipe = Pipeline.load(tiny_model_dir)
    prompt = "def add(a, b): é"
    trace = pipe.generate(pipe.encode(prompt), pipe.config("S", block_length=4, gen_length=24, mbe=True,
                                                           mbe_window=2))
    trace.name_tokens(pipe.token_texts, pipe.token_bytes)
    assert trace.edits + trace.mbe_edits > 0  # a random model edits often: a strict test of the patches
    assert_patches_rebuild_every_step(trace)
    assert_patches_rebuild_every_step(trace, ghost=True, since_every=5)
