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


def _rows_per_forward(pipe, monkeypatch) -> list[int]:
    """Rows of every row-batched model call from now on (appended as they run)."""
    calls: list[int] = []
    real = pipe.model.forward_rows

    def counted(rows, *args, **kwargs):
        calls.append(len(rows))
        return real(rows, *args, **kwargs)

    monkeypatch.setattr(pipe.model, "forward_rows", counted)
    return calls


def _rows_per_step(monkeypatch) -> list[int]:
    """Rows served by every step of a BatchDecoder from now on (a memo may leave the model fewer to compute)."""
    from llada.decode import batch

    calls: list[int] = []
    real = batch.run_forwards

    def counted(runs, *args, **kwargs):
        calls.append(len(runs))
        return real(runs, *args, **kwargs)

    monkeypatch.setattr(batch, "run_forwards", counted)
    return calls


def test_a_sweeps_forwards_stay_full_across_cells(tiny_model_dir, monkeypatch):
    """The next cell's decodes join as a cell's last ones finish: every forward is BATCH rows wide until
    the sweep's last decodes drain, however long the decode being read takes (rows that its forward memo
    answers included: the model computes the others)."""
    from llada.eval import sweep as sw

    pipe = Pipeline.load(tiny_model_dir)
    spec = sw.SweepSpec((0.5, 0.9), (None, 0.0), (False,), (), ("add", "sort"), 3, 0, "eval", 8, 16)
    cfgs = [cell.config(pipe, spec.gen_length) for cell in spec.cells(pipe.presets)]
    items = [it for task_items in spec.items().values() for it in task_items]
    longest = max(pipe.generate(pipe.encode(it.prompt), cfg).forwards for cfg in cfgs for it in items)
    warm_up = pipe.generate(pipe.encode(items[0].prompt), cfgs[0]).forwards  # the sweep's first decode, alone
    monkeypatch.setattr(sw, "BATCH", 4)
    calls = _rows_per_step(monkeypatch)
    last = list(sw.sweep(pipe, spec, budget=sw.Budget(forwards=256, seconds=600.0)))[-1]
    assert last.status == "done" and len(last.points) == 4
    decodes = calls[warm_up:]
    assert calls[:warm_up] == [1] * warm_up and sum(decodes) > 4 * longest
    assert all(n == 4 for n in decodes[:len(decodes) - longest]), decodes


def test_an_evaluations_forwards_stay_full_across_tasks_and_modes(tiny_model_dir, monkeypatch):
    from llada.data.tasks import eval_items

    pipe = Pipeline.load(tiny_model_dir)
    cfgs = [harness.mode_config(pipe, m, 16) for m in ("S", "Q")]
    longest = max(pipe.generate(pipe.encode(it.prompt), cfg).forwards
                  for cfg in cfgs for task in ("add", "sort") for it in eval_items(task, 5, 0, "eval"))
    warm_up = pipe.generate(pipe.encode("1+1="), harness.mode_config(pipe, "S", 16)).forwards
    calls = _rows_per_step(monkeypatch)  # rows served: the memo leaves the model fewer to compute
    report = harness.evaluate(pipe, ["add", "sort"], n=5, seed=0, modes=["S", "Q"], gen_length=16, progress=False,
                              batch=3)
    assert set(report["modes"]) == {"S", "Q"}
    decodes = calls[warm_up:]
    assert sum(decodes) > 3 * longest
    assert all(n == 3 for n in decodes[:len(decodes) - longest]), decodes


def test_an_evaluation_with_its_memo_reports_what_one_without_it_does(tiny_model_dir, monkeypatch):
    """Item by item with the forward memo, or mode by mode without it (the order before the memo): the same
    report but TPS, and the model computes fewer rows than the decodes are served."""
    from llada.eval import batched

    pipe = Pipeline.load(tiny_model_dir)
    modes, tasks = ["S", "Q", "M2T", "S_noedit", "S_MBE"], ["add", "sort"]
    computed = _rows_per_forward(pipe, monkeypatch)
    served = _rows_per_step(monkeypatch)
    with_memo = harness.evaluate(pipe, tasks, n=4, seed=0, modes=modes, gen_length=16, progress=False, batch=6)
    memo_rows = (sum(computed), sum(served))
    computed.clear(), served.clear()
    monkeypatch.setattr(harness, "item_major", lambda items, modes: [
        (mode, task, item) for mode in modes for task, task_items in items.items() for item in task_items])
    monkeypatch.setattr(harness, "decode_texts", lambda *a, **k: batched.decode_texts(*a, **k, memo_bytes=0))
    without = harness.evaluate(pipe, tasks, n=4, seed=0, modes=modes, gen_length=16, progress=False, batch=6)
    assert _strip(with_memo["modes"]) == _strip(without["modes"])
    assert sum(computed) == sum(served) == memo_rows[1] and memo_rows[0] < memo_rows[1], (memo_rows, sum(served))


def test_an_evaluation_queues_an_items_modes_side_by_side():
    items = {"add": ["a0", "a1"], "sort": ["s0"]}
    assert harness.item_major(items, ["S", "Q"]) == [("S", "add", "a0"), ("Q", "add", "a0"), ("S", "add", "a1"),
                                                     ("Q", "add", "a1"), ("S", "sort", "s0"), ("Q", "sort", "s0")]
