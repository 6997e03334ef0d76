"""The evaluation decodes its items in batches: the same report as one item at a time (time aside)."""

from llada.eval import codetrack, harness
from llada.pipeline import Pipeline
from code_corpus import write_tree


def _strip(modes: dict) -> dict:
    return {m: {k: v for k, v in d.items() if k != "tps"} for m, d in modes.items()}


def test_batched_evaluation_equals_one_by_one(tiny_model_dir, tmp_path):
    pipe = Pipeline.load(tiny_model_dir)
    runs = [harness.evaluate(pipe, ["add", "rename"], n=5, seed=0, modes=["S", "Q", "S_MBE"], gen_length=16,
                             progress=False, batch=b) for b in (1, 3)]
    assert _strip(runs[0]["modes"]) == _strip(runs[1]["modes"])
    assert all(m["tps"] > 0 for r in runs for m in r["modes"].values())
    write_tree(tmp_path)
    items = codetrack.held_out_items(10, 0, [tmp_path])
    code = [codetrack.evaluate_code(pipe, items, modes=["S", "Q"], gen_length=16, progress=False, batch=b)
            for b in (1, 4)]
    assert _strip(code[0]["modes"]) == _strip(code[1]["modes"]) and code[0]["reference"] == code[1]["reference"]
