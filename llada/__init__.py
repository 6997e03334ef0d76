"""LLaDA2.1 engine: the block-diffusion MoE model and its draft-and-edit decoder (training and evaluation
live apart, in `llada.train` and `llada.eval`).

Nothing heavy happens at import: submodules are imported where they are used.

One setting is made here, before torch loads its OpenMP runtime: `OMP_WAIT_POLICY=PASSIVE` (unless it is
set already), so torch's CPU threads sleep between parallel regions instead of spinning. On a machine whose
cores are busy with other work, spinning threads wait on each other: a lone decode of the embedded model on
the main thread took 7.5 s instead of 0.17 s at a load average of 5 on 2 cores. It only takes effect when
`llada` is imported before torch (the command line, the app and the tests do so).
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__all__ = ["config", "model", "checkpoint", "rule", "decode", "trace", "presets", "pipeline"]
