"""Training our small LLaDA2.1-style models (apart from the engine, which it only uses).

    python -m llada.train --preset tiny      # about a minute on a CPU: the whole pipeline at toy size
    python -m llada.train --preset code      # the Python-writing model, 11 minutes of training on one H100/H200

`recipes` names the presets and sizes them, `corpus` reads the installed Python source, `bpe` trains
the tokenizer, `data` lays out rows, `build` puts corpus, tokenizer, rows and model together,
`objective` is the M2T + T2T loss, `experts` the grouped-GEMM MoE used in training, `loop` trains,
`export` writes sharded safetensors, `logs` the loss files, `cli` the command's training half (its
evaluation and model card live in `llada/card/`, above training and evaluation).
"""
