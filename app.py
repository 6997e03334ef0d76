"""LLaDA2.1 playground: watch a block-diffusion MoE model draft and edit, live and replayable.

    python app.py                          # the embedded model in assets/model
    python app.py --model DIR --model DIR2 # more local LLaDA2.x checkpoints in the model selector
    LLADA_MODELS=DIR:DIR2 python app.py    # the same through the environment

This file only wires: components and events live in ui/layout.py, renderers in ui/, the engine in llada/.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ui.layout import build_demo
from ui.models import Models, model_dirs

CSS = Path(__file__).resolve().parent / "assets" / "style.css"
QUEUE = {"max_size": 64, "default_concurrency_limit": 8}
THEME = "soft"


models = Models(model_dirs())  # assets/model and $LLADA_MODELS; loaded on first use, not here
demo = build_demo(models)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", default=[], help="a local LLaDA2.x checkpoint dir (repeatable)")
    parser.add_argument("--host", default=None, help="server name (default: Gradio's, or $GRADIO_SERVER_NAME)")
    parser.add_argument("--port", type=int, default=None, help="server port (default: Gradio's)")
    args = parser.parse_args(argv)
    offered, app = (Models(model_dirs(args.model)), None) if args.model else (models, demo)
    app = app or build_demo(offered)
    offered.warm()  # load the default model in the background: the first run then starts at once
    app.queue(**QUEUE).launch(server_name=args.host, server_port=args.port, css_paths=[CSS], theme=THEME)


if __name__ == "__main__":
    main()
