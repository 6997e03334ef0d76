"""LLaDA2.1 engine: the block-diffusion MoE model and its draft-and-edit decoder (training and evaluation
live apart, in `llada.train` and `llada.eval`).

Nothing heavy happens at import: submodules are imported where they are used.
"""

__all__ = ["config", "model", "checkpoint", "rule", "decode", "trace", "presets", "pipeline"]
