"""The one record of a run: incremental state, replay in both directions, JSON round trip, checks."""

import json

import pytest

from llada.config import DecodeConfig
from llada.trace import SCHEMA, Change, StepRecord, Trace
from ui_helpers import EOS, MASK, hand_trace


def test_state_counts_and_output_follow_the_records():
    trace = hand_trace()
    assert trace.steps == trace.forwards == 6 and trace.num_cache_forwards == 0
    assert (trace.drafts, trace.edits, trace.mbe_edits) == (5, 1, 1)
    assert trace.output_ids == [EOS]  # the MBE edit wrote EOS at the first generated position
    assert trace.output_lengths == [1, 1, 3, 1, 1, 1]
    assert trace.tpf == 1 / 6 and trace.seconds == pytest.approx(0.06)  # a float sum of six 0.01


def test_tokens_at_any_step_in_any_order_equal_a_replay_from_the_start():
    trace = hand_trace()
    def replay(step):
        x = trace.prompt_ids + [MASK] * (trace.length - trace.prompt_length)
        for k in range(1, step + 1):
            for c in trace.step_record(k).changes:
                x[c.pos] = c.token
        return x
    for step in (6, 2, 5, 0, 3, 3, 1, 4, 6, 0):
        assert trace.tokens_at(step) == replay(step), step


def test_last_write_names_step_kind_and_p():
    trace = hand_trace()
    assert trace.last_write(3, 1) == (1, "drafts", 0.9)
    assert trace.last_write(3, 3) == (2, "edits", 0.8)
    assert trace.last_write(3, 6) == (4, "mbe_edits", 0.95)
    assert trace.last_write(7, 4) is None


def test_block_states_before_each_forward():
    states = hand_trace().block_states_before_each_forward()
    assert states[0] == [9, 10, 9, MASK] and states[2] == [MASK] * 4 and len(states) == 6


def test_json_round_trip_keeps_everything():
    trace = hand_trace().finish("stopped", "budget reached", text="x")
    data = json.loads(json.dumps(trace.to_dict()))
    back = Trace.from_dict(data)
    assert data["schema"] == SCHEMA and back.records == trace.records and back.texts == trace.texts
    assert (back.status, back.note, back.text, back.mode) == ("stopped", "budget reached", "x", "Custom")
    assert back.stats() == trace.stats() and back.tokens == trace.tokens


def test_a_change_that_does_not_fit_is_refused():
    trace = Trace([5, 6], DecodeConfig(block_length=4, gen_length=2), mask_id=1, eos_id=0)
    bad = StepRecord(kind="decode", phase="draft", step=1, block=0, block_step=1, window=(0, 4), active=(0, 4),
                     drafts=[Change(2, 7, 9, 0.9)])  # position 2 holds the mask (1), not 9
    with pytest.raises(ValueError, match="changes position 2 from 9"):
        trace.add(bad)
    with pytest.raises(ValueError, match="changes position 1"):  # a prompt position
        trace.add(StepRecord("decode", "draft", 1, 0, 1, (0, 4), (0, 4), drafts=[Change(1, 7, 6, 0.9)]))


def test_tokens_are_named_once_as_they_appear():
    trace = Trace([5, 6], DecodeConfig(block_length=4, gen_length=2), mask_id=1, eos_id=0)
    asked = []
    def names(ids):
        asked.append(list(ids))
        return [f"t{i}" for i in ids]
    trace.name_tokens(names)
    trace.add(StepRecord("decode", "draft", 1, 0, 1, (0, 4), (0, 4), drafts=[Change(2, 7, 1, 0.9)],
                         guesses=[5, 6, 7, 8], confidence=[0.1, 0.1, 0.9, 0.2]))
    trace.name_tokens(names)
    trace.name_tokens(names)
    assert asked == [[0, 1, 5, 6], [7, 8]] and trace.texts[8] == "t8"


def _long_trace(steps: int = 120) -> Trace:
    """One block of `steps` positions, each decode step drafting one of them."""
    settings = DecodeConfig(threshold=0.5, editing_threshold=None, max_post_steps=0, block_length=steps,
                            gen_length=steps)
    window = (1, steps + 1)
    records = [StepRecord(kind="decode", phase="draft", step=k, block=0, block_step=k, window=window, active=window,
                          drafts=[Change(k, 2 + k % 7, MASK, 0.9)], guesses=[0] * steps, confidence=[0.9] * steps)
               for k in range(1, steps + 1)]
    return Trace(prompt_ids=[EOS + 2], settings=settings, mask_id=MASK, eos_id=EOS, records=records)


def test_tokens_at_from_many_threads_at_once_draws_every_frame_right():
    """Scrub, replay and export of one trace can run in threads at once: no shared cursor to tear."""
    import sys
    from concurrent.futures import ThreadPoolExecutor

    trace = _long_trace()
    expected = [trace.tokens_at(step) for step in range(trace.steps + 1)]
    steps = [(37 * i) % trace.steps for i in range(4000)]  # never the last step, which needs no walk
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows
    try:
        with ThreadPoolExecutor(8) as pool:
            wrong = sum(pool.map(lambda s: trace.tokens_at(s) != expected[s], steps))
    finally:
        sys.setswitchinterval(interval)
    assert wrong == 0
