"""`python -m llada.train`: the training command (llada/train/cli.py), then its evaluation and card (llada/card/)."""
from ..card.command import main

main()
