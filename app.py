"""LLaDA2.1 playground: watch a block-diffusion MoE model draft and edit, live and replayable.

    python app.py                          # the embedded model in assets/model (+ preloaded hub models)
    python app.py --model DIR --model DIR2 # more local LLaDA2.x checkpoints in the model selector
    python app.py --model inclusionAI/LLaDA2.1-mini   # a hub repo: downloaded into the hub cache first
                                           # (on a CPU it is offered in int8 where only int8 fits)
    LLADA_MODELS=DIR:DIR2 python app.py    # the same through the environment
    torchrun --nproc-per-node N app.py [--model DIR]   # one model split across N ranks: rank 0 serves the
                                           # page, the others their experts (ui/group.py)

On a ZeroGPU Space every offered model is loaded here, at start, in the main process, and moved to
`cuda` (ZeroGPU's pattern; see ui/models.py); elsewhere the default model loads in the background.
This file only launches: the page is ui/demo.py (each tab in its folder of ui/), the engine is llada/.
"""

from __future__ import annotations

import llada  # noqa: F401  (first: its OpenMP setting must come before torch is loaded, see llada/__init__.py)

try:  # first: on ZeroGPU, `spaces` patches torch and refuses to start once CUDA has been touched
    import spaces  # noqa: F401
except ImportError:  # not a Space: nothing to patch
    pass

import argparse  # noqa: E402
import sys  # noqa: E402


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", action="append", default=[],
                   help="a LLaDA2.x checkpoint dir or hub repo id, downloaded first (repeatable)")
    p.add_argument("--host", default=None, help="server name (default: Gradio's, or $GRADIO_SERVER_NAME)")
    p.add_argument("--port", type=int, default=None, help="server port (default: Gradio's)")
    return p


if __name__ == "__main__" and {"-h", "--help"} & set(sys.argv[1:]):
    parser().parse_args()  # prints the help and exits before the page is built (seconds saved)

from ui.demo import LOOK, build_demo  # noqa: E402
from ui.group import in_group, serve_group  # noqa: E402
from ui.models import Models, cli_models, model_dirs  # noqa: E402
from ui.sessions import queue  # noqa: E402

QUEUE = {"max_size": 64, "default_concurrency_limit": 8}


def offered(cli: list[str] | None = None) -> Models:
    """The offered models; on ZeroGPU loaded now (resident for every GPU call), elsewhere on first use."""
    models = Models(model_dirs(cli))
    if models.rt.kind == "zerogpu":
        models.load_resident()
    return models


models = None if in_group() else offered()  # a group's ranks load their one model together (ui/group.py)
demo = None if models is None else build_demo(models)


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    from llada.weights.checkpoint import CheckpointError

    try:
        cli = cli_models(args.model)
    except CheckpointError as err:  # no network, a refused download, ...
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    if in_group():  # under torchrun: rank 0 serves the page, the other ranks their experts
        sys.exit(serve_group(cli, lambda held: serve(held, build_demo(held), args)))
    chosen, app = (offered(cli), None) if cli else (models, demo)
    if chosen.rt.kind != "zerogpu":
        chosen.warm()  # load the default model in the background: the first run then starts at once
    serve(chosen, app or build_demo(chosen), args)


def serve(chosen: Models, app, args) -> None:
    """Print the model notes, then serve `app` until the server closes."""
    for line in chosen.note().splitlines():
        print(f"[app] {line}", flush=True)
    queue(app, **QUEUE).launch(server_name=args.host, server_port=args.port, **LOOK)


if __name__ == "__main__":
    main()
