"""LLaDA2.1 engine: the block-diffusion MoE model, its draft-and-edit decoder, training and evaluation.

Nothing heavy happens at import: submodules are imported where they are used.
"""

__all__ = ["config", "model", "checkpoint", "decode", "pipeline"]
