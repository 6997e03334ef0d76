"""The floor plan, read from the imports: no import circle under llada/ or ui/, and the rooms stay apart.

Every `import` statement counts, wherever it is (module level, inside a function, under
`if __name__ == "__main__"`): a circle closed only by a command-line entry point is still a circle.
The rules (README, "Layout"): the engine (`llada/`) never imports `ui`, `gradio` or `plotly`; the tab
folders `ui/playground/`, `ui/learn/` and `ui/explorer/` never import each other; the renderers in
`ui/render/` are pure (no `gradio`, no tab folder); the shared rooms of `ui/` import no tab folder; the
measurements in `ui/bench/` drive the app, so they may import the tabs, and nothing outside them imports them; training
(`llada/train/`) and evaluation (`llada/eval/`)
both read their tasks and code from `llada/data/` and never import each other, with no exception: the
training command's last steps (evaluate the saved model, write its card) live above both, in `llada/card/`.
The engine is a flat core (`llada/*.py`, at most 16 modules) with two wings: the fast paths (`llada/fast/`:
engine, fused layers, graphs, quantization, kernels) and the weights (`llada/weights/`: checkpoints, shards,
FP8 files, replicas, the tokenizer). The wings never import the decode loop (`llada.loop`), its drivers
(`llada.decode`) or the pipeline; the kernels never import the rest of their wing (engine, layers, graphs,
quantize sit above them).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("llada", "ui")
TABS = ("ui.playground", "ui.learn", "ui.explorer")
WIRING = {"ui.demo", "app"}  # the only modules that put the tabs together
WINGS = ("llada.fast", "llada.weights")
ABOVE_WINGS = ("llada.loop", "llada.decode", "llada.pipeline")
ABOVE_KERNELS = ("llada.fast.engine", "llada.fast.layers", "llada.fast.graphs", "llada.fast.quantize")
MAX_CORE_MODULES = 16
BENCH = "ui.bench"  # measurements of the app: they may import the tabs, and the app never imports them


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    found = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    found["app"] = ROOT / "app.py"
    return found


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules that `name` imports (a `from pkg import x` counts pkg.x when x is a module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            out.add(base)
            out |= {f"{base}.{alias.name}" for alias in node.names}
    return {m for m in out if m in known and m != name}


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imported(name, path, set(mods)) for name, path in mods.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def tab_of(name: str) -> str | None:
    return next((t for t in TABS if name == t or name.startswith(t + ".")), None)


def in_package(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def layer_rule(name: str, target: str) -> str | None:
    """What is wrong with `name` importing `target` between llada/data, llada/train and llada/eval."""
    if in_package(name, "llada.data") and (in_package(target, "llada.train") or in_package(target, "llada.eval")):
        return f"{name} (data) imports {target}: llada/data imports neither training nor evaluation"
    if in_package(name, "llada.eval") and in_package(target, "llada.train"):
        return f"{name} (evaluation) imports {target}: shared data lives in llada/data"
    if in_package(name, "llada.train") and in_package(target, "llada.eval"):
        return f"{name} (training) imports {target}: shared data lives in llada/data"
    return wing_rule(name, target)


def wing_rule(name: str, target: str) -> str | None:
    """What is wrong with `name` importing `target` between the core and its wings."""
    wing = next((w for w in WINGS if in_package(name, w)), None)
    if wing and any(in_package(target, above) for above in ABOVE_WINGS):
        return f"{name} ({wing} wing) imports {target}: the wings sit below the decode loop and the pipeline"
    if in_package(name, "llada.fast.kernels") and any(in_package(target, above) for above in ABOVE_KERNELS):
        return f"{name} (kernels) imports {target}: the kernels sit below the rest of llada/fast"
    return None


def broken_rules(edges: dict[str, set[str]], third_party: dict[str, set[str]]) -> list[str]:
    out = []
    for name, targets in edges.items():
        tab = tab_of(name)
        for target in sorted(targets):
            other = tab_of(target)
            if name.startswith("llada") and target.startswith("ui"):
                out.append(f"{name} (engine) imports {target}")
            elif layer_rule(name, target):
                out.append(layer_rule(name, target))
            elif in_package(target, BENCH) and not in_package(name, BENCH):
                out.append(f"{name} imports {target}: the measurements in ui/bench/ are not part of the app")
            elif other and other != tab and name not in WIRING and not in_package(name, BENCH):
                out.append(f"{name} imports {target}: only ui/demo.py puts the tabs together")
        banned = {"gradio", "plotly"} if name.startswith("llada") else {"gradio"} if name.startswith("ui.render") \
            else set()
        out += [f"{name} imports {lib}" for lib in sorted(third_party[name] & banned)]
    return out


def third_party_imports() -> dict[str, set[str]]:
    out = {}
    for name, path in modules().items():
        tops = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                tops |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                tops.add(node.module.split(".")[0])
        out[name] = tops
    return out


def test_no_import_circle_under_llada_or_ui():
    assert circles(graph()) == []


def test_the_rooms_keep_to_the_floor_plan():
    assert broken_rules(graph(), third_party_imports()) == []


def test_the_tab_folders_and_the_renderers_exist():
    mods = modules()
    for room in (*TABS, "ui.render", "ui.frame", "ui.demo"):
        assert room in mods, f"{room} is missing"
    assert sum(name.startswith(TABS) for name in mods) >= 10  # the tabs' modules live in their folders


# ---- the checks themselves bite ----------------------------------------------------------------------------

def test_a_circle_is_found():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(edges) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("edge, words", [(("ui.learn.view", "ui.playground.run"), "only ui/demo.py"),
                                         (("ui.frame", "ui.explorer.view"), "only ui/demo.py"),
                                         (("ui.render.canvas", "ui.learn.lessons"), "only ui/demo.py"),
                                         (("llada.decode", "ui.frame"), "(engine) imports"),
                                         (("ui.playground.run", "ui.bench.soak"), "not part of the app"),
                                         (("ui.demo", "ui.bench"), "not part of the app"),
                                         (("llada.bench.decode", "ui.bench.soak"), "(engine) imports"),
                                         (("llada.train.data", "llada.eval.harness"), "(training) imports"),
                                         (("llada.train.loop", "llada.eval"), "(training) imports"),
                                         (("llada.eval.harness", "llada.train.loop"), "(evaluation) imports"),
                                         (("llada.data.tasks", "llada.eval.tally"), "(data) imports"),
                                         (("llada.data.code", "llada.train.corpus"), "(data) imports"),
                                         (("llada.fast.engine", "llada.decode"), "(llada.fast wing) imports"),
                                         (("llada.weights.checkpoint", "llada.pipeline"), "(llada.weights wing)"),
                                         (("llada.fast.graphs", "llada.loop"), "below the decode loop"),
                                         (("llada.fast.kernels.router", "llada.fast.engine"), "(kernels) imports")])
def test_a_broken_rule_is_found(edge, words):
    source, target = edge
    edges = {source: {target}, target: set()}
    (problem,) = broken_rules(edges, {source: set(), target: set()})
    assert words in problem


def core_modules() -> list[str]:
    return sorted(p.stem for p in (ROOT / "llada").glob("*.py"))


def test_the_core_is_flat_and_small_and_the_wings_hold_the_rest():
    core = core_modules()
    assert len(core) <= MAX_CORE_MODULES, f"{len(core)} modules directly under llada/: {core}"
    mods = modules()
    assert {"llada.loop", "llada.decode", "llada.rule", "llada.model"} <= set(mods)
    assert {"llada.fast.engine", "llada.fast.graphs", "llada.fast.kernels", "llada.weights.checkpoint"} <= set(mods)
    assert "llada.bench.census" in mods


def from_imports(path: Path, name: str):
    """(absolute module, alias names) of each `from ... import` in the file of module `name`."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            yield base, [a.name for a in node.names]


def reexported_model_names(files: dict[str, Path]) -> list[str]:
    """Names imported from llada.model that llada/model.py does not define itself."""
    tree = ast.parse((ROOT / "llada" / "model.py").read_text(encoding="utf-8"))
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    return [f"{name}: {alias}" for name, path in files.items() for base, aliases in from_imports(path, name)
            if base == "llada.model" for alias in aliases if alias not in defined]


def test_the_model_file_reexports_nothing():
    """Whoever wants RMSNorm, the KV cache or the row products imports them from their own modules."""
    files = modules() | {f"tests.{p.stem}": p for p in (ROOT / "tests").glob("*.py")}
    assert reexported_model_names(files) == []


def test_a_reexport_is_found(tmp_path):
    path = tmp_path / "t.py"
    path.write_text("from llada.model import LLaDA2MoE, RMSNorm\n")
    assert reexported_model_names({"tests.t": path}) == ["tests.t: RMSNorm"]


def test_training_reads_its_data_from_llada_data():
    edges = graph()
    train = {t for name, targets in edges.items() if in_package(name, "llada.train") for t in targets}
    assert {"llada.data.tasks", "llada.data.code", "llada.data.sources"} <= train
    assert not any(in_package(t, "llada.eval") for name in edges if in_package(name, "llada.train")
                   for t in edges[name])


def test_the_card_sits_above_training_and_evaluation():
    edges = graph()
    assert {"llada.train.cli", "llada.eval.harness", "llada.card.write"} <= edges["llada.card.command"]
    assert "llada.card.command" in edges["llada.train.__main__"]  # `python -m llada.train` ends with the card
    assert not any(in_package(t, "llada.card") for name in edges for t in edges[name]
                   if in_package(name, "llada.eval") or in_package(name, "llada.data"))


def test_the_measurements_may_drive_the_tabs():
    edges = {"ui.bench.overhead": {"ui.playground.run", "ui.bench.soak"}, "ui.bench.soak": set(),
             "ui.playground.run": set()}
    assert broken_rules(edges, {name: set() for name in edges}) == []
    assert "ui.playground.run" in graph()["ui.bench.overhead"]  # the rule above is the one the code needs


def test_a_renderer_importing_gradio_is_found():
    (problem,) = broken_rules({"ui.render.canvas": set()}, {"ui.render.canvas": {"gradio", "html"}})
    assert problem == "ui.render.canvas imports gradio"


def test_relative_imports_resolve(tmp_path):
    pkg = tmp_path / "ui" / "learn"
    pkg.mkdir(parents=True)
    (pkg / "view.py").write_text("from ..playground import run\nfrom . import lessons\nfrom .. import frame\n")
    known = {"ui.playground", "ui.playground.run", "ui.learn.lessons", "ui.frame", "ui"}
    got = imported("ui.learn.view", pkg / "view.py", known)
    assert got == {"ui.playground", "ui.playground.run", "ui.learn.lessons", "ui.frame", "ui"}
