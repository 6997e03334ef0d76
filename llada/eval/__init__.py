"""Evaluation of the engine and our small model: checkable tasks, the train / held-out split, the harness.

    python -m llada.eval --model assets/model --n 50 --seed 0 [--json]

`tasks` makes items with one checkable answer, `split` decides which are held out, `harness` decodes
them in every mode through `Pipeline.generate` and reports accuracy, TPF, TPS and edits.
"""
