"""What a run leaves behind besides weights: the loss of every step (loss.csv) and its plot (loss.png)."""

from __future__ import annotations

from pathlib import Path

COLUMNS = ("step", "seconds", "kind", "block", "loss", "lr", "max_load")


def write_csv(log: list[dict], out: Path) -> Path:
    path = Path(out) / "loss.csv"
    with open(path, "w") as f:
        f.write(",".join(COLUMNS) + "\n")
        for r in log:
            f.write(f"{r['step']},{r['seconds']},{r['kind']},{r['block']},{r['loss']:.5f},{r['lr']:.6g},"
                    f"{r['max_load']}\n")
    return path


def smooth(values: list[float], beta: float = 0.95) -> list[float]:
    """Exponential moving average, started at the first value."""
    out, avg = [], None
    for v in values:
        avg = v if avg is None else beta * avg + (1 - beta) * v
        out.append(avg)
    return out


def plot_loss(log: list[dict], out: Path, title: str = "Training loss") -> Path:
    """One smoothed curve per batch kind (task, window, function) against the step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for kind in dict.fromkeys(r["kind"] for r in log):
        rows = [r for r in log if r["kind"] == kind]
        ax.plot([r["step"] for r in rows], smooth([r["loss"] for r in rows]), label=f"{kind} batches")
    ax.set_xlabel("step")
    ax.set_ylabel("M2T + T2T loss (smoothed)")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    path = Path(out) / "loss.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def loss_ends(log: list[dict], kind: str) -> tuple[float, float] | None:
    """Mean loss of the first and of the last tenth of one kind's steps (1 to 50 steps each); None if none."""
    values = [r["loss"] for r in log if r["kind"] == kind]
    if not values:
        return None
    k = max(1, min(50, len(values) // 10))
    return round(sum(values[:k]) / k, 4), round(sum(values[-k:]) / k, 4)


def plot_curves(curves: dict[str, list[dict]], out: Path, title: str = "Held-out loss") -> Path:
    """Held-out loss against minutes of training, one line per run (its checkpoints' `curve` points)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, points in curves.items():
        ax.plot([p["minutes"] for p in points], [p["held_out_loss"] for p in points], marker="o", label=name)
    ax.set_xlabel("minutes of training (wall time on the training machine)")
    ax.set_ylabel("held-out function loss (M2T + T2T)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    path = Path(out) / "curve.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
