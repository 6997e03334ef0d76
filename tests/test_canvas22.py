"""The canvas and the run's tables on a LLaDA2.2 run whose blocks move (tests/model22.py: a small 2.2 model
nudged to delete and split): the struck-out token and its place, the inserted mask, changes drawn where
their tokens landed, the legend, replay patches that reproduce every step, and the counts elsewhere."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from llada.trace import Trace
from model22 import DEL_AT, MASK, SPLIT_AT, TEXTS, moving_trace
from ui.render import canvas, charts, tables
from ui.render.moves import moves_of


@pytest.fixture(scope="module")
def trace() -> Trace:
    return moving_trace()


def step_with(trace: Trace, kind: str, pos: int) -> int:
    return next(k for k in range(1, trace.steps + 1) if any(m.pos == pos for m in getattr(trace.step_record(k), kind)))


class _Cells(HTMLParser):
    """pos -> [data-state, text] of every .tok of a canvas; the text of its `.gone` elements apart."""

    def __init__(self):
        super().__init__()
        self.cells, self.gone, self.open = {}, [], []  # open: (what, key) of every open span

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if "tok" in classes:
            self.cells[int(a["data-pos"])] = [a["data-state"], ""]
            self.open.append(("tok", int(a["data-pos"])))
        elif "gone" in classes:
            self.gone.append("")
            self.open.append(("gone", len(self.gone) - 1))
        else:
            self.open.append(self.open[-1] if self.open else (None, None))

    def handle_endtag(self, tag):
        self.open.pop()

    def handle_data(self, data):
        what, key = self.open[-1] if self.open else (None, None)
        if what == "tok":
            self.cells[key][1] += data
        elif what == "gone":
            self.gone[key] += data


def cells(html: str) -> dict[int, list[str]]:
    p = _Cells()
    p.feed(html)
    return p.cells


def test_the_run_moves(trace):
    assert trace.deletes > 0 and trace.inserts > 0 and trace.status == "done"


def test_a_deleted_token_is_struck_out_where_it_stood_and_the_text_after_it_moved_left(trace):
    k = step_with(trace, "deletes", DEL_AT)
    record, before, after = trace.step_record(k), trace.tokens_at(k - 1), trace.tokens_at(k)
    d = next(d for d in record.deletes if d.pos == DEL_AT)
    html = canvas.render(trace, k)
    gone = [(m[1], m[2], m[3], re.compile(r'data-pos="(\d+)"').search(html, m.end())[1]) for m in re.finditer(
        r'<span class="gone" data-state="delete" data-was="(\d+)" title="([^"]*)">(<span class="old">[^<]*</span>)'
        r'</span>', html)]  # (was, tip, inner, the position of the cell drawn after it)
    assert sorted(int(g[0]) for g in gone) == sorted(d.pos for d in record.deletes), gone
    was, tip, inner, host = next(g for g in gone if int(g[0]) == DEL_AT)
    assert '<span class="old">' in inner and TEXTS[d.token] in inner and "deleted at step" in tip
    moves = moves_of(record)
    left = max(moves.landed[j] for j in range(record.active[0], DEL_AT) if moves.landed[j] >= 0)
    assert int(host) == left + 1  # right after where its left neighbour landed: the gap it leaves
    if moves.landed[DEL_AT + 1] >= 0:  # the token on its right closed the gap: one place to the left
        written = next((c.token for c in record.changes if c.pos == DEL_AT + 1), before[DEL_AT + 1])
        assert moves.landed[DEL_AT + 1] == left + 1 and after[left + 1] == written
    host_tip = re.search(rf'data-pos="{host}"[^>]*title="([^"]*)"', html)[1]
    assert "deleted just before it at this step" in host_tip and TEXTS[d.token] in host_tip  # a tap on a phone
    assert "deleted (DELETE)" in canvas.step_label(canvas.view(trace, k))
    assert "gone" not in canvas.render(trace, k - 1) and "data-was" not in canvas.render(trace, k + 1)


def test_an_inserted_mask_opens_a_gap_before_the_token_it_split(trace):
    k = step_with(trace, "inserts", SPLIT_AT)
    i = next(i for i in trace.step_record(k).inserts if i.pos == SPLIT_AT)
    drawn = cells(canvas.render(trace, k))
    assert drawn[i.mask][0] == "insert" and drawn[i.mask][1] == ""  # no guess: the forward never saw it
    assert trace.tokens_at(k)[i.mask] == MASK and trace.tokens_at(k)[i.mask + 1] == i.token
    assert TEXTS[i.token] in drawn[i.mask + 1][1]  # the token it held, moved one to the right
    assert cells(canvas.render(trace, k + 1)).get(i.mask, ("",))[0] != "insert"  # a plain mask from then on
    tip = re.search(rf'data-pos="{i.mask}"[^>]*title="([^"]*)"', canvas.render(trace, k))[1]
    assert "SPLIT written at" in tip and "moved right" in tip
    ghost = canvas.render(trace, k, ghost=True)
    assert cells(ghost)[i.mask][1] == ""


def test_drafts_and_edits_are_drawn_where_their_tokens_landed(trace):
    for k in range(1, trace.steps + 1):
        record, tokens = trace.step_record(k), trace.tokens_at(k)
        moves, drawn = moves_of(record), cells(canvas.render(trace, k))
        for kind, state in (("drafts", "draft"), ("edits", "edit")):
            for c in getattr(record, kind):
                to = moves.at(c.pos)
                if to is not None:
                    assert drawn[to][0] == state and tokens[to] == c.token, (k, c, to)


def test_every_stable_token_names_the_step_that_wrote_it(trace):
    """A token's last write follows it through the moves (Trace.last_write): no moved token lacks one."""
    for k in range(trace.steps + 1):
        tokens = trace.tokens_at(k)
        for pos in range(trace.prompt_length, trace.length):
            write = trace.last_write(pos, k)
            assert (write is None) == (tokens[pos] == MASK), (k, pos, write)
            if write is not None:
                step, kind, _ = write
                record = trace.step_record(step)
                assert tokens[pos] in {c.token for c in getattr(record, kind)}, (k, pos, write)
    assert "written at step" in canvas.render(trace, trace.steps)


def test_the_legend_names_inserts_and_deletes_apart_from_the_other_states():
    legend = canvas.legend_html()
    keys = re.findall(r'data-state="(\w+)"><span class="txt">([^<]*)', legend)
    assert ("insert", "inserted mask (SPLIT, 2.2)") in keys and ("delete", "deleted (DELETE, 2.2)") in keys
    assert len({state for state, _ in keys}) == len(keys) == len(canvas.STATES)
    css = (canvas.__file__.rsplit("/ui/", 1)[0] + "/assets/style.css")
    colours = dict(re.findall(r"--c-(\w+): (#[0-9a-f]+)", open(css, encoding="utf-8").read()))
    assert len({colours[s] for s in ("draft", "edit", "mbe", "insert", "delete")}) == 5


def drawn_state(trace: Trace, step: int) -> dict:
    """What a canvas shows after `step`, part by part, as the browser keeps it: each cell's html (a deleted
    token's `.gone` goes with the cell after it), each block's class, the header and the counts."""
    v = canvas.view(trace, step)
    return {"cells": {pos: canvas.cell_html(v, pos) for pos in range(trace.length)},
            "blocks": {b: canvas.block_class(v, b) for b in range(trace.length // v.B)},
            "head": canvas.header_html(v), "counts": canvas.counts_html(v)}


def apply(state: dict, patch: dict) -> None:
    state["cells"].update(dict(patch["cells"]))
    state["blocks"].update(dict(patch["blocks"]))
    state["head"], state["counts"] = patch["head"], patch["counts"]


def test_replay_patches_reproduce_every_step_moves_included(trace):
    """The browser draws a finished run from step 0 and one patch per step (assets/canvas.js `show`): every
    step it reaches so, one patch at a time or several merged, is the step the server draws."""
    state = drawn_state(trace, 0)
    for k in range(1, trace.steps + 1):
        apply(state, canvas.patch(trace, k - 1, k))
        assert state == drawn_state(trace, k), k
    merged = drawn_state(trace, 0)
    for k in range(1, trace.steps + 1):  # patches merged (a jump): the last write of each cell wins
        apply(merged, canvas.patch(trace, k - 1, k))
    assert merged == drawn_state(trace, trace.steps)
    for k in range(trace.steps + 1):  # the cells are what render draws, block by block
        html, state, B = canvas.render(trace, k), drawn_state(trace, k), trace.block_length
        for b in state["blocks"]:
            assert "".join(state["cells"][pos] for pos in range(b * B, (b + 1) * B)) in html


def test_the_edit_log_lists_deletes_and_inserts(trace):
    log = tables.edit_log(trace)
    assert (log["kind"] == "delete").sum() == trace.deletes and (log["kind"] == "insert").sum() == trace.inserts
    row = log[(log["kind"] == "delete") & (log["position"] == DEL_AT)].iloc[0]
    assert row["new"] == "" and row["old"].startswith("w") and row["block"] == DEL_AT // trace.block_length
    ins = log[log["kind"] == "insert"].iloc[0]
    assert ins["new"] == f"[MASK] {ins['old']}" and ins["position"] == SPLIT_AT
    assert list(log["step"]) == sorted(log["step"])  # in the order the run made them


def test_stats_the_comparison_and_the_chart_count_them(trace):
    line = tables.stats_line(trace)
    assert f"inserts {trace.inserts} · deletes {trace.deletes}" in line
    table = tables.stats_table([("S", trace)])
    assert table.loc[0, "inserts"] == trace.inserts and table.loc[0, "deletes"] == trace.deletes
    bars = {t.name: sum(t.y) for t in charts.steps_figure([("S", trace)]).data}
    assert bars["inserts (SPLIT)"] == trace.inserts and bars["deletes (DELETE)"] == trace.deletes
    assert canvas.next_edit_step(trace, 0) is not None


def test_a_21_run_draws_no_moves_and_keeps_its_short_stats_line():
    from ui_helpers import hand_trace

    trace = hand_trace()
    assert "inserts" not in tables.stats_line(trace)
    for k in range(trace.steps + 1):
        html = canvas.render(trace, k)
        assert "gone" not in html and "insert" not in {state for state, _ in cells(html).values()}
    names = {t.name for t in charts.steps_figure([("S", trace)]).data}
    assert not names & {"inserts (SPLIT)", "deletes (DELETE)"}
