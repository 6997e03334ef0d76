"""The Learn view without a browser: narration of known steps, what each lesson must show, the shipped
recordings (each shows its idea, and `python -m ui.learn.record` reproduces them: every token and step, each
confidence to its 4th digit), the recorder's command line, and the view's renderers."""

from __future__ import annotations

import json

import pytest

from llada.trace import Change, Trace
from ui.learn import lessons, record, view as learn
from ui.learn.lessons import Recording, problems
from ui.render.narrate import narrate, p_text, story, token_list, token_text
from ui_helpers import hand_trace

IDEAS = ("draft", "edit", "modes", "mbe", "baseline", "heal", "indel")


def shortened(trace: Trace, steps: int, **changes) -> Trace:
    """The hand trace cut after `steps` decode steps (the same run, stopped earlier), settings changed."""
    data = trace.to_dict()
    data["records"] = data["records"][:steps]
    data |= {k: v for k, v in changes.items() if k != "settings"}
    data["settings"] |= changes.get("settings", {})
    return Trace.from_dict(data)


# ---- narration: a pure function of the trace and the step ------------------------------------------------

def test_narration_says_what_each_known_step_did():
    t = hand_trace()  # its steps are listed in tests/ui_helpers.py
    lines = story(t)
    assert len(lines) == t.steps + 1 == 7
    assert lines[0].startswith("Step 0: the prompt (3 tokens) ends in block 0")
    assert "τ_mask 0.50" in lines[0] and "τ_edit 0.00" in lines[0] and "MBE" in lines[0]
    assert lines[1].startswith("Step 1 (block 0): 1 mask passed τ_mask 0.50 and was drafted")
    assert "(p 0.90)" in lines[1]
    # step 2: the draft at position 3 is edited; the line names old -> new, p against τ_edit, and when it was written
    assert "position 3 changed '<img·src=x·onerror=alert(1)>' → '↵····' (p 0.80 > τ_edit 0.00)" in lines[2]
    assert "drafted at step 1 (p 0.90); now the model reads its own token in place" in lines[2]
    assert "2 masks passed τ_mask 0.50 and were drafted together in this one forward: 'def·f'" in lines[3]
    assert "2 masks left in the block" in lines[3]
    # step 4: no mask passed τ_mask (p 0.3), so the fallback; and an MBE edit of block 0 after block 1's 2 drafts
    assert "no mask passed τ_mask 0.50, so only the most confident one was drafted: 'def' at position 6" in lines[4]
    assert "MBE: in the finished block 0" in lines[4] and "position 3 changed '↵····' → EOS (p 0.95" in lines[4]
    assert "last edited at step 2 (p 0.80) before 2 other tokens of the window were written" in lines[4]
    assert lines[6] == "Step 6 (block 1): no masks left and nothing to edit: block 1 is verified and final."


def test_narration_is_pure_and_handles_out_of_range_steps():
    t = hand_trace()
    forward = [narrate(t, k) for k in range(t.steps + 1)]
    backward = [narrate(t, k) for k in reversed(range(t.steps + 1))][::-1]
    assert forward == backward  # the order of asking changes nothing
    assert narrate(t, -3) == forward[0]
    assert narrate(t, 99) == f"Done: this run finished at step {t.steps} ({t.forwards} forwards)."


def test_narration_names_the_stop_and_editing_off():
    done = hand_trace().finish("done")
    assert "the last block is done, and with it the run" in narrate(done, done.steps)
    off = shortened(hand_trace(), 1, settings={"editing_threshold": None, "mbe": False})
    assert "editing (T2T) is off, so a written token never changes" in narrate(off, 0)
    assert "MBE" not in narrate(off, 0)


def test_narration_counts_cache_forwards_and_shows_p_past_its_threshold():
    data = hand_trace().to_dict()
    cache = {"kind": "cache", "step": 0, "block": 0, "block_step": 0, "window": [0, 4], "active": [0, 4],
             "seconds": 0.0}
    data["records"].insert(2, cache | {"phase": "refresh", "step": 2})  # after step 2: block 0 stored
    data["records"].insert(0, cache | {"phase": "prefill"})  # before step 1
    t = Trace.from_dict(data)
    assert narrate(t, 0).endswith("Before step 1, 1 cache forward stored the keys and values of block 0 for the KV "
                                  "cache.")
    assert "then 1 cache forward stored the keys and values of block 0" in narrate(t, 2)
    assert "cache" not in narrate(t, 1) and "cache" not in narrate(t, 3)
    assert p_text(0.9502, 0.95) == "0.9502" and p_text(0.951, 0.95) == "0.951" and p_text(0.97, 0.95) == "0.97"


def test_drafted_text_joins_neighbours_marks_gaps_and_counts_trailing_eos():
    t = hand_trace()
    A, B, EOS = 9, 10, t.eos_id
    drafts = [Change(pos, token, t.mask_id, 0.9) for pos, token in ((7, A), (4, A), (5, B), (8, EOS), (9, EOS))]
    assert token_list(t, drafts) == "'def·f' … 'def' and 2 × EOS"  # position order, whatever the record's order
    assert token_list(t, [Change(4, EOS, 1, .9)]) == "EOS"


def test_token_text_shows_whitespace_and_special_tokens():
    t = hand_trace()
    assert token_text(t, t.eos_id) == "EOS" and token_text(t, t.mask_id) == "mask"
    assert token_text(t, 8) == "'↵····'" and token_text(t, 10) == "'·f'"


# ---- what a lesson must show ---------------------------------------------------------------------------

def test_problems_name_what_a_lesson_fails_to_show():
    t = hand_trace()
    slow = shortened(t, 6)
    fast = shortened(t, 3)
    assert problems(Recording("x", (t,), idea="edit")) == []  # step 2 edits
    assert problems(Recording("x", (fast,), idea="draft")) == ["no forward drafts 3 or more answer tokens"]
    gap = problems(Recording("x", (slow, fast), idea="modes"))
    assert gap[0] == "S does not need fewer forwards than Q (6 vs 3)"
    assert gap[1] == "no accuracy gap on this prompt (S wrong, Q right)"
    mbe = problems(Recording("x", (t, fast), idea="mbe"))
    assert "the runs are not without and with MBE" in mbe and "MBE made no edit" in mbe
    assert problems(Recording("x", (t,), idea="baseline")) == ["editing is not off"]


def test_a_bare_trace_is_a_one_run_lesson_and_bad_files_load_as_none(tmp_path):
    t = hand_trace()
    rec = lessons.as_recording("a run", t)
    assert rec.title == "a run" and rec.runs == (t,) and rec.right(t) is None
    bad = tmp_path / "bad.json"
    for text in ("{", '{"runs": []}', '{"lessons": [{"title": "x"}]}'):
        bad.write_text(text)
        assert lessons.load_recordings(bad) == {}
    assert lessons.load_recordings(tmp_path / "missing.json") == {}


# ---- the shipped recordings ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def shipped() -> dict[str, Recording]:
    recordings = lessons.load_recordings()
    assert recordings, f"{lessons.RECORDING} is missing or unreadable: run python -m ui.learn.record"
    return recordings


def test_each_idea_has_a_lesson_that_shows_it(shipped):
    by_idea = {r.idea: r for r in shipped.values()}
    assert tuple(by_idea) == IDEAS
    for rec in shipped.values():
        assert problems(rec) == [], rec.title
        model = ("llada2.2-cpu-moe", "assets/model22") if rec.idea == "indel" else ("llada2-lease-moe", "assets/model")
        assert rec.caption and (rec.model, rec.model_dir) == model
        assert all(t.status == "done" and t.model == rec.model for t in rec.runs)
    s, q = by_idea["modes"].runs
    assert (s.mode, q.mode) == ("S", "Q") and s.prompt == q.prompt
    assert (s.settings.threshold, s.settings.block_length, q.settings.threshold, q.settings.block_length) == \
        (0.3, 32, 0.7, 32)  # the shipped model's presets (assets/model/presets.json, calibrated)
    off, on = by_idea["mbe"].runs
    assert on.mbe_edits >= 1 and off.settings.block_length == on.settings.block_length
    baseline = by_idea["baseline"].runs[0]
    assert baseline.mode == "M2T only" and baseline.prompt == by_idea["draft"].runs[0].prompt


def test_the_shipped_recordings_are_small():
    assert lessons.RECORDING.stat().st_size < 120_000  # the Space ships it; a few lessons need no more


def differences(a, b, where: str = "") -> list[str]:
    """Where two recordings differ: ints, text and structure exactly; a confidence by more than one unit of
    its 4th digit (another CPU's matmul order can carry a p of 0.99995 across a rounding edge)."""
    if isinstance(a, float) or isinstance(b, float):
        ok = isinstance(a, (int, float)) and isinstance(b, (int, float)) and abs(a - b) <= 1.5e-4
        return [] if ok else [f"{where}: {a!r} != {b!r}"]
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            return [f"{where}: keys {list(a)} != {list(b)}"]
        return [d for k in a for d in differences(a[k], b[k], f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} items != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]")]
    return [] if a == b and type(a) is type(b) else [f"{where}: {a!r} != {b!r}"]


def test_record_reproduces_the_shipped_file(tmp_path):
    out = tmp_path / "learn.json"
    assert record.main(["--out", str(out)]) == 0  # 0: every lesson shows its idea
    made, shipped = (json.loads(p.read_text(encoding="utf-8")) for p in (out, lessons.RECORDING))
    assert differences(made, shipped) == []  # every token, step, forward and text; p to its 4th digit


def test_the_comparison_of_recordings_bites():
    assert differences({"p": [0.9999, 3]}, {"p": [1.0, 3]}) == []
    assert differences({"p": [0.9997, 3]}, {"p": [1.0, 3]}) and differences({"p": [1.0, 3]}, {"p": [1.0, 4]})
    assert differences({"t": "a"}, {"t": "b"}) and differences([1], [1, 2]) and differences({"a": 1}, {"b": 1})
    assert differences({"n": 1}, {"n": 1.0}) == [] and differences({"n": True}, {"n": 1})


# ---- the recorder's command line -------------------------------------------------------------------------

def test_record_a_custom_lesson(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "custom.json"
    args = ["--model", str(tiny_model_dir), "--out", str(out), "--prompt", "def add(a, b):", "--runs", "Q",
            "S+MBE", "--block-length", "8", "--gen-length", "8"]
    assert record.main(args) == 0
    first = out.read_bytes()
    (rec,) = lessons.load_recordings(out).values()
    assert [Recording.run_name(t) for t in rec.runs] == ["Q", "S + MBE"]
    assert rec.runs[1].settings.mbe and rec.runs[1].settings.block_length == 8
    assert all(r.seconds == 0.0 for t in rec.runs for r in t.records)  # no timings: the file is reproducible
    assert "Q: " in capsys.readouterr().out
    record.main(args)
    assert out.read_bytes() == first


def test_record_refuses_an_unknown_run(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        record.main(["--out", str(tmp_path / "x.json"), "--prompt", "1+1=", "--runs", "S+XBE"])
    assert exit_.value.code == 2 and "only '+MBE' may follow the mode" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


# ---- the view's renderers --------------------------------------------------------------------------------

def test_narration_html_escapes_tokens_and_marks_the_current_step():
    rec = lessons.as_recording("hand", hand_trace())
    html = learn.narration_html(rec, 2)
    assert "<img" not in html and "&lt;img" in html
    assert 'data-step="2"' in html and '<li value="2" class="here">' in html
    assert html.count("<li ") == 7  # every step of the story, step 0 included


def test_a_pair_renders_two_canvases_and_compares_them():
    t = hand_trace()
    plain = {"mbe": False}
    pair = Recording("pair", (shortened(t, 6, mode="Q", settings=plain), shortened(t, 3, mode="S", settings=plain)),
                     answer="x")
    a, b = learn.canvases(pair, 2)
    assert 'id="canvas-learn"' in a and 'id="canvas-learn-b"' in b and 'data-step="2"' in b
    assert "<b>Q</b> · Step 2" in learn.narration_html(pair, 2)
    stats = learn.stats_html(pair)
    assert "S needs 2.0× fewer forwards (3 vs 6" in stats and "Q is wrong, S is wrong" in stats
    single = learn.canvases(lessons.as_recording("one", t), 1)
    assert 'class="canvas empty"' in single[1]
