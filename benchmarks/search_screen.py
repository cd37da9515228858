"""Seconds per candidate of the search's screen stage (goal: <= 2 s on CPU, d = 512, B = 256).

Real backbone features: ``resnet18_cifar`` (d = 512) at its initial weights on the built-in
shapes data, two views of a batch of 256 (BatchNorm calibrated on them, as ``geohead search``
does). Candidates: the largest head of the default space scaled to d = 512 (depth 4,
512 -> 2048 -> 2048 -> 2048 -> 2048, GELU, LayerNorm, ZCA whitening), the method's standard
head narrowed to the space (depth 3, 2048 wide, SiLU, BatchNorm), a linear head, and ``--random``
more drawn from the default space (seeded).

Baseline, measured side by side on the same features and heads: the same measurements with
``escape_curvature``'s complete fast mode (pullback G and the objective's own spectrum also
computed) instead of the screening path (H_eff's escape direction and ‖M‖/‖H‖ only). The table
gives seconds per part and the ratio to the 2 s goal.

Usage:  flock /tmp/geohead-bench.lock python benchmarks/search_screen.py [--objective barlow]
        [--random 6] [--threads 2] [--backbone resnet18_cifar]
"""
from __future__ import annotations

import argparse
import statistics
import time

import optuna
import torch

from geohead.geometry import EscapeSettings, escape_curvature
from geohead.objectives import CollapsedState
from geohead.search.config import SearchConfig
from geohead.search.criteria import build_head, screen
from geohead.search.inputs import prepare_trial_inputs

GOAL_S = 2.0


def parser() -> argparse.ArgumentParser:
    """The command line of :func:`main`."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objective", default="barlow")
    ap.add_argument("--backbone", default="resnet18_cifar")
    ap.add_argument("--random", type=int, default=6, help="extra candidates drawn from the default space")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    return ap


def candidates(prepared, n_random: int, seed: int) -> list:
    """The HeadSpecs screened: the largest head of the default space at width ``in_dim``, the
    method's standard head narrowed to the space, a linear head, and ``n_random`` more drawn from
    the default space (seeded)."""
    d = prepared.in_dim
    base = prepared.base_spec
    specs = [
        base.replace(depth=4, hidden_dim=4 * d, out_dim=4 * d, activation="gelu", norm="layer", last_norm=None, whiten="zca"),
        base.replace(depth=3, hidden_dim=4 * d, out_dim=4 * d, activation="silu", norm="batch", last_norm=None, whiten=None),
        base.replace(depth=1, hidden_dim=d, out_dim=d, activation="identity", norm=None, last_norm=None, whiten=None),
    ]
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    for _ in range(n_random):
        t = study.ask()
        specs.append(prepared.space.suggest(t, base))
        study.tell(t, 0.0)
    return specs


def full_escape(spec, inp) -> float:
    """The baseline's escape part: escape_curvature fast mode with every part computed."""
    head, pred = build_head(spec, inp.z1, inp.seed, inp.predictor_spec(spec.output_dim))
    state = CollapsedState(inp.collapsed[0], inp.collapsed[1], "complete", 0, inp.spread)
    t = time.perf_counter()
    escape_curvature(head, inp.objective, settings=EscapeSettings(mode="fast", dtype=torch.float32),
                     predictor=pred, state=state, generator=torch.Generator().manual_seed(0))
    return time.perf_counter() - t


def time_candidates(specs: list, inp) -> list[tuple]:
    """After a warm-up screen, each candidate's row: (description, screen s, of which escape s,
    baseline escape s, baseline screen s, the screen's criteria)."""
    screen(specs[-1], inp)  # warm-up (first-call allocations)
    rows = []
    for spec in specs:
        t = time.perf_counter()
        crit = screen(spec, inp)
        total = time.perf_counter() - t
        t = time.perf_counter()
        head, pred = build_head(spec, inp.z1, inp.seed, inp.predictor_spec(spec.output_dim))
        state = CollapsedState(inp.collapsed[0], inp.collapsed[1], "complete", 0, inp.spread)
        screen_settings = EscapeSettings(mode="fast", dtype=torch.float32, pullback=False, objective_spectrum=False,
                                         m_over_h=True)
        escape_curvature(head, inp.objective, settings=screen_settings, predictor=pred, state=state,
                         generator=torch.Generator().manual_seed(0))
        esc = time.perf_counter() - t
        base_esc = full_escape(spec, inp)
        rows.append((spec.describe(), total, esc, base_esc, total - esc + base_esc, crit))
    return rows


def print_table(rows: list[tuple]) -> None:
    """The table of :func:`time_candidates`' rows against the 2 s goal, and its summary line."""
    print("| candidate | screen s | of which escape s | baseline escape s (full fast mode) | baseline screen s | "
          "screen / 2 s goal | baseline / screen |")
    print("|---|---|---|---|---|---|---|")
    for desc, total, esc, base_esc, base_total, _ in rows:
        print(f"| {desc} | {total:.2f} | {esc:.2f} | {base_esc:.2f} | {base_total:.2f} | {total / GOAL_S:.2f} | "
              f"{base_total / total:.2f} |")
    tot = [r[1] for r in rows]
    print(f"\nscreen seconds per candidate over {len(rows)} candidates: mean {statistics.mean(tot):.2f}, "
          f"median {statistics.median(tot):.2f}, max {max(tot):.2f} (goal {GOAL_S:.0f} s)")


def main() -> None:
    args = parser().parse_args()
    torch.set_num_threads(args.threads)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    t0 = time.perf_counter()
    cfg = SearchConfig(objective=args.objective, backbone=args.backbone, n_train=1024, probe_train=256, probe_test=128,
                       screen_batch=256, out="/tmp/geohead-screen-bench", progress=False, seed=args.seed)
    prepared = prepare_trial_inputs(cfg, echo=lambda s: None)
    inp = prepared.screen_inputs
    print(f"features: {args.backbone} at init on shapes, z1/z2 {tuple(inp.z1.shape)}; objective {args.objective}; "
          f"{torch.get_num_threads()} threads; setup {time.perf_counter() - t0:.1f} s\n")
    print_table(time_candidates(candidates(prepared, args.random, args.seed), inp))


if __name__ == "__main__":
    main()
