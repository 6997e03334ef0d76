"""`python -m llada.bench split`: a forward's time as products and the rest, and the switch it measures with."""

import json

import pytest
import torch

from llada import model as model_module
from llada import row_exact
from llada.bench.__main__ import main
from llada.bench.batch import workload
from llada.bench.split import first_windows, product_flops, products_skipped, recorded_routes, routes_kept


def test_split_bench_writes_its_report(tmp_path, capsys):
    out = tmp_path / "split.json"
    assert main(["split", "--sizes", "1", "2", "--rows", "4", "--repeats", "2", "--inner", "2", "--threads", "1",
                 "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["bench"] == "split" and [s["batch"] for s in report["sizes"]] == [1, 2]
    for size in report["sizes"]:
        assert size["tokens"] == 32 * size["batch"] and size["forward_ms"] > 0 and size["other_ms"] > 0
        assert abs(size["forward_ms"] - size["products_ms"] - size["other_ms"]) < 0.01
        assert size["products_gflop"] > 0 and size["products_gflop_per_s"] > 0
    assert report["sizes"][1]["products_gflop"] > report["sizes"][0]["products_gflop"]
    assert report["large_product_gflop_per_s"] > 0
    assert report["sizes"][0]["products_vs_first"] == 1.0 and "GFLOP/s" in capsys.readouterr().out


def test_skipping_the_products_changes_the_forward_and_is_undone():
    torch.manual_seed(0)
    model, prompts, cfg, mask_id, eos_id = workload("embedded", 1, "S", torch.device("cpu"))
    before = row_exact.cpu_product, row_exact.tile_product
    with torch.inference_mode():
        real = model.forward_rows(first_windows(model, prompts, cfg, mask_id, eos_id))[0]
        with products_skipped():
            skipped = model.forward_rows(first_windows(model, prompts, cfg, mask_id, eos_id))[0]
        again = model.forward_rows(first_windows(model, prompts, cfg, mask_id, eos_id))[0]
    assert (row_exact.cpu_product, row_exact.tile_product) == before
    assert torch.equal(real, again) and not torch.equal(real, skipped)
    assert torch.count_nonzero(skipped) == 0  # the output layer is a product too


@pytest.mark.parametrize("argv", [["--repeats", "0"], ["--sizes", "8", "--rows", "4"]])
def test_split_bench_refuses_a_bad_count(argv):
    with pytest.raises(SystemExit):
        main(["split", *argv])


def test_skipped_products_keep_the_real_forwards_experts():
    """With the products skipped the hidden states are zeros, yet every MoE layer sends the same rows to the
    same experts as the real forward (again on a second forward), and the router is put back after."""
    model, prompts, cfg, mask_id, eos_id = workload("embedded", 4, "S", torch.device("cpu"))
    rows = first_windows(model, prompts, cfg, mask_id, eos_id)
    seen, real_tiled, real_router = [], model_module.Experts._tiled, model_module.Router.forward

    def tiled(self, x, order, counts, K):
        seen.append(counts)
        return real_tiled(self, x, order, counts, K)

    model_module.Experts._tiled = tiled
    try:
        routes = recorded_routes(model, rows)
        seen.clear()
        with torch.inference_mode():
            model.forward_rows(rows)
            real = list(seen)
            seen.clear()
            with products_skipped():
                model.forward_rows(rows)
            alone = list(seen)
            seen.clear()
            with products_skipped(), routes_kept(routes):
                model.forward_rows(rows)
                model.forward_rows(rows)
    finally:
        model_module.Experts._tiled = real_tiled
    assert len(routes) == len(real) == 3 and seen == real + real
    assert alone != real  # zeros alone route every token alike
    assert model_module.Router.forward is real_router


def test_product_flops_count_the_projections_of_a_forward():
    """One row of 32 tokens: the count holds the dense layers' and output layer's products exactly (2 N K O
    each) and the experts' on top, and leaves the model's products as they were."""
    model, prompts, cfg, mask_id, eos_id = workload("embedded", 1, "S", torch.device("cpu"))
    c = model.config
    before = row_exact.cpu_product, row_exact.tile_product
    flops = product_flops(model, first_windows(model, prompts, cfg, mask_id, eos_id))
    assert (row_exact.cpu_product, row_exact.tile_product) == before
    N, H = 32, c.hidden_size
    qkv = H * (c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim
    attention = 2 * N * (qkv + c.num_attention_heads * c.head_dim * H) * c.num_hidden_layers
    dense_ffn = 2 * N * 3 * H * c.intermediate_size
    moe_layers = c.num_hidden_layers - c.first_k_dense_replace
    shared = 2 * N * 3 * H * c.moe_intermediate_size * c.num_shared_experts * moe_layers
    router = 2 * N * H * c.num_experts * moe_layers
    known = attention + c.first_k_dense_replace * dense_ffn + shared + 2 * N * H * c.vocab_size
    experts = flops - known - router
    per_pair = 2 * 3 * H * c.moe_intermediate_size  # gate, up and down of one (token, expert) pair
    assert experts >= N * c.num_experts_per_tok * per_pair * moe_layers and experts % per_pair == 0
