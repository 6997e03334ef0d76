"""The reference fixture's golden decoding cases as engine settings."""

from llada.config import DecodeConfig


def case_config(case: dict, **extra) -> DecodeConfig:
    """The DecodeConfig of one golden case of tests/fixtures/llada2_tiny_ref/golden.json, `extra` on top."""
    return DecodeConfig(threshold=case["threshold"], editing_threshold=case["editing_threshold"],
                        max_post_steps=case["max_post_steps"], block_length=case["block_length"],
                        gen_length=case["gen_length"], eos_early_stop=case["eos_early_stop"], **extra)
