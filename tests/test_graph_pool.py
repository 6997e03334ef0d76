"""Step graphs (KV cache + recorded graphs) kept on the model between decoding runs (`llada.fast.graphs.step_graphs`).

On CPU the static path runs the same StepGraphs eagerly, so what is kept, lent and dropped is checked
here; on CUDA the kept graphs replay from the first forward of the next run.
"""

import gc

import torch

from llada.fast import graphs
from llada.decode import generate
from llada.fast.engine import use_engine
from golden_cases import case_config


def _run(model, golden, case):
    trace = generate(model, case["prompt_ids"], case_config(case), golden["mask_id"], golden["eos_id"],
                     forward="static")
    gc.collect()  # the run's finalizer hands its StepGraphs back
    return trace


def test_a_run_reuses_the_previous_runs_graphs_and_cache(ref_model, golden):
    graphs.forget_step_graphs(ref_model)
    case = golden["generate"][0]
    first = _run(ref_model, golden, case)
    pool = graphs._pool(ref_model)
    assert len(pool) == 1
    kept = next(iter(pool.values()))
    assert kept.entries  # the window lengths seen by the first run
    with torch.inference_mode():  # stale values must not leak into the next run
        kept.cache.k.fill_(float("nan")), kept.cache.v.fill_(float("nan"))
    second = _run(ref_model, golden, case)
    assert next(iter(graphs._pool(ref_model).values())) is kept  # lent to the second run, kept again
    assert second.output_ids == first.output_ids == case["output_ids"]
    assert second.block_states_before_each_forward() == first.block_states_before_each_forward()


def test_a_kept_one_is_lent_to_one_run_at_a_time(ref_model):
    graphs.forget_step_graphs(ref_model)
    a = graphs.step_graphs(ref_model, 16, 4, capture=False)
    graphs.keep_step_graphs(ref_model, a)
    assert graphs.step_graphs(ref_model, 16, 4, capture=False) is a
    assert graphs.step_graphs(ref_model, 16, 4, capture=False) is not a  # a is out: the next run gets its own
    assert graphs.step_graphs(ref_model, 24, 4, capture=False).cache.capacity == 24  # another shape, another one


def test_the_pool_is_bounded_least_recent_dropped(ref_model):
    graphs.forget_step_graphs(ref_model)
    made = [graphs.step_graphs(ref_model, 8 * (n + 1), 4, capture=False) for n in range(graphs.POOL_SIZE + 2)]
    for g in made:
        graphs.keep_step_graphs(ref_model, g)
    kept = list(graphs._pool(ref_model).values())
    assert kept == made[-graphs.POOL_SIZE:]


def test_swapping_the_engine_forgets_them(ref_model):
    graphs.keep_step_graphs(ref_model, graphs.step_graphs(ref_model, 16, 4, capture=False))
    use_engine(ref_model, "reference")
    assert graphs._pool(ref_model) == {}
