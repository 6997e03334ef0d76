"""The fast engine on the static-shape forward (`forward="static"`) decodes a golden trace as the reference does.

Without CUDA its kernels run under the Triton interpreter: minutes on 2 shared cores, so a file of its own
(parallel workers take whole files) beside tests/test_graphs.py.
"""

import pytest
import torch

from llada.decode import generate
from llada.fast import kernels
from llada.fast.engine import use_engine
from llada.weights.checkpoint import load_model
from golden_cases import case_config


@pytest.mark.skipif(not kernels.triton_available(), reason="the fast engine needs the Triton kernels")
def test_fast_engine_static_path_reproduces_the_golden_trace(fixture_dir, golden):
    """The static forward's fused kernels (q/k/v into the cache, the window's mask, silu * up, the k-sum adding the
    shared expert and the residual) decide every step as the reference does."""
    model = load_model(fixture_dir).to("cuda" if torch.cuda.is_available() else "cpu")
    use_engine(model, "fast", check=False)
    case = golden["generate"][6]  # 10 forwards: MBE-free, EOS early stop, prompt and decode windows
    r = generate(model, case["prompt_ids"], case_config(case), golden["mask_id"], golden["eos_id"], forward="static")
    assert r.output_ids == case["output_ids"] and r.num_decode_forwards == case["num_forwards"]
    assert r.block_states_before_each_forward() == case["block_states_before_each_forward"]
