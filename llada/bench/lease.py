"""One command that spends a short GPU lease in full and brings everything back in a few files.

    python -m llada.bench lease --budget SECONDS --out DIR [--plan engine|train|both|next|check] [--dry-run]

A preflight first (`llada.bench.preflight`: versions, the GPU, one Triton kernel compiled and run; a
broken stack fails there in seconds and nothing else is started). Then the plan's parts in order, each
a subprocess capped by its own limit and by the time left (`deadline - now - PACK_S`): a part that
overruns is killed with its process group and recorded as timed out, a part that fails is recorded
with its exit status and the last lines of its output, a part that no longer fits is recorded as
skipped; the next part runs in every case. The command never runs past --budget.

DIR only ever holds at most eight files, each under 16 MiB (what a lease brings back: 8 files of 16 MiB):

    lease-summary.json   rewritten after every part: `parts` (what ran, how long, what it measured, what
                         failed and why), `figures` (each measured number beside its target and the paper's)
    lease.log            every part's output, appended as each part ends
    lease-parts.tar.gz   the rest, written at the end: each part's JSON and log, the tuned table
    tuned-<gpu>.json     the compact tune's table (`llada/fast/kernels/tuned/` format), when the tune ran
                         (written after each M: a tune cut short brings back the Ms it finished)
    lease-model.tar.NN   the model the train part trained (`lease_train`), cut into chunks under 16 MiB:
                         `cat lease-model.tar.* | tar -x` gives its folder `train/`

Plans: `engine` (the checks, the mini's forwards, the MoE layer, decode, a compact tune, the GPU tests),
`train` (training alone), `both` (the engine's parts on tighter caps, without the tune, with training
after the bf16 forward), `next` (the second lease: self-check, the GPU tests, the tune at M = 32, 8, 1
with pipelines up to 6 stages deep, the MoE layer launch by launch, then training for what is left) and
`check` (~200 s: self-check, the router and MoE kernel tests, the MoE layer launch by launch, the mini
forward in FP8 and bf16; `--budget 200` on a fresh H200).

The parts' own files live in a scratch folder until the end. `--dry-run` runs the same parts on the CPU
with tiny shapes and the Triton kernels under TRITON_INTERPRET=1: what CI checks.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FILE_LIMIT = 16 << 20  # bytes: what one returned file may hold
LOG_KEEP = 2 << 20  # bytes of each part's output kept in lease.log (head and tail)
PACK_S = 10.0  # seconds kept back for packing
SUMMARY, LOG, TAR = "lease-summary.json", "lease.log", "lease-parts.tar.gz"
GPU_TESTS = ["tests/test_kernels_fp8.py", "tests/test_kernels_moe.py", "tests/test_kernels_routing.py",
             "tests/test_kernels_launches.py", "tests/test_kernels_poison.py", "tests/test_kernels_configs.py",
             "tests/test_kernels_norms.py", "tests/test_kernels_fused_ops.py", "tests/test_graphs.py",
             "tests/test_graphs_fast.py", "tests/test_graph_pool.py", "tests/test_quantize.py",
             "tests/test_engine_select.py", "tests/test_engine_self_check.py", "tests/test_engine_fallback.py",
             "tests/test_lease_faults.py"]  # the ones whose kernels, graphs and pools only a GPU really runs
# a dry run's tests part: one quick test (the whole files run in the suite; the part's mechanics are checked)
DRY_TESTS = ["tests/test_lease_faults.py::test_a_rope_table_grows_at_least_twofold"]
TEST_GROUPS = 4  # parallel pytest processes where pytest-xdist is missing (16 cores; compiles are single-threaded)
TUNE_CANDIDATES = 18  # the default tile height's 18 configurations (split-K, tile width, warps x stages)


@dataclass
class Part:
    name: str
    what: str
    argvs: list[list[str]]  # one command, or several run side by side (the tests)
    cap_s: float  # at most this long on a GPU
    min_s: float = 10.0  # not started with less time left
    out: str | None = None  # the JSON it writes, in the scratch folder
    record: dict = field(default_factory=dict)


def engine_parts(work: Path, dry_run: bool) -> list[Part]:
    """The engine plan, most telling first: checks, the mini forward, the MoE layer, decode, tune, tests."""
    py, step = [sys.executable, "-m"], lambda name: engine_step(work, dry_run, name)
    return [
        Part("self-check", "the fast engine's MoE layer against the reference, M = 1 and 32, bf16 and FP8",
             [step("self-check")], 120, out="self-check.json"),
        Part("forward-bf16", "mini forward (32-token block over 1k cached): CUDA graph, eager, reference",
             [step("forward-bf16")], 150, out="forward-bf16.json"),
        Part("forward-fp8", "the same with FP8 routed experts", [step("forward-fp8")], 150, out="forward-fp8.json"),
        Part("moe", "the FP8 MoE layer at M = 1, 8, 32: time and share of copy bandwidth",
             [py + ["llada.bench", "kernels", "--tokens", "1", "8", "32", "--out", str(work / "moe.json")]], 120,
             out="moe.json"),
        Part("decode", "mini FP8 decoding 64 tokens: CUDA graphs against the dynamic forward", [step("decode")],
             120, out="decode.json"),
        tune_part(work, dry_run, (1, 32), (3, 4), TUNE_CANDIDATES, 180),
        Part("tests", "the kernel, graph and pool tests compiled on this GPU, in parallel",
             test_commands(DRY_TESTS if dry_run else GPU_TESTS), 240, min_s=30),
    ]


def engine_step(work: Path, dry_run: bool, name: str) -> list[str]:
    """The command of one `lease_engine` step, its JSON in the scratch folder."""
    return [sys.executable, "-m", "llada.bench.lease_engine", name, str(work / f"{name}.json")] + (
        ["--dry-run"] if dry_run else [])


def tune_part(work: Path, dry_run: bool, tokens: tuple[int, ...], stages: tuple[int, ...], limit: int,
              cap_s: float) -> Part:
    """The compact tune (`bench kernels --tune`) at `tokens`, pipeline depths `stages`, the first `limit`
    candidates (the default tile height's); the table is written after each M, in the order given."""
    tune = ["--impl", "triton", "--tune-limit", "1"] if dry_run else ["--tune-limit", str(limit)]
    return Part("tune", f"compact tune of the grouped GEMMs at M = {', '.join(map(str, tokens))}, "
                        f"{limit} candidates, stages {', '.join(map(str, stages))}",
                [[sys.executable, "-m", "llada.bench", "kernels", "--tune", "--tokens", *map(str, tokens), *tune,
                  "--tune-stages", *map(str, stages), "--tune-out", str(work / "tuned.json"),
                  "--out", str(work / "tune-bench.json")]], cap_s, out="tuned.json")


def test_commands(files: list[str]) -> list[list[str]]:
    """One pytest with `-n` where pytest-xdist is installed, else TEST_GROUPS pytests over shares of the files."""
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts="]
    if len(files) == 1 and "::" in files[0]:  # one test: workers would only add their start-up
        return [base + files]
    if importlib.util.find_spec("xdist") is not None:
        return [base + ["-n", str(min(2 * TEST_GROUPS, os.cpu_count() or 1)), *files]]
    groups = [files[k::TEST_GROUPS] for k in range(min(TEST_GROUPS, len(files)))]
    return [base + group for group in groups]


def train_part(work: Path, dry_run: bool, cap_s: float = 240) -> Part:
    return Part("train", "v4 (`--preset lease`) trained on this GPU from the carried corpus (`lease_train`)",
                [[sys.executable, "-m", "llada.bench.lease_train", str(work / "train.json")]
                 + (["--dry-run"] if dry_run else [])], cap_s, min_s=100 if not dry_run else 10, out="train.json")


def train_plan(work: Path, dry_run: bool) -> list[Part]:
    return [train_part(work, dry_run, cap_s=480)]


BOTH_CAPS = {"self-check": 60, "forward-bf16": 80, "forward-fp8": 70, "moe": 50, "decode": 60, "tests": 200}


def both_plan(work: Path, dry_run: bool) -> list[Part]:
    """One lease for both: the engine's checks and forwards, training in the middle, the rest after; no tune."""
    engine = {p.name: p for p in engine_parts(work, dry_run)}
    for name, cap in BOTH_CAPS.items():
        engine[name].cap_s = cap
    order = ["self-check", "forward-bf16", "train", "forward-fp8", "moe", "decode", "tests"]
    return [train_part(work, dry_run, cap_s=230) if n == "train" else engine[n] for n in order]


NEXT_CAPS = {"self-check": 45, "tests": 110, "tune": 170, "moe-launches": 60}  # seconds; training gets the rest
NEXT_TUNE = ((32, 8, 1), (3, 4, 5, 6), 30)  # M (the headline first), depths, candidates: block_m 16's 30


def next_plan(work: Path, dry_run: bool) -> list[Part]:
    """The second lease: the fixes checked (self-check, the GPU tests), the tune at M = 32, 8, 1 with deeper
    pipelines, the MoE layer launch by launch, then v4 (`--preset lease`) trained for what is left."""
    engine = {p.name: p for p in engine_parts(work, dry_run)}
    parts = [engine["self-check"], engine["tests"], tune_part(work, dry_run, *NEXT_TUNE, NEXT_CAPS["tune"]),
             Part("moe-launches", "the FP8 MoE layer at M = 1, 8, 32 launch by launch: each alone and in order",
                  [engine_step(work, dry_run, "moe-launches")], NEXT_CAPS["moe-launches"], out="moe-launches.json")]
    for part in parts:
        part.cap_s = NEXT_CAPS[part.name]
    return parts + [train_part(work, dry_run, cap_s=480)]


CHECK_TESTS = ["tests/test_kernels_routing.py", "tests/test_kernels_router_split.py", "tests/test_kernels_moe.py",
               "tests/test_kernels_launches.py"]  # the router, routing, fused MoE and launch-count tests
# seconds, in order; the last lease's H200 took 27 s, 10 s, 25 s and 21 s for the steps, 10 s for the preflight
CHECK_CAPS = {"self-check": 35, "tests": 50, "moe-launches": 25, "forward-fp8": 40, "forward-bf16": 30}


def check_plan(work: Path, dry_run: bool) -> list[Part]:
    """A short check (~200 s with the preflight): the MoE layer against the reference, the router and MoE
    kernel tests compiled on this GPU, the FP8 MoE layer launch by launch, the mini forward in FP8 and bf16.
    On an H200 the kernels read the tuned table `llada/fast/kernels/tuned/nvidia-h200.json` (the preflight's
    `tuned_table` says which table, if any, this GPU has)."""
    engine = {p.name: p for p in engine_parts(work, dry_run)}
    engine["tests"] = Part("tests", "the router, routing, fused MoE and launch tests compiled on this GPU",
                           test_commands(DRY_CHECK_TESTS if dry_run else CHECK_TESTS), 50, min_s=20)
    engine["moe-launches"] = Part("moe-launches", "the FP8 MoE layer at M = 1, 8, 32 launch by launch",
                                  [engine_step(work, dry_run, "moe-launches")], 25, out="moe-launches.json")
    parts = [engine[name] for name in CHECK_CAPS]
    for part in parts:
        part.cap_s = CHECK_CAPS[part.name]
    return parts


DRY_CHECK_TESTS = ["tests/test_kernels_router_split.py::test_the_path_is_chosen_from_the_token_count"]
PLANS = {"engine": engine_parts, "train": train_plan, "both": both_plan, "next": next_plan, "check": check_plan}
MODEL_DIR, MODEL_TAR = "train", "lease-model.tar"  # the trained model's folder in the scratch, its chunks' stem
MODEL_SKIP = {"resume.pt", "rows.pt", "rows.json"}  # what the trained folder holds that need not come back


class Lease:
    """The deadline, the scratch folder and the summary, rewritten after every part."""

    def __init__(self, args: argparse.Namespace, argv: list[str]):
        self.start, self.budget = time.monotonic(), args.budget
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        for old in [self.out / n for n in (SUMMARY, LOG, TAR)] + [*self.out.glob("tuned-*.json"),
                                                              *self.out.glob("lease-model.tar.*")]:
            old.unlink(missing_ok=True)  # an earlier lease's files: DIR holds this one's alone
        self.work = Path(tempfile.mkdtemp(prefix="lease-"))
        self.env = os.environ | ({"TRITON_INTERPRET": "1"} if args.dry_run else {}) | {"PYTHONUNBUFFERED": "1"}
        self.summary = {"command": "python -m llada.bench lease " + " ".join(argv), "commit": _commit(),
                        "llada_sha256": source_fingerprint(ROOT / "llada"),
                        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "budget_s": args.budget,
                        "plan": args.plan, "dry_run": args.dry_run, "preflight": None, "parts": [], "figures": []}

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.start)

    def say(self, line: str) -> None:
        print(f"[lease {time.monotonic() - self.start:6.1f} s] {line}", file=sys.stderr, flush=True)
        with open(self.out / LOG, "a") as log:
            log.write(f"[lease {time.monotonic() - self.start:6.1f} s] {line}\n")

    def write_summary(self) -> None:
        self.summary["elapsed_s"] = round(time.monotonic() - self.start, 1)
        tmp = self.out / (SUMMARY + ".tmp")
        tmp.write_text(json.dumps(self.summary, indent=1, default=str) + "\n")
        tmp.replace(self.out / SUMMARY)

    def run(self, part: Part) -> dict:
        """Run one part within min(its cap, the time left); its record (also kept in the summary)."""
        record = {"name": part.name, "what": part.what, "cap_s": part.cap_s,
                  "command": [" ".join(a[2:]) for a in part.argvs]}
        self.summary["parts"].append(record)
        room = min(part.cap_s, self.left() - PACK_S)
        if room < part.min_s:
            record |= {"status": "skipped", "seconds": 0.0,
                       "error": f"{max(room, 0):.0f} s left before packing; the part needs at least {part.min_s:.0f}"}
        else:
            record |= self._spawn(part, room)
            record |= _measured(self.work / part.out if part.out else None, record)
        self.say(f"{part.name}: {record['status']} in {record['seconds']:.1f} s"
                 + (f" ({record['error']})" if record.get("error") else ""))
        self.write_summary()
        return record

    def _spawn(self, part: Part, room: float) -> dict:
        logs = [self.work / f"{part.name}{'' if len(part.argvs) == 1 else f'-{k}'}.log" for k in range(len(part.argvs))]
        self.say(f"{part.name}: start ({part.what}); {room:.0f} s at most")
        begun = time.monotonic()
        outputs = [open(log, "w") for log in logs]
        try:
            env = self.env | {"LEASE_PART_DEADLINE": f"{time.time() + room:.1f}"}
            procs = [subprocess.Popen(argv, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True)
                     for argv, output in zip(part.argvs, outputs)]
        except OSError as err:  # the interpreter or a folder is missing: nothing ran
            return {"status": "failed", "seconds": 0.0, "returncode": None, "error": f"{type(err).__name__}: {err}"}
        finally:
            for output in outputs:
                output.close()  # the children hold their own copies
        codes, killed = [], False
        for proc in procs:
            try:
                codes.append(proc.wait(timeout=max(room - (time.monotonic() - begun), 0.1)))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # the part's own process group: it and its children
                codes.append(proc.wait())
                killed = True
        seconds = round(time.monotonic() - begun, 1)
        tails = [_append_log(self.out / LOG, log, part.name) for log in logs]
        status = "timeout" if killed else "ok" if all(c == 0 for c in codes) else "failed"
        record = {"status": status, "seconds": seconds, "returncode": codes if len(codes) > 1 else codes[0]}
        if status == "timeout":
            record["error"] = f"killed after {seconds:.0f} s (limit {room:.0f} s)"
        elif status == "failed":
            record["error"] = " | ".join(t for t, c in zip(tails, codes) if c != 0)[-1500:]
        if len(procs) > 1 or "pytest" in part.argvs[0]:
            record["tests"] = [t.splitlines()[-1] if t else "" for t in tails]
        return record


def _measured(path: Path | None, record: dict) -> dict:
    """What a part's JSON says: its figures, or for the tune each token count's winner."""
    if path is None or not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except ValueError as err:  # cut off mid-write when the part was killed
        return {"measured_error": f"{path.name} does not parse: {err}"}
    if "figures" in data:
        return {"measured": data["figures"]}
    if "shapes" in data:  # the tuned table
        return {"measured": [{"tokens": r["tokens"], "config": r["config"], "gemm_ms": r["gemm_ms"]}
                             for rows in data["shapes"].values() for r in rows]}
    return {"measured": [_moe_row(r, data.get("smoke", False)) for r in data.get("rows", [])]}


def _moe_row(r: dict, smoke: bool) -> dict:
    from .lease_engine import figure

    share, judged = r.get("layer_share_of_copy"), r["tokens"] == 32 and not smoke  # a CPU's share means nothing
    return figure(f"MoE layer M={r['tokens']}, share of copy bandwidth", f"{share:.0%} ({r['layer_ms']:.3f} ms)",
                  ">= 70% at M = 32" if r["tokens"] == 32 else "-", "-", share >= 0.70 if judged else None)


def _append_log(log: Path, part_log: Path, name: str) -> str:
    """Append a part's output to the lease log (its head and tail when long); its last lines."""
    text = part_log.read_text(errors="replace") if part_log.exists() else ""
    if len(text) > LOG_KEEP:
        cut = f"\n[... {len(text) - LOG_KEEP} characters left out ...]\n"
        text = text[:LOG_KEEP // 4] + cut + text[-3 * LOG_KEEP // 4:]
    with open(log, "a") as out:
        out.write(f"\n===== {name}: {part_log.name} =====\n{text}\n")
    return "\n".join(text.strip().splitlines()[-5:])[-600:]


def source_fingerprint(root: Path) -> str:
    """sha256 over every file under `root` (bytecode caches aside), in sorted order of their paths relative
    to it: each path, a NUL, its size, a NUL, its bytes. It names the code that ran whatever `.git` says (the
    device's `.git` may lag the tree sent to it): a commit's `llada/` extracted (`git archive REV llada`)
    hashes to it exactly when that commit's code ran."""
    digest = hashlib.sha256()
    files = sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
    for path in files:
        data = path.read_bytes()
        digest.update(f"{path.relative_to(root).as_posix()}\0{len(data)}\0".encode() + data)
    return digest.hexdigest()


def _commit() -> str | None:
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
        return done.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def preflight(lease: Lease, dry_run: bool) -> bool:
    """Versions, the GPU, one Triton kernel: recorded in the summary; False stops the lease."""
    part = Part("preflight", "versions, the GPU, one Triton kernel compiled and run",
                [[sys.executable, "-m", "llada.bench.preflight", str(lease.work / "preflight.json")]
                 + (["--dry-run"] if dry_run else [])], 90, min_s=5, out="preflight.json")
    record = lease.run(part)
    report = lease.work / "preflight.json"
    lease.summary["preflight"] = json.loads(report.read_text()) if report.exists() else None
    record.pop("measured", None)
    lease.write_summary()
    return record["status"] == "ok"


def pack(lease: Lease) -> None:
    """The scratch folder into DIR: the tuned table beside, the rest in one tar.gz under FILE_LIMIT."""
    tuned = lease.work / "tuned.json"
    gpu = (lease.summary.get("preflight") or {}).get("gpu") or "cpu"
    files = []
    if tuned.exists():
        from ..fast.kernels.configs import device_slug

        name = f"tuned-{device_slug(gpu)}.json"
        shutil.copyfile(tuned, lease.out / name)
        files.append(name)
    files += pack_model(lease)
    members = sorted((p for p in lease.work.iterdir() if p.is_file()), key=lambda p: p.stat().st_size)
    left_out = []
    while True:
        with tarfile.open(lease.out / TAR, "w:gz") as tar:
            for p in members:
                tar.add(p, arcname=p.name)
        if (lease.out / TAR).stat().st_size <= FILE_LIMIT or not members:
            break
        left_out.append(members.pop().name)  # the largest first, until it fits
    _cap_log(lease.out / LOG)
    lease.summary["files"] = [{"name": n, "bytes": (lease.out / n).stat().st_size} for n in [*files, TAR, LOG]]
    lease.summary["left_out_of_tar"] = left_out
    shutil.rmtree(lease.work, ignore_errors=True)
    lease.write_summary()


def pack_model(lease: Lease) -> list[str]:
    """A trained model's folder as `lease-model.tar.00`, `.01`, ... each under FILE_LIMIT (join them with cat)."""
    folder = lease.work / MODEL_DIR
    if not folder.is_dir() or not (folder / "config.json").exists():
        return []
    whole = lease.work / MODEL_TAR
    with tarfile.open(whole, "w") as tar:  # bf16 shards do not compress
        for p in sorted(folder.rglob("*")):
            if p.is_file() and p.name not in MODEL_SKIP and "checkpoint" not in p.relative_to(folder).parts[0]:
                tar.add(p, arcname=f"{MODEL_DIR}/{p.relative_to(folder)}")
    names = []
    with open(whole, "rb") as src:
        while chunk := src.read(FILE_LIMIT - 4096):
            names.append(f"{MODEL_TAR}.{len(names):02d}")
            (lease.out / names[-1]).write_bytes(chunk)
    whole.unlink()
    lease.summary["model_chunks"] = {"files": names, "join": f"cat {MODEL_TAR}.* | tar -x"}
    return names


def _cap_log(log: Path) -> None:
    """Keep the lease log under FILE_LIMIT: its head and its tail."""
    if log.exists() and log.stat().st_size > FILE_LIMIT:
        data = log.read_bytes()
        keep = FILE_LIMIT - 4096
        log.write_bytes(data[:keep // 4] + b"\n[... left out ...]\n" + data[-(3 * keep // 4):])


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m llada.bench lease", description=__doc__.split("\n")[0])
    parser.add_argument("--budget", type=float, required=True, help="seconds the whole command may take")
    parser.add_argument("--out", required=True, help="folder for the (at most eight) files that come back")
    parser.add_argument("--plan", choices=list(PLANS), default="engine", help="which parts to run")
    parser.add_argument("--dry-run", action="store_true", help="the same parts on the CPU with tiny shapes")
    args = parser.parse_args(argv)
    if args.budget < 2 * PACK_S:
        parser.error(f"--budget must leave room for the parts: at least {2 * PACK_S:.0f} s")
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    lease = Lease(args, argv)
    lease.say(f"budget {args.budget:.0f} s, plan {args.plan}{', dry run on the CPU' if args.dry_run else ''}; "
              f"scratch {lease.work}")
    lease.write_summary()
    parts = PLANS[args.plan](lease.work, args.dry_run)
    if preflight(lease, args.dry_run):
        for part in parts:
            record = lease.run(part)
            lease.summary["figures"] += [m for m in record.get("measured", []) if "figure" in m]
    else:
        lease.say("preflight failed: the stack is broken, no part is started")
        for part in parts:
            lease.summary["parts"].append({"name": part.name, "what": part.what, "status": "skipped",
                                           "seconds": 0.0, "error": "the preflight failed"})
    pack(lease)
    ok = [p["status"] == "ok" for p in lease.summary["parts"]]
    lease.say(f"{sum(ok)} of {len(ok)} parts ok in {lease.summary['elapsed_s']:.0f} s; wrote "
              + ", ".join(f"{f['name']} ({f['bytes'] / 2**20:.2f} MiB)" for f in lease.summary["files"]))
    _print_figures(lease.summary["figures"])
    return 0 if all(ok) else 1


def _print_figures(figures: list[dict]) -> None:
    """The table a lease's reply ends with: each figure beside its target and the paper's."""
    for f in figures:
        mark = {True: "ok", False: "MISS", None: ""}[f.get("ok")]
        print(f"{f['figure'][:58]:58s} {str(f['measured'])[:26]:26s} {str(f['target'])[:44]:44s} "
              f"{str(f['paper'])[:30]:30s} {mark}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
