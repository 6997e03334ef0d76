"""One model across ranks on `torch.distributed` (gloo on CPUs, NCCL on GPUs), launched by `torchrun`.

* `llada.dist.group`: the ranks of a run (`Ranks`), started from torchrun's environment; rank 0's decisions
  shared with every rank after each forward (`Ranks.decided`); errors agreed on, so that every rank exits.
* `llada.dist.experts`: expert parallel MoE layers (`ShardedExperts`): each rank holds a slice of the routed
  experts, runs them on the replicated tokens, and one all-reduce sums the slices.
* `llada.dist.serve`: rank 0 drives alone (`Lead`) while the other ranks serve its experts (`serve_experts`).
* `llada.dist.share`: evaluations across workers: each rank runs the whole model on its share of the items.
* `llada.dist.size`: `python -m llada.dist.size`, the flash models across GPUs on paper.

docs/distributed.md says what runs where, the command, and what is exact.
"""
