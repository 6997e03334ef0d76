"""Command line: `python -m llada generate --model DIR --prompt TEXT [options]`.

Without --json it prints the generated text and a one-line summary; with --json one object with
output_ids, text, num_decode_forwards, num_cache_forwards, block_states_before_each_forward, tpf, tps,
drafts, edits, mbe_edits, inserts, deletes (the last two: LLaDA2.2's moves, 0 under the 2.1 rule). Explicit
thresholds override the mode's; the model's own presets (presets.json) define the modes when it ships them.
The rule follows the checkpoint (2.1: joint, 2.2: levenshtein); `--rule` overrides it.

`--poke STEP:POS:TOKEN` (repeatable) changes the text after decode forward STEP (1 = after the first): the
generated position POS (0 = the first) becomes TOKEN, a token's text, `#ID`, or `mask`; on a LLaDA2.2 run
TOKEN may also be `delete` or `insert` (the block closes the gap or opens a mask there); the decode goes on
from the changed text (`llada.loop`), and `--json` lists the pokes as `pokes`: [{step, pos, old, new}] (and
`kind` for a delete or insert).

`--prompts-file F` decodes one prompt per line of F in one batch (`--batch-size` rows share each
forward; every output is the one the prompt gets alone) and prints one result per line, in order. A
line is the prompt's text, or a JSON string (for a prompt with newlines), or comma-separated token
ids for a model without a tokenizer; blank lines are skipped. A line may also be a JSON object
{"prompt": TEXT or [ids], "pokes": ["STEP:POS:TOKEN", ...]}: that row's pokes, which stay in its row (its
result lists them as `pokes`, as `--poke` does for one prompt).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings


def _threshold(text: str) -> float | None:
    if text.lower() in ("off", "none"):
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1] or 'off', got {text!r}") from None


def _ids(text: str) -> list[int]:
    try:
        ids = [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated token ids such as 1,2,3, got {text!r}") from None
    if not ids:
        raise argparse.ArgumentTypeError("--prompt-ids is empty")
    return ids


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llada", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="decode one prompt")
    g.add_argument("--model", required=True, help="a model directory (config.json + safetensors) or a Hugging Face "
                                                  "repo id such as inclusionAI/LLaDA2.1-mini (downloaded into the "
                                                  "hub cache, resumable)")
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="prompt text (needs the model's tokenizer)")
    src.add_argument("--prompt-ids", type=_ids, help="prompt token ids, comma-separated")
    src.add_argument("--prompts-file", help="one prompt per line (text, a JSON string, or token ids), decoded "
                                            "as one batch; one result per line")
    g.add_argument("--batch-size", type=int, help="with --prompts-file: rows decoded at once (default: all)")
    g.add_argument("--mode", default="S", help="preset: S, Q, M2T, S_OFFICIAL, Q_OFFICIAL (the LLaDA2.1 values) "
                                               "or one of the model's presets.json (default S)")
    g.add_argument("--threshold", type=float, help="tau_mask: draft a mask when p > this")
    g.add_argument("--editing-threshold", type=_threshold, default=argparse.SUPPRESS,
                   help="tau_edit: edit a token when p > this; 0 edits every changed token; 'off' disables")
    g.add_argument("--no-edit", action="store_true", help="switch editing (T2T) off")
    g.add_argument("--max-post-steps", type=int)
    g.add_argument("--block-length", type=int)
    g.add_argument("--gen-length", type=int)
    g.add_argument("--eos-early-stop", action="store_true", default=None,
                   help="stop after a finished block holds EOS (default: the mode's setting)")
    g.add_argument("--mask-id", type=int, help="mask token id (default: from config or tokenizer)")
    g.add_argument("--eos-id", type=int, help="EOS token id (default: from config or tokenizer)")
    g.add_argument("--temperature", type=float, help="0 = greedy (default: the mode's)")
    g.add_argument("--top-k", type=int)
    g.add_argument("--top-p", type=float)
    g.add_argument("--seed", type=int)
    g.add_argument("--rule", choices=("joint", "levenshtein"),
                   help="the step rule (default: the checkpoint's; levenshtein needs a LLaDA2.2 checkpoint)")
    g.add_argument("--steps", type=int, help="levenshtein: steps the schedule spreads a block's masks over (32)")
    g.add_argument("--post-count", choices=("reset", "cumulative"), help="levenshtein: post-steps once a mask is "
                                                                        "back (docs/llada22.md; default reset)")
    g.add_argument("--escape", choices=("least_confident", "random"), help="levenshtein: the anti-loop escape's "
                                                                           "position (default least_confident)")
    g.add_argument("--mbe", action="store_true", help="Multi-Block Editing: earlier blocks stay editable")
    g.add_argument("--mbe-window", type=int, help="finished blocks kept editable by MBE (default 1)")
    g.add_argument("--no-cache", action="store_true", help="recompute the whole sequence every forward")
    g.add_argument("--chat", choices=("auto", "on", "off"), default="auto", help="wrap the prompt in the chat template")
    g.add_argument("--dtype", default="auto", choices=("auto", "float32", "float64", "bfloat16", "float16"),
                   help="auto: the checkpoint's dtype on CUDA, float32 on the CPU for models up to 1B parameters; "
                        "float64: the CPU only (exact comparisons, docs/distributed.md)")
    g.add_argument("--device", default="auto", help="cpu, cuda, cuda:N; auto: cuda when available")
    g.add_argument("--quantize", choices=("auto", "none", "fp8", "fp8-dense", "int8"), default="auto",
                   help="fp8 (GPU): routed experts, fp8-dense: also the dense linears; int8 (CPU): experts and "
                        "linear layers; auto: int8 on a CPU where the model fits only so, else as saved")
    g.add_argument("--engine", choices=("auto", "fast", "reference"), default="auto",
                   help="MoE kernels: fast (fused Triton, self-checked), reference (PyTorch); auto: fast on CUDA")
    g.add_argument("--poke", action="append", default=[], metavar="STEP:POS:TOKEN",
                   help="after decode forward STEP, write TOKEN (text, #ID or mask) at generated position POS, or "
                        "(LLaDA2.2 runs) delete or insert there; repeatable")
    g.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def decode_config(pipe, args):
    """The mode's settings with every option the user gave on top (the same rule as the API's)."""
    names = ("threshold", "max_post_steps", "eos_early_stop", "block_length", "gen_length", "mbe_window",
             "temperature", "top_k", "top_p", "seed", "rule", "steps", "post_count", "escape")
    explicit = {k: getattr(args, k) for k in names if getattr(args, k) is not None}
    if hasattr(args, "editing_threshold"):
        explicit["editing_threshold"] = args.editing_threshold
    if args.no_edit:
        explicit["editing_threshold"] = None
    if args.mbe:
        explicit["mbe"] = True
    if args.no_cache:
        explicit["use_cache"] = False
    return pipe.config(args.mode, **explicit)


def run_generate(args, ranks=None) -> list[dict]:
    import torch

    from .pipeline import Pipeline
    from .weights.checkpoint import CheckpointError

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if args.dtype == "float64" and torch.device(device).type != "cpu":
        raise ValueError(f"--dtype float64 runs on the CPU only (exact comparisons); this run is on {device}")
    try:
        pipe = Pipeline.load(args.model, dtype=None if args.dtype == "auto" else getattr(torch, args.dtype),
                             device=device, mask_id=args.mask_id, eos_id=args.eos_id,
                             quantize=None if args.quantize == "none" else args.quantize,
                             progress=ranks is None or ranks.lead, engine=args.engine, ranks=ranks)
    except (CheckpointError, ValueError) as err:
        if ranks is not None:
            ranks.agree(err)  # RankError on every rank: none goes on to a forward the others never join
        raise
    if ranks is not None:
        ranks.agree(None)  # every rank loaded its slice (a rank that failed has said so above)
    if args.batch_size is not None and args.prompts_file is None:
        raise ValueError("--batch-size needs --prompts-file")
    cfg = decode_config(pipe, args)
    chat = {"auto": None, "on": True, "off": False}[args.chat]
    pokes = [_poke(pipe, text) for text in args.poke]
    if args.prompts_file is not None:
        if pokes:
            raise ValueError('--poke decodes one prompt: with --prompts-file give a row\'s pokes in its line, '
                             '{"prompt": ..., "pokes": ["STEP:POS:TOKEN", ...]}')
        rows = [_line_row(pipe, line, n, chat) for n, line in _lines(args.prompts_file)]
        traces = pipe.generate_batch([ids for ids, _ in rows], cfg, max_batch=args.batch_size,
                                     pokes=[row_pokes for _, row_pokes in rows])
        out = [_result(pipe, t, with_pokes=bool(row_pokes)) for t, (_, row_pokes) in zip(traces, rows)]
    else:
        ids = args.prompt_ids if args.prompt_ids is not None else _encode(pipe, args.prompt, chat)
        out = [_result(pipe, pipe.generate(ids, cfg, pokes=pokes), with_pokes=bool(pokes))]
    if ranks is None or ranks.lead:
        print(pipe.engine.line(), file=sys.stderr)  # which MoE engine ran, and its self-check (llada.fast.engine)
    return out


def _result(pipe, trace, with_pokes: bool = False) -> dict:
    out = trace.summary()
    if pipe.tokenizer is not None:
        out["text"] = trace.text
    if with_pokes:  # only with --poke: without it the object is the one a batch row gets
        out["pokes"] = trace.poke_list()
    return out


def _poke(pipe, text, where: str = "--poke"):
    """A `--poke STEP:POS:TOKEN` (or a prompts-file row's poke) as a `Poke` (ValueError naming what is wrong
    and `where` it was given; the run checks the rest)."""
    from .records import read_poke

    try:
        return read_poke(text, pipe.poke_token)
    except ValueError as err:
        raise ValueError(f"{where} {text!r}: {err}") from None


def _lines(path: str) -> list[tuple[int, str]]:
    """(line number, line) of every non-blank line; ValueError when the file cannot be read or has none."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [(n, line.rstrip("\r\n")) for n, line in enumerate(f, 1) if line.strip()]
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"--prompts-file {path}: cannot read it ({err})") from None
    if not lines:
        raise ValueError(f"--prompts-file {path}: no prompt in it (one prompt per line)")
    return lines


def _line_row(pipe, line: str, n: int, chat) -> tuple[list[int], list]:
    """A line of a prompts file as (token ids, its row's pokes): a JSON object line carries pokes."""
    if not line.lstrip().startswith("{"):
        return _line_prompt(pipe, line, n, chat), []
    where = f"--prompts-file line {n}"
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"{where}: not a valid JSON object ({err})") from None
    if not isinstance(row, dict) or "prompt" not in row or not set(row) <= {"prompt", "pokes"}:
        raise ValueError(f'{where}: a JSON object line is {{"prompt": ..., "pokes": [...]}} ("pokes" optional)')
    prompt, specs = row["prompt"], row.get("pokes", [])
    if isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt) and prompt:
        ids = prompt
    elif isinstance(prompt, str) and pipe.tokenizer is not None:
        ids = _line_prompt(pipe, json.dumps(prompt), n, chat)
    else:
        raise ValueError(f'{where}: "prompt" must be text (a model with a tokenizer) or a list of token ids')
    if not isinstance(specs, list):
        raise ValueError(f'{where}: "pokes" must be a list of "STEP:POS:TOKEN" texts')
    return ids, [_poke(pipe, spec, f"{where}: poke") for spec in specs]


def _line_prompt(pipe, line: str, n: int, chat) -> list[int]:
    """The token ids of one line of a prompts file (see the module docstring)."""
    if pipe.tokenizer is None:
        try:
            return _ids(line)
        except argparse.ArgumentTypeError as err:
            raise ValueError(f"--prompts-file line {n}: {err} (the model has no tokenizer)") from None
    text = line
    if line.lstrip().startswith('"'):
        try:
            text = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"--prompts-file line {n}: not a valid JSON string ({err})") from None
        if not isinstance(text, str):
            raise ValueError(f"--prompts-file line {n}: a JSON line must be one string")
    try:
        return _encode(pipe, text, chat)
    except ValueError as err:
        raise ValueError(f"--prompts-file line {n}: {err}") from None


def _encode(pipe, text: str, chat) -> list[int]:
    if not text.strip():
        raise ValueError("the prompt is empty: type some text")
    return pipe.encode(text, chat=chat)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    ranks = _ranks(args)  # None outside torchrun
    try:
        out = _generate(args, ranks)
    finally:
        if ranks is not None:
            ranks.stop()
    if out is None:
        return 2
    for one in out if ranks is None or ranks.lead else ():  # rank 0 prints, once
        _print(one, args.json)
    return 0


def _ranks(args):
    """The torchrun ranks of this run (joined to their group), or None for one process."""
    import torch

    from .dist.group import Ranks

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    return Ranks.start(torch.device(device))


def _generate(args, ranks) -> list[dict] | None:
    """The results, or None after printing the error (rank 0 prints it; every rank agrees there was one)."""
    from .dist.group import RankError, lost_rank
    from .weights.checkpoint import CheckpointError

    error = None
    with warnings.catch_warnings():
        warnings.showwarning = _one_line  # e.g. a special id taken from the LLaDA2.x defaults
        try:
            out = run_generate(args, ranks)
        except (CheckpointError, ValueError, FloatingPointError, RankError) as err:  # FloatingPointError: NonFinite
            error = err
        except RuntimeError as err:  # a collective whose peer is gone: no rank is left to agree with
            if ranks is None or lost_rank(err) is None:
                raise
            print(f"error: {lost_rank(err)}", file=sys.stderr, flush=True)
            return None
    if ranks is not None:
        try:
            ranks.agree(error)  # every rank learns whether any rank failed
        except (RankError, RuntimeError) as err:  # RuntimeError: a rank gone (the group's own error)
            error = err
    if error is None:
        return out
    if ranks is None or ranks.lead:
        print(f"error: {error}", file=sys.stderr)
    return None


def _print(one: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(one))
        return
    print(one.get("text", " ".join(map(str, one["output_ids"]))))
    print(f"[{len(one['output_ids'])} tokens, {one['num_decode_forwards']} decode + {one['num_cache_forwards']} "
          f"cache forwards, TPF {one['tpf']:.2f}, TPS {one['tps']:.1f}, drafts {one['drafts']}, "
          f"edits {one['edits']}, MBE edits {one['mbe_edits']}, inserts {one['inserts']}, "
          f"deletes {one['deletes']}]")


def _one_line(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"warning: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
