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


def test_a_sweep_does_not_depend_on_its_batch(tiny_model_dir, monkeypatch):
    from llada.eval import sweep as sw

    pipe = Pipeline.load(tiny_model_dir)
    spec = sw.SweepSpec((0.5, 0.9), (None, 0.0), (False, True), (), ("add", "sort"), 3, 0, "eval", 8, 16)
    timing = {"tps", "seconds"}
    points = []
    for batch in (1, 4):
        monkeypatch.setattr(sw, "BATCH", batch)
        last = list(sw.sweep(pipe, spec, budget=sw.Budget(forwards=256, seconds=600.0)))[-1]  # no cut by time
        assert last.status == "done"
        points.append([{k: v for k, v in p.to_dict().items() if k not in timing} for p in last.points])
    assert points[0] == points[1] and len(points[0]) == 6  # MBE with editing off is no cell
