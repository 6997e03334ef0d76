"""Training our small LLaDA2.1-style model (apart from the engine, which it only uses).

    python -m llada.train --out assets/model

`corpus` reads Python code, `bpe` trains the tokenizer, `data` lays out batches, `objective` is the
M2T + T2T loss, `loop` runs it all and writes a checkpoint the engine loads like any other.
"""
