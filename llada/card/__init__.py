"""A trained model's evaluation and card: the last two steps of `python -m llada.train`.

Training (`llada/train/`) and evaluation (`llada/eval/`) never import each other; this package sits
above both. `command.main` runs the training half (`llada.train.cli.run_command`, which hands on a
`Trained` value), then loads the saved directory like any checkpoint, evaluates it with both tracks,
writes eval.json and samples.json, and `write` turns those files into the model card (OUT/README.md).
"""
