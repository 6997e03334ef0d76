"""The playground (Gradio), in rooms whose imports point down:

    ui/demo.py          the page: the three tabs side by side, wired together (app.py launches it)
    ui/playground/      the Playground tab: controls, a run's view, replay, S vs Q, the API endpoints
    ui/learn/           the Learn tab: recorded lessons, their narration, the recorder and lesson search
    ui/explorer/        the Score | TPF tab: sweeps, the Pareto chart, loading a point into the playground
    ui/render/          pure renderers: records in, HTML, text, tables and figures out (no Gradio)
    ui/bench/           measurements of the app: memory soak, scrub timing, the stream's overhead
    ui/frame.py         what every tab's events share: frames, queue settings, inputs by name, problems
    ui/settings.py      a run's settings: checked inputs, the UI's mode label and the engine's DecodeConfig
    ui/runs.py          live runs of the engine within the budget (llada.budget)
    ui/models.py        the offered models, loaded on first use (or resident on ZeroGPU)
    ui/export.py        a run's trace as JSON and a standalone HTML replay

The tab folders never import each other (tests/test_floor_plan.py reads the imports): what one tab
sets in another (the explorer loads a point into the playground) is wired by ui/demo.py.
"""

from pathlib import Path

ASSETS = Path(__file__).resolve().parents[1] / "assets"
