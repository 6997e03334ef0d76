"""Evaluation of the engine and our small models on the tasks and held-out code of `llada.data`.

    python -m llada.eval --model assets/model --n 50 --code-n 50 --seed 0 [--json]

`harness` decodes tasks in every mode through `Pipeline.generate` and reports accuracy, TPF, TPS and
edits, `codetrack` does the same for held-out functions (parses, names in scope).
"""
