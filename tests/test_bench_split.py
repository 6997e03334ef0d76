"""`python -m llada.bench split`: a forward's time as products and the rest, and the switch it measures with."""

import json

import pytest
import torch

from llada import model as model_module
from llada import row_exact
from llada.bench.__main__ import main
from llada.bench.batch import workload
from llada.bench.split import first_windows, products_skipped


def test_split_bench_writes_its_report(tmp_path, capsys):
    out = tmp_path / "split.json"
    assert main(["split", "--sizes", "1", "2", "--repeats", "2", "--inner", "2", "--threads", "1",
                 "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["bench"] == "split" and [s["batch"] for s in report["sizes"]] == [1, 2]
    for size in report["sizes"]:
        assert size["tokens"] == 32 * size["batch"] and size["forward_ms"] > 0 and size["other_ms"] > 0
        assert abs(size["forward_ms"] - size["products_ms"] - size["other_ms"]) < 0.01
    assert report["sizes"][0]["products_vs_first"] == 1.0 and "products" in capsys.readouterr().out


def test_skipping_the_products_changes_the_forward_and_is_undone():
    torch.manual_seed(0)
    model, prompts, cfg, mask_id, eos_id = workload("embedded", 1, "S", torch.device("cpu"))
    before = model_module.tile_product, row_exact.tile_product
    with torch.inference_mode():
        real = model.forward_rows(first_windows(model, prompts, cfg, mask_id, eos_id))[0]
        with products_skipped():
            skipped = model.forward_rows(first_windows(model, prompts, cfg, mask_id, eos_id))[0]
        again = model.forward_rows(first_windows(model, prompts, cfg, mask_id, eos_id))[0]
    assert (model_module.tile_product, row_exact.tile_product) == before
    assert torch.equal(real, again) and not torch.equal(real, skipped)
    assert torch.count_nonzero(skipped) == 0  # the output layer is a product too


def test_split_bench_refuses_a_bad_count():
    with pytest.raises(SystemExit):
        main(["split", "--repeats", "0"])
