"""The draft-and-edit loop against the reference traces, and its records, MBE and settings."""

import pytest
import torch

from llada.checkpoint import load_model
from llada.decode import DecodeConfig, decode, generate, output_ids
from llada.sampling import sample_tokens


@pytest.fixture(scope="module")
def ref_model(fixture_dir):
    return load_model(fixture_dir)


def _config(case, **kw):
    return DecodeConfig(threshold=case["threshold"], editing_threshold=case["editing_threshold"],
                        max_post_steps=case["max_post_steps"], block_length=case["block_length"],
                        gen_length=case["gen_length"], eos_early_stop=case["eos_early_stop"], **kw)


@pytest.mark.parametrize("use_cache", [True, False], ids=["cache", "no-cache"])
def test_every_fixture_case_is_reproduced(ref_model, golden, use_cache):
    for case in golden["generate"]:
        r = generate(ref_model, case["prompt_ids"], _config(case, use_cache=use_cache),
                     golden["mask_id"], golden["eos_id"])
        assert r.output_ids == case["output_ids"], case["name"]
        assert r.num_decode_forwards == case["num_forwards"], case["name"]
        assert r.block_states_before_each_forward == case["block_states_before_each_forward"], case["name"]


def test_cache_forwards_are_counted_apart(ref_model, golden):
    case = golden["generate"][0]  # prompt 19, block 8: two prompt-only blocks to prefill
    with_cache = generate(ref_model, case["prompt_ids"], _config(case), golden["mask_id"], golden["eos_id"])
    without = generate(ref_model, case["prompt_ids"], _config(case, use_cache=False), golden["mask_id"], golden["eos_id"])
    assert without.num_cache_forwards == 0
    assert with_cache.num_cache_forwards >= 1
    assert with_cache.records[0].kind == "cache" and with_cache.records[0].phase == "prefill"
    assert with_cache.tpf == len(with_cache.output_ids) / (with_cache.num_decode_forwards + with_cache.num_cache_forwards)


def _replay(records, prompt, n_total, mask_id):
    """Rebuild every step's sequence from the recorded changes alone."""
    x = list(prompt) + [mask_id] * (n_total - len(prompt))
    for r in records:
        if r.kind == "decode":
            for pos in r.drafted:
                assert x[pos] == mask_id
            for pos in r.edited + r.mbe_edited:
                assert x[pos] == r.previous[pos] != mask_id and pos >= len(prompt)
            for pos in r.drafted + r.edited + r.mbe_edited:
                x[pos] = r.tokens[pos]
        assert x == r.tokens, f"record {r.step} disagrees with its own changes"
    return x


@pytest.mark.parametrize("mbe", [False, True], ids=["plain", "mbe"])
def test_records_are_consistent_with_the_output(ref_model, golden, mbe):
    case = golden["generate"][2]
    cfg = _config(case, mbe=mbe, mbe_window=2)
    r = generate(ref_model, case["prompt_ids"], cfg, golden["mask_id"], golden["eos_id"])
    final = _replay(r.records, case["prompt_ids"], len(r.records[-1].tokens), golden["mask_id"])
    assert output_ids(final, len(case["prompt_ids"]), cfg.gen_length, golden["mask_id"], golden["eos_id"]) == r.output_ids
    decodes = [x for x in r.records if x.kind == "decode"]
    assert [x.step for x in decodes] == list(range(1, len(decodes) + 1))
    for x in decodes:
        for pos in x.drafted + x.edited + x.mbe_edited:
            p = x.p_at(pos)
            assert p > (x.threshold if pos in x.drafted else x.editing_threshold) or pos in x.drafted
    assert r.drafts == sum(len(x.drafted) for x in decodes)


def test_mbe_edits_land_in_earlier_blocks_and_are_flagged(ref_model, golden):
    case = golden["generate"][0]  # S mode: tau_edit 0 edits every changed token
    cfg = _config(case, mbe=True, mbe_window=1)
    r = generate(ref_model, case["prompt_ids"], cfg, golden["mask_id"], golden["eos_id"])
    assert r.mbe_edits > 0
    for x in r.records:
        if x.kind != "decode":
            continue
        for pos in x.mbe_edited:
            assert x.window[0] <= pos < x.active[0]  # an earlier block inside the MBE window
            assert pos // cfg.block_length < x.block
        for pos in x.edited + x.drafted:
            assert x.active[0] <= pos < x.active[1]
    off = generate(ref_model, case["prompt_ids"], _config(case), golden["mask_id"], golden["eos_id"])
    assert off.mbe_edits == 0


@pytest.mark.parametrize("case_index", [0, 7, 12])
def test_mbe_with_and_without_cache_agree(ref_model, golden, case_index):
    case = golden["generate"][case_index]
    runs = [generate(ref_model, case["prompt_ids"], _config(case, mbe=True, mbe_window=2, use_cache=c),
                     golden["mask_id"], golden["eos_id"]) for c in (True, False)]
    assert runs[0].output_ids == runs[1].output_ids
    assert runs[0].block_states_before_each_forward == runs[1].block_states_before_each_forward


def test_editing_off_never_edits_and_zero_edits_everything(ref_model, golden):
    case = golden["generate"][0]
    off = generate(ref_model, case["prompt_ids"], _config(case).with_(editing_threshold=None),
                   golden["mask_id"], golden["eos_id"])
    assert off.edits == 0
    zero = generate(ref_model, case["prompt_ids"], _config(case), golden["mask_id"], golden["eos_id"])
    assert zero.edits > 0  # 0.0 means "replace every changed token", not "off"


def test_top_k_1_samples_the_argmax_with_certainty():
    logits = torch.randn(5, 11, generator=torch.Generator().manual_seed(0))
    x0, p = sample_tokens(logits, temperature=0.8, top_k=1, generator=torch.Generator().manual_seed(1))
    assert torch.equal(x0, logits.argmax(-1)) and torch.equal(p, torch.ones(5))


def test_greedy_confidence_is_the_softmax_max():
    logits = torch.tensor([[2.0, 0.0, -1.0]])
    x0, p = sample_tokens(logits)
    assert x0.item() == 0 and p.item() == pytest.approx(torch.softmax(logits, -1).max().item())


def test_sampling_is_seeded(ref_model, golden):
    case = golden["generate"][3]
    greedy = generate(ref_model, case["prompt_ids"], _config(case), golden["mask_id"], golden["eos_id"])
    a, b = (generate(ref_model, case["prompt_ids"], _config(case, temperature=1.0, top_p=0.9, seed=5),
                     golden["mask_id"], golden["eos_id"]) for _ in range(2))
    assert a.output_ids == b.output_ids and a.output_ids != greedy.output_ids


@pytest.mark.parametrize("bad, message", [
    ({"threshold": 1.5}, "threshold must be a number in [0.0, 1.0]"),
    ({"threshold": -0.1}, "threshold"),
    ({"editing_threshold": 2.0}, "editing_threshold"),
    ({"threshold": float("nan")}, "threshold"),
    ({"block_length": 0}, "block_length must be a positive integer"),
    ({"gen_length": -4}, "gen_length must be a positive integer"),
    ({"max_post_steps": -1}, "max_post_steps"),
    ({"temperature": -1.0}, "temperature"),
    ({"top_p": 0.0}, "top_p"),
])
def test_invalid_settings_are_refused_with_the_allowed_range(bad, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        DecodeConfig(**bad)


def test_presets_and_unknown_mode():
    assert DecodeConfig.preset("S").editing_threshold == 0.0
    assert DecodeConfig.preset("q").threshold == 0.7
    assert DecodeConfig.preset("M2T only").editing_threshold is None
    with pytest.raises(ValueError, match="unknown mode 'X'"):
        DecodeConfig.preset("X")


def test_prompt_problems_are_refused(ref_model, golden):
    m, e = golden["mask_id"], golden["eos_id"]
    with pytest.raises(ValueError, match="empty"):
        next(decode(ref_model, [], DecodeConfig(), m, e))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        next(decode(ref_model, [5, 9999], DecodeConfig(), m, e))
    with pytest.raises(ValueError, match="the model allows 512"):
        next(decode(ref_model, [5] * 500, DecodeConfig(gen_length=64), m, e))


def test_eos_early_stop_saves_forwards(ref_model, golden):
    case = golden["generate"][6]  # p24 with eos_early_stop: the reference stops after 10 forwards
    r = generate(ref_model, case["prompt_ids"], _config(case), golden["mask_id"], golden["eos_id"])
    assert r.output_ids[-1] == golden["eos_id"] and r.num_decode_forwards == 10
    assert torch.tensor(r.records[-1].tokens[-8:]).eq(golden["mask_id"]).all()  # later blocks never decoded
