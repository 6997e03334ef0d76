"""The decode loop under LLaDA2.2's Levenshtein rule: the cache on and off, batches against lone runs, the
records of inserts and deletes (applied, undone, written and read back), the rule's override and its refusals.

A small 2.2 model (vocabulary 99, routing blocks of 8) keeps every run to a few dozen tiny forwards; `Nudged`
favours DELETE at one position and SPLIT at another wherever those hold a written token, so that blocks
really move; the loop, the drivers and the rule under it are the real ones.
"""

import json

import pytest
import torch

from llada.__main__ import main
from llada.config import DecodeConfig, ModelConfig
from llada.decode import decode, generate, generate_batch
from llada.model import LLaDA2MoE
from llada.presets import official
from llada.trace import SCHEMA, Trace
from llada.weights import replica
from llada.weights.checkpoint import save_model

MASK, EOS, ROLE_END, DELETE, SPLIT = 98, 3, 4, 90, 91
DEL_AT, SPLIT_AT = 10, 13  # in the first decoded block after the prompt's (positions 8..15)
PROMPT = [11, 12, 13, 14, 15]
SMALL = DecodeConfig(block_length=8, gen_length=16, steps=4, max_post_steps=2)


def small_22(seed: int = 0, **changes) -> LLaDA2MoE:
    cfg = ModelConfig(**(dict(
        vocab_size=99, hidden_size=24, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
        head_dim=12, intermediate_size=40, moe_intermediate_size=8, num_experts=16, num_experts_per_tok=4,
        first_k_dense_replace=1, num_shared_experts=1, routed_scaling_factor=2.5, expert_capacity=6,
        routing_block=8, delete_token_id=DELETE, split_token_id=SPLIT, stop_token_ids=(EOS, ROLE_END),
        max_position_embeddings=256) | changes))
    return LLaDA2MoE(cfg).init_weights(std=0.2, seed=seed)


class Nudged:
    """A model whose logits favour DELETE at DEL_AT and SPLIT at SPLIT_AT wherever a written token sits there."""

    def __init__(self, model: LLaDA2MoE):
        self.model = model

    def __getattr__(self, name):
        return getattr(self.model, name)

    def forward_rows(self, rows):
        out = self.model.forward_rows(rows)
        for row, logits in zip(rows, out):
            if logits is not None:
                T = logits.shape[0]
                pos = torch.arange(row.start, row.start + len(row.ids))[-T:]
                written = row.ids[-T:] != MASK
                logits[(pos == DEL_AT) & written, DELETE] += 100.0
                logits[(pos == SPLIT_AT) & written, SPLIT] += 100.0
        return out


@pytest.fixture(scope="module")
def nudged():
    return Nudged(small_22())


def decoded(trace: Trace) -> list[dict]:
    """The decode records as JSON, engine time left out."""
    return [r.to_dict() | {"seconds": 0} for r in trace.records if r.kind == "decode"]


def run(model, cfg=SMALL, prompt=PROMPT) -> Trace:
    return generate(model, prompt, cfg, MASK, EOS)


def test_the_cache_on_and_off_give_the_same_trace_moves_included(nudged):
    for cfg in (SMALL, SMALL.with_(mbe=True, mbe_window=1)):
        on, off = run(nudged, cfg), run(nudged, cfg.with_(use_cache=False))
        assert decoded(on) == decoded(off) and on.output_ids == off.output_ids
        assert on.inserts > 0 and on.deletes > 0 and on.num_cache_forwards > 0 == off.num_cache_forwards


def test_a_22_replica_in_the_real_format_decodes_alike_with_and_without_the_cache(tmp_path):
    out = tmp_path / "LLaDA2.2-mini"
    assert replica.main([str(out), "--shape", "tiny", "--version", "2.2"]) == 0
    from llada.weights.checkpoint import load_model

    model = load_model(out)
    cfg = DecodeConfig(threshold=0.0, max_post_steps=1, block_length=32, gen_length=32)
    on, off = (generate(model, list(range(100, 140)), cfg.with_(use_cache=c), replica.MASK_ID, replica.EOS_ID)
               for c in (True, False))
    assert decoded(on) == decoded(off) and on.steps >= 2
    assert on.stop_ids == (156892, 156900)


def test_rows_of_a_batch_get_their_lone_runs(nudged):
    configs = [SMALL, SMALL.with_(threshold=0.9, steps=2), SMALL.with_(rule="joint"), SMALL.with_(mbe=True),
               SMALL.with_(escape="random", seed=3)]
    prompts = [PROMPT, [21, 22, 23], PROMPT, [30] * 9, PROMPT]
    together = generate_batch(nudged, prompts, configs, MASK, EOS, max_batch=3)
    for ids, cfg, trace in zip(prompts, configs, together):
        assert decoded(trace) == decoded(run(nudged, cfg, ids)), cfg
    assert together[2].inserts == together[2].deletes == 0  # the joint rule writes DELETE and SPLIT as text
    assert together[0].inserts > 0


def test_a_step_records_its_inserts_and_deletes_and_replays_them(nudged):
    trace = run(nudged)
    moving = [r for r in trace.records if r.kind == "decode" and r.moved_to]
    assert moving and trace.deletes == sum(len(r.deletes) for r in moving) > 0
    d = next(d for r in moving for d in r.deletes if d.pos == DEL_AT)
    assert d.token != MASK  # the nudge deletes written tokens only (the random model deletes elsewhere too)
    r, i = next((r, i) for r in moving for i in r.inserts if i.pos == SPLIT_AT)
    assert i.mask == SPLIT_AT and r.moved_to[SPLIT_AT - r.active[0]] in (SPLIT_AT + 1, -1)  # the token goes right
    frames = [trace.tokens_at(k) for k in range(trace.steps + 1)]
    assert frames[-1] == trace.tokens and frames[0][len(PROMPT):] == [MASK] * (trace.length - len(PROMPT))
    assert [trace.tokens_at(k) for k in reversed(range(trace.steps + 1))] == frames[::-1]  # undone step by step
    states = trace.block_states_before_each_forward()
    for k in range(1, trace.steps + 1):
        a0, a1 = trace.step_record(k).active
        assert states[k - 1] == frames[k - 1][a0:a1]
    assert DELETE not in trace.tokens and SPLIT not in trace.tokens


def test_the_trace_json_holds_the_moves_and_old_traces_still_read(nudged):
    trace = run(nudged)
    data = json.loads(json.dumps(trace.to_dict()))
    assert data["schema"] == SCHEMA == "llada-trace/3" and data["stop_ids"] == [EOS, ROLE_END]
    assert data["result"]["stats"]["inserts"] == trace.inserts > 0
    back = Trace.from_dict(data)
    assert back.to_dict()["records"] == data["records"] and back.tokens == trace.tokens
    assert back.deletes == trace.deletes and back.stop_ids == trace.stop_ids
    old = run(nudged, SMALL.with_(rule="joint")).to_dict()
    old["schema"] = "llada-trace/2"
    for record in old["records"]:
        for key in ("inserts", "deletes", "moved_to"):
            record.pop(key, None)
    for key in ("rule", "steps", "post_count", "escape"):
        old["settings"].pop(key)
    assert Trace.from_dict(old).tokens == Trace.from_dict(old | {"schema": SCHEMA}).tokens


def test_a_stop_id_of_the_config_ends_the_output():
    trace = Trace(prompt_ids=[5], settings=DecodeConfig(gen_length=4, block_length=4), mask_id=MASK, eos_id=EOS,
                  stop_ids=(EOS, ROLE_END))
    trace.tokens[1:5] = [7, ROLE_END, 8, 9]
    assert trace.output_ids == [7, ROLE_END]


def test_the_rule_follows_the_checkpoint_and_can_be_overridden(nudged, ref_model, golden):
    assert run(nudged).inserts > 0  # 2.2 -> Levenshtein
    joint = run(nudged, SMALL.with_(rule="joint"))
    assert not any(r.moved_to for r in joint.records) and DELETE in joint.tokens  # DELETE is only text there
    with pytest.raises(ValueError, match="needs a LLaDA2.2 checkpoint"):
        decode(ref_model, [5, 6], DecodeConfig(rule="levenshtein"), golden["mask_id"], golden["eos_id"])
    with pytest.raises(ValueError, match="decodes greedily"):
        decode(nudged, PROMPT, SMALL.with_(temperature=0.5), MASK, EOS)
    with pytest.raises(ValueError, match="DELETE or SPLIT"):
        decode(nudged, PROMPT, SMALL, DELETE, EOS)


@pytest.mark.parametrize("change, words", [
    ({"rule": "levenstein"}, "rule must be one of joint, levenshtein"),
    ({"steps": 0}, "steps must be a positive integer"),
    ({"post_count": "never"}, "post_count must be one of reset, cumulative"),
    ({"escape": "first"}, "escape must be one of least_confident, random"),
])
def test_bad_22_settings_are_refused_with_a_message(change, words):
    with pytest.raises(ValueError, match=words):
        DecodeConfig(**change)


def test_22_presets_are_the_reports():
    assert official("2.2")["S"] == {"threshold": 0.5, "editing_threshold": 0.0, "steps": 32, "max_post_steps": 16,
                                    "block_length": 32}
    assert "steps" not in official("2.1")["S"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("small22")
    save_model(small_22(seed=1), out, extra_config={"mask_token_id": MASK, "name": "small-22"})
    return out


def cli(model_dir, capsys, *extra) -> tuple[int, str, str]:
    code = main(["generate", "--model", str(model_dir), "--prompt-ids", ",".join(map(str, PROMPT)),
                 "--block-length", "8", "--gen-length", "16", "--engine", "reference", "--json", *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_counts_inserts_and_deletes_and_rule_override_is_checked(model_dir, capsys, monkeypatch):
    import llada.pipeline

    loaded = llada.pipeline.load_model
    monkeypatch.setattr(llada.pipeline, "load_model", lambda *a, **k: Nudged(loaded(*a, **k)))
    code, out, err = cli(model_dir, capsys, "--steps", "4", "--max-post-steps", "2")
    assert code == 0, err
    one = json.loads(out)
    assert one["inserts"] > 0 and one["deletes"] > 0 and one["drafts"] > 0
    code, out, _ = cli(model_dir, capsys, "--rule", "joint", "--max-post-steps", "2")
    assert code == 0 and json.loads(out)["inserts"] == json.loads(out)["deletes"] == 0


def test_cli_refuses_levenshtein_on_a_21_checkpoint(tiny_model_dir, capsys):
    code = main(["generate", "--model", str(tiny_model_dir), "--prompt-ids", "5,6,7", "--rule", "levenshtein",
                 "--gen-length", "8", "--block-length", "8", "--json"])
    assert code == 2 and "needs a LLaDA2.2 checkpoint" in capsys.readouterr().err
