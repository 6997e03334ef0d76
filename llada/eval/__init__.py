"""Evaluation of the engine and our small models: checkable tasks, held-out code, the split, the harness.

    python -m llada.eval --model assets/model --n 50 --code-n 50 --seed 0 [--json]

`tasks` makes items with one checkable answer, `split` decides which are held out, `sources` finds the
installed Python source and splits it by file path, `code` cuts functions and checks completions,
`harness` decodes tasks in every mode through `Pipeline.generate` and reports accuracy, TPF, TPS and
edits, `codetrack` does the same for held-out functions (parses, names in scope).
"""
