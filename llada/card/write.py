"""The model card (README.md of a trained model directory), written from what the run measured.

Every number comes from training.json (the run's summary), eval.json (the evaluation report) and the
samples generated after training; nothing is typed in by hand. Sections: what the model is (sizes,
checkpoint files), how it was trained (the command, the device, time, the corpus in files and tokens,
the loss plot), the full Score | TPF tables (tasks and code), the presets it ships, ten unedited code
samples, and how to reproduce the numbers.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..eval.codetrack import format_code_table
from ..eval.harness import format_table
from ..train.logs import plot_curves


def _m(n: int) -> str:
    return f"{n / 1e6:.1f} M"


def _shards(out: Path) -> str:
    shards = sorted(out.glob("model-*-of-*.safetensors"))
    sizes = [p.stat().st_size for p in shards]
    return (f"{len(shards)} bf16 safetensors shards + `model.safetensors.index.json`, "
            f"{sum(sizes) / 1e6:.1f} MB in all, largest {max(sizes, default=0) / 1e6:.1f} MB")


def model_section(summary: dict, config: dict, out: Path) -> str:
    return "\n".join([
        "| | |", "|---|---|",
        f"| architecture | `llada2_moe`: hidden {config['hidden_size']}, {config['num_hidden_layers']} layers "
        f"(layer 0 dense SwiGLU {config['intermediate_size']}, the rest MoE), {config['num_attention_heads']} query / "
        f"{config['num_key_value_heads']} KV heads of {config['head_dim']}, "
        f"partial RoPE {config['partial_rotary_factor']} |",
        f"| MoE | {config['num_experts']} routed experts of width {config['moe_intermediate_size']}, top-"
        f"{config['num_experts_per_tok']}, {config['n_group']} groups with {config['topk_group']} kept (group-limited "
        f"routing), {config['num_shared_experts']} shared expert, sigmoid router with `expert_bias` balanced without "
        f"an auxiliary loss |",
        f"| parameters | {_m(summary['parameters'])} in all, {_m(summary['active_parameters'])} active per token "
        f"(embedding row and LM head included) |",
        f"| vocabulary | {config['vocab_size']:,} byte-level BPE tokens (digits split one per token); "
        f"`<|endoftext|>` = {config['eos_token_id']} (EOS, pad), `<|mask|>` = {config['mask_token_id']} |",
        f"| checkpoint | {_shards(out)}; Hugging Face layout, per-expert tensors |"])


def training_section(summary: dict, command: str) -> str:
    d, tc = summary["data"], summary["config"]
    dropped = ", ".join(f"{n:,} {why}" for why, n in sorted(d["dropped"].items())) or "none"
    batches = ", ".join(f"{n:,} {k}" for k, n in summary["batches"].items())
    losses = ", ".join(f"{k} {summary['first_loss'][k]} → {summary['final_loss'][k]}" for k in summary["batches"])
    return "\n".join([
        "```bash", command, "```", "",
        *_packing(summary),
        f"Device: {summary['device']}{' with torch.compile' if summary['compiled'] else ''}. Building the corpus, "
        f"tokenizer and model took {summary['prep_seconds'] / 60:.1f} min, training {summary['seconds'] / 60:.1f} min "
        f"({summary['steps']:,} steps: {batches}), the evaluation below {summary.get('eval_seconds', 0) / 60:.1f} min.",
        "",
        f"Corpus, built on that machine from {', '.join(d['sources'])} (nothing downloaded): {d['found']:,} `.py` "
        f"files found, {d['duplicates']:,} duplicates removed (content hash), dropped: {dropped}. Split by a hash of "
        f"the file path: **{d['train_files']:,} training files ({d['train_tokens']:,} tokens)** and "
        f"{d['held_out_files']:,} held-out files ({d['held_out_tokens']:,} tokens). From the training files: "
        f"{d['window_rows']:,} window rows of {tc['code_length']} tokens and "
        f"{d.get('function_rows', d['functions']):,} function rows "
        f"(signature + docstring → body, {d['function_tokens']:,} tokens). Task mix: {tc['task_weights']}, "
        f"{100 * (1 - tc['code_share']):.0f}% of the steps.",
        "",
        f"Loss (mean of the first → last tenth of each kind's steps, at most 50 steps): {losses}.", "",
        "![loss](loss.png)"])


def curve_section(summary: dict, pilots: list[dict], out: Path) -> str:
    """Held-out loss against minutes: this run's checkpoints, and the pilot runs that chose its size."""
    runs = [{"name": "this model", "parameters": summary["parameters"], "active": summary["active_parameters"],
             "curve": summary.get("curve", [])}] + pilots
    runs = [r for r in runs if r["curve"]]
    if not runs:
        return "No checkpoints were written during training, so there is no held-out curve."
    plot_curves({f"{r['name']} ({_m(r['parameters'])}, {_m(r['active'])} active)": r["curve"] for r in runs}, out)
    lines = ["| run | parameters (active) | minutes | steps | tokens | train loss | held-out loss | Q parses |",
             "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        for p in r["curve"]:
            parses = f"{100 * p['parses']:.0f}%" if "parses" in p else "–"
            lines.append(f"| {r['name']} | {_m(r['parameters'])} ({_m(r['active'])}) | {p['minutes']:.1f} | "
                         f"{p['step']:,} | {p.get('tokens', 0):,} | {p['train_loss']:.3f} | {p['held_out_loss']:.3f} "
                         f"| {parses} |")
    return "\n".join(["The held-out loss is the training objective on 64 held-out functions under a fixed noise "
                      "seed, measured at every checkpoint; Q parses (where measured, `--eval-only "
                      "--checkpoint-code-n N`) is the share of held-out functions whose Q-mode completion by that "
                      "checkpoint parses.", *pilot_verdict(pilots), "", "![held-out loss](curve.png)", "", *lines])


def pilot_verdict(pilots: list[dict]) -> list[str]:
    """One paragraph on the pilot runs: what they were, and which size ended lowest in the same minutes."""
    ended = [(r["curve"][-1], r) for r in pilots if r["curve"]]
    if len(ended) < 2:
        return []
    last, best = min(ended, key=lambda e: e[0]["held_out_loss"])
    sizes = ", ".join(f"{_m(r['parameters'])} ({p['step']:,} steps)" for p, r in ended)
    return ["", f"Pilot runs: the same data from scratch at {len(ended)} sizes for the same minutes on the same "
                f"machine: {sizes}. The steps show the compute each got. Lowest held-out loss at the end: "
                f"{best['name']} ({_m(best['parameters'])}), {last['held_out_loss']:.3f} after {last['minutes']:.0f} "
                f"minutes."]


def _packing(summary: dict) -> list[str]:
    tc = summary["config"]
    if not tc.get("pack"):
        return []
    return [f"Function rows are packed: several functions per row of {tc['code_length']} tokens, each starting on "
            f"a block boundary and attending only to itself.", ""]


def presets_section(presets: dict) -> str:
    lines = ["| mode | threshold (τ_mask) | editing_threshold (τ_edit) | max_post_steps | block_length | EOS stop |",
             "|---|---|---|---|---|---|"]
    for mode, p in presets.items():
        edit = "off" if p.get("editing_threshold") is None else f"{p['editing_threshold']:g}"
        lines.append(f"| {mode} | {p['threshold']:g} | {edit} | {p['max_post_steps']} | {p['block_length']} | "
                     f"{'yes' if p.get('eos_early_stop') else 'no'} |")
    return "\n".join(lines)


def samples_section(samples: list[dict]) -> str:
    blocks = []
    for s in samples:
        blocks += [f"`{s['tokens']}` tokens, TPF {s['tpf']:.2f}, {s['edits']} edits:", "```python",
                   (s["prompt"] + s["text"]).rstrip("\n"), "```"]
    return "\n".join(blocks)


def evaluated_on(summary: dict) -> str:
    """The device of the card's evaluation: the training one, or the machine a GPU-trained run came back to."""
    where = summary.get("eval_device", summary["device"])
    return f"the training device ({where})" if where == summary["device"] else f"{where}, not the training device"


def origin(init: str | None) -> str:
    """How the card's first line names where the weights started."""
    return f"Continued from the weights and tokenizer of `{init}`, then trained" if init else "Trained from scratch"


def write_card(out: str | Path, summary: dict, report: dict, samples: list[dict], command: str,
               pilots: list[dict] | None = None) -> Path:
    """Write README.md into the model directory (pilots: {"name", "parameters", "active", "curve"} runs)."""
    out = Path(out)
    config = json.loads((out / "config.json").read_text())
    presets = json.loads((out / "presets.json").read_text())
    tc = summary["config"]
    parts = [
        f"# {config.get('name', out.name)} — a LLaDA2.1-style block-diffusion MoE", "",
        origin(tc.get("init")) + " with the LLaDA2.1 objective (M2T drafting + T2T editing, multi-turn forward) "
        "on the Python source of the machine that trained it and on four checkable tasks.", "",
        model_section(summary, config, out), "", "## How it was trained", "", training_section(summary, command), "",
        "## Learning curves", "", curve_section(summary, pilots or [], out), "",
        "## Results: Score | TPF in miniature", "",
        f"Held-out items, seed {report['seed']}, greedy decoding, KV cache on, EOS early stop, on "
        f"{evaluated_on(summary)} (TPS depends on it). Reproduce with "
        f"`python -m llada.eval --model DIR --n {report['n']} --code-n {report.get('code', {}).get('n', 0)} "
        f"--seed {report['seed']}`.", "", format_table(report), ""]
    if "code" in report:
        parts += [format_code_table(report["code"]), ""]
    parts += ["## Presets (`presets.json`)", "", presets_section(presets), "",
              f"## Samples (S mode, gen_length {tc['eval_gen_length']}, unedited)", "", samples_section(samples), ""]
    path = out / "README.md"
    path.write_text("\n".join(parts))
    return path
