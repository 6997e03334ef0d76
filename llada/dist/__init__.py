"""One model across ranks on `torch.distributed` (gloo on CPUs, NCCL on GPUs), launched by `torchrun`.

* `llada.dist.group`: the ranks of a run (`Ranks`), started from torchrun's environment; rank 0's decisions
  shared with every rank after each forward (`Ranks.decided`); errors agreed on, so that every rank exits.
* `llada.dist.experts`: expert parallel MoE layers (`ShardedExperts`): each rank holds a slice of the routed
  experts, runs them on the replicated tokens, and one all-reduce sums the slices.

docs/distributed.md says what runs where, the command, and what is exact.
"""
