"""Sizing on paper (`python -m llada.dist.size`): a rank's weights, the refusals, the bytes each forward moves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from llada.config import ModelConfig
from llada.dist.size import main, table
from llada.weights.memory import GIB, weight_bytes
from llada.weights.replica import replica_config


@pytest.fixture(scope="module")
def rows():
    return {(r.model, r.ranks, r.gpu, r.weights): r for r in table(32)}


def test_flash_fits_two_h200_and_four_h100_in_bf16_and_one_h100_refuses_it(rows):
    flash = ModelConfig.from_dict(replica_config("flash"))
    two = rows["LLaDA2.1-flash", 2, "H200", "bf16"]
    assert two.fits and two.gib_per_rank == round(weight_bytes(flash, torch.bfloat16, world=2) / GIB, 1)
    assert rows["LLaDA2.2-flash", 4, "H100", "bf16"].fits
    assert rows["LLaDA2.1-flash", 1, "H200", "fp8"].fits  # the single-GPU FP8 path
    alone = rows["LLaDA2.1-flash", 1, "H100", "fp8"]
    assert not alone.fits and "but an H100 has 79.6 GiB available" in alone.refusal
    assert rows["LLaDA2.1-flash", 4, "H100", "fp8"].gib_per_rank < two.gib_per_rank / 3  # fp8 experts, 1/4 each


def test_a_forward_all_reduces_tokens_by_hidden_in_fp32_per_moe_layer(rows):
    two = rows["LLaDA2.1-flash", 2, "H200", "bf16"]
    assert two.allreduce_mib == round(31 * 32 * 4096 * 4 / 2**20, 1)  # 31 MoE layers of 32 x 4096 fp32
    assert rows["LLaDA2.1-flash", 1, "H200", "fp8"].allreduce_mib == 0
    assert 0 < two.talk_ms < two.read_ms  # at a 32-token block reading the experts costs more than talking


def test_the_command_prints_the_table_or_json(capsys):
    main([])
    out = capsys.readouterr().out
    assert "| LLaDA2.2-flash | 4x H100 | bf16 |" in out and "refused: 1x H100 fp8: the weights need" in out
    main(["--json", "--tokens", "64"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 12 and lines[2]["allreduce_mib"] == 31.0
    with pytest.raises(SystemExit):
        main(["--tokens", "0"])


def test_int8_across_ranks_divides_only_the_routed_experts():
    from llada.weights.memory import routed_int8_bytes

    flash = ModelConfig.from_dict(replica_config("flash"))
    whole, half = weight_bytes(flash, torch.bfloat16, "int8"), weight_bytes(flash, torch.bfloat16, "int8", world=2)
    assert whole - half == routed_int8_bytes(flash) // 2  # a rank holds half the int8 experts, all the rest
    parts = flash.parameter_counts()
    rows = (flash.num_hidden_layers - flash.first_k_dense_replace) * flash.num_experts * (
        2 * flash.moe_intermediate_size + flash.hidden_size)
    assert routed_int8_bytes(flash) == parts["routed_experts"] + 2 * rows  # a byte a weight, a bf16 scale a row


def test_the_docs_show_the_table_the_command_prints(capsys):
    main([])
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| LLaDA2.1-flash")]
    docs = (Path(__file__).resolve().parents[1] / "docs" / "distributed.md").read_text()
    assert len(printed) == 6 and all(line in docs for line in printed)  # the table there is this one
