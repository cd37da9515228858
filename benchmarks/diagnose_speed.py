"""Wall time and peak memory of ``geohead diagnose`` on a Lightning-style checkpoint, before/after.

The checkpoint is what a lightly + Lightning user writes: a timm ResNet-18 backbone and lightly's
``BarlowTwinsProjectionHead(512, 2048, 2048)`` under ``backbone.`` / ``projection_head.``, the
method and normalisation in ``hyper_parameters``. The command is run at its default settings on
CIFAR-10 test images (an .npz in the layout of ../shared/data), under ``/usr/bin/time -v``, once
with the code of ``--before`` (a git revision, exported to a temporary folder) and once with this
working tree; the table gives wall seconds, peak RSS and the per-stage seconds the report records.

    python benchmarks/diagnose_speed.py --data ../shared/data/cifar10_test.npz [--before 30fee77] [--threads 2]

Both runs are single measurements; other jobs on the machine inflate both (say so when quoting).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_checkpoint(path: Path) -> Path:
    """timm ResNet-18 + lightly BarlowTwinsProjectionHead, saved as Lightning saves a LightningModule."""
    import timm
    import torch
    from lightly.models.modules import BarlowTwinsProjectionHead

    torch.manual_seed(0)
    backbone = timm.create_model("resnet18", num_classes=0)
    head = BarlowTwinsProjectionHead(512, 2048, 2048)
    state = {**{f"backbone.{k}": v for k, v in backbone.state_dict().items()},
             **{f"projection_head.{k}": v for k, v in head.state_dict().items()}}
    torch.save({"state_dict": state, "pytorch-lightning_version": "2.6.6", "epoch": 10, "global_step": 1000,
                "hyper_parameters": {"method": "barlow", "mean": [0.4914, 0.4822, 0.4465], "std": [0.247, 0.243, 0.261],
                                     "img_size": 32}}, path)
    return path


def timed(code: Path, ckpt: Path, data: str, out: Path, threads: int) -> dict:
    """One ``geohead diagnose`` under /usr/bin/time -v with the package at ``code``."""
    cmd = ["/usr/bin/time", "-v", sys.executable, "-c", "from geohead.cli import main; main()", "diagnose", str(ckpt),
           "--data", data, "--json", str(out)]
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"diagnose failed ({code}):\n{res.stderr[-3000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", res.stderr)
    h, m, s = (float(g) if g else 0.0 for g in wall.groups())
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", res.stderr).group(1))
    return {"wall_s": 3600 * h + 60 * m + s, "peak_rss_gb": rss / 1024 ** 2,
            "seconds": json.loads(out.read_text()).get("seconds", {})}


def table(rows: dict[str, dict]) -> str:
    parts = sorted({k for r in rows.values() for k in r["seconds"]})
    lines = [f"{'code':<8} {'wall s':>8} {'peak GB':>8} " + " ".join(f"{p:>9}" for p in parts)]
    for name, r in rows.items():
        lines.append(f"{name:<8} {r['wall_s']:>8.1f} {r['peak_rss_gb']:>8.2f} "
                     + " ".join(f"{r['seconds'].get(p, float('nan')):>9.1f}" for p in parts))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "cifar10_test.npz"))
    ap.add_argument("--before", default="30fee77", help="git revision of the 'before' code (empty: skip)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "diagnose_speed.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        ckpt = write_checkpoint(tmp / "barlow_r18.ckpt")
        rows = {}
        if args.before:
            code = tmp / "before"
            code.mkdir()
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.before], capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(code)], input=archive, check=True)
            rows["before"] = timed(code, ckpt, args.data, tmp / "before.json", args.threads)
        rows["after"] = timed(ROOT, ckpt, args.data, tmp / "after.json", args.threads)
    print(table(rows))
    Path(args.out).write_text(json.dumps({"data": args.data, "threads": args.threads, **rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
