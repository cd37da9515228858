"""Heads per hour of ``geohead search`` with one worker (all cores) vs ``--workers auto`` (issue 22, item 5).

Side by side in one run, on the default search's settings (barlow on the built-in shapes data,
resnet18_w16, successive halving 100 -> 300 steps), each for the same ``--window`` seconds
(``--timeout``; the trial in flight finishes): measured

* ``1 worker``: one process, torch on every core (``cores`` threads);
* ``auto``: ``--workers auto`` (on CPU min(4, cores) processes, cores // workers threads each).

Reported per setting: distinct heads measured, training steps done, wall time (start to the end of
the last trial, the verdict excluded: ``confirm_seeds=0``), heads per hour and steps per hour,
and the ratio auto / 1 worker (goal on the 2-core machine: >= 1.4x heads per hour). Heads differ
between the settings (parallel TPE draws other heads), so steps per hour is printed beside heads
per hour as the like-for-like measure of throughput.

Run on an idle machine: ``python benchmarks/search_workers.py`` (about 2 x window + 1 minute).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def measure(workers: int | str, window: float, out: Path, seed: int) -> dict[str, Any]:
    """One search of ``window`` seconds; its heads, steps and wall time."""
    import torch

    from geohead.search import SearchConfig, run_search
    from geohead.search.results import read_trials_csv

    torch.set_num_threads(os.cpu_count() or 1)
    cfg = SearchConfig(out=str(out), timeout=window, workers=workers, seed=seed, progress=False, confirm_seeds=0)
    t0 = time.perf_counter()
    run_search(cfg, echo=lambda s: None)
    wall = time.perf_counter() - t0
    rows = [r for r in read_trials_csv(out / "trials.csv") if r.get("duplicate_of") is None]
    heads = sum(1 for r in rows if r["state"] in ("COMPLETE", "PRUNED", "FAIL"))
    steps = sum(int(r.get("steps_trained") or 0) for r in rows)
    return {"workers": workers, "heads": heads, "steps": steps, "wall_s": wall,
            "heads_per_h": 3600 * heads / wall, "steps_per_h": 3600 * steps / wall}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--window", type=float, default=300.0, help="seconds of each search (its --timeout)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    cores = os.cpu_count() or 1
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, workers in ((f"1 worker x {cores} threads", 1), ("--workers auto", "auto")):
            print(f"measuring {label} for {args.window:.0f} s ...", file=sys.stderr, flush=True)
            rows.append({"label": label, **measure(workers, args.window, Path(tmp) / str(workers), args.seed)})
    base = rows[0]
    print(f"| setting ({cores} cores) | heads | steps | wall s | heads/h | steps/h | heads/h ratio | steps/h ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['label']} | {r['heads']} | {r['steps']} | {r['wall_s']:.0f} | {r['heads_per_h']:.0f} | "
              f"{r['steps_per_h']:.0f} | {r['heads_per_h'] / base['heads_per_h']:.2f}x | "
              f"{r['steps_per_h'] / base['steps_per_h']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
