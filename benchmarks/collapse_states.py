"""Collapsed states of every objective, on small dense float64 problems: the frame, whether the
state is an equilibrium, Thm 4.1's premise once per objective, and the curvature there.

The numbers behind docs/theory.md, "Measured facts". Heads 6 → 16 → 16 → 8 (BatchNorm in eval
mode), B = 12 (H is 72-dimensional, so every spectrum and ‖M‖/‖H‖ is exact), four activations,
two states per objective:

* ``drawn``: the default collapsed state, all representations at one centre plus noise of std
  1e-2 (both views), the target branch held fixed;
* ``equilibrium``: ``EscapeSettings(refine=200)``: the exact collapsed state moved by L-BFGS on
  its centre to a stationary point when one is within reach (else the drawn state is kept and
  the row says why).

Scale-invariant (cosine) objectives are measured in the sphere-tangent frame (H_tan = G_tan + M;
the ambient H_eff's negative count beside it). A negative eigenvalue is called a saddle only at
a stationary state (‖∇_Z f‖ ≤ 1e-8·max|λ|·‖Z‖).

    python benchmarks/collapse_states.py [--json out.json]     # ~1-2 minutes on one CPU thread
"""
from __future__ import annotations

import argparse
import json
import time

import torch
from torch import nn

B, D, HIDDEN, K = 12, 6, 16, 8
ACTIVATIONS = ("silu", "gelu", "relu", "identity")
#: (label, registry name, kwargs, predictor: None | "identity" | "mlp")
OBJECTIVES = [
    ("Barlow Twins", "barlow", {}, None),
    ("VICReg", "vicreg", {}, None),
    ("SimCLR (τ = 0.5)", "simclr", {"temperature": 0.5}, None),
    ("DINO", "dino", {"out_dim": K}, None),
    ("BYOL (cosine) + predictor", "byol", {}, "mlp"),
    ("SimSiam (cosine) + predictor", "simsiam", {}, "mlp"),
    ("BYOL MSE + predictor", "byol", {"distance": "mse"}, "mlp"),
    ("MSE to target (head only)", "byol", {"distance": "mse"}, "identity"),
    ("cosine to target (head only)", "simsiam", {}, "identity"),
]


def measure(name: str, kw: dict, pred_kind: str | None, act: str, refine: int, seed: int):
    from geohead.geometry import EscapeSettings, escape_curvature
    from geohead.heads import GeometricHead
    from geohead.objectives import get_objective

    torch.manual_seed(seed)
    obj = get_objective(name, **kw)
    head = GeometricHead(D, K, hidden_dim=HIDDEN, depth=3, activation=act)
    pred = None
    if pred_kind == "identity":
        pred = nn.Identity()
    elif pred_kind == "mlp":
        pred = GeometricHead(K, K, hidden_dim=HIDDEN, depth=2, activation=act)
    return escape_curvature(head, obj, settings=EscapeSettings(batch_size=B, k=B * D // 2, refine=refine),
                            predictor=pred, generator=torch.Generator().manual_seed(seed))


def row(label: str, act: str, r) -> str:
    amb = f" ({r.reference.num_negative_H_ambient})" if r.frame == "tangent" else ""
    eq = r.equilibrium + (f" ({r.refinement['iterations']} it.)" if r.equilibrium == "refined" else "")
    return (f"| {label} | {act} | {r.frame} | {r.gradient_relative:.1e} | {eq} | {r.reference.lambda_min_objective:.2g} | "
            f"{r.lambda_min_H:.2g} | {r.num_negative_H}{amb} | {r.m_over_h:.2g} | {'yes' if r.saddle else 'no'} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write every result's to_dict() to this file")
    args = ap.parse_args()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    results, premise = [], {}
    header = ("| objective | head | frame | ‖∇_Z f‖/(max|λ|·‖Z‖) | equilibrium | λ_min(∇²_e L) | λ_min(H) | #neg H (ambient) "
              "| ‖M‖/‖H‖ | saddle |\n|---|---|---|---|---|---|---|---|---|---|")
    for state, refine in (("drawn", 0), ("equilibrium", 200)):
        print(f"\n**{state} state** (B = {B}, heads {D}→{HIDDEN}→{HIDDEN}→{K}, float64, full spectra of dimension {B * D})\n")
        print(header)
        for label, name, kw, pred_kind in OBJECTIVES:
            for act in ACTIVATIONS:
                r = measure(name, kw, pred_kind, act, refine, args.seed)
                results.append({"state": state, "objective": label, "activation": act, **r.to_dict()})
                premise.setdefault((label, state), []).append(bool(r.reference.premise_holds))
                print(row(label, act, r), flush=True)
    print("\n**Thm 4.1's premise, once per objective** (the frame's ∇²_e L PSD and ∇_e L ≠ 0; heads where it holds)\n")
    print("| objective | drawn state | equilibrium state |\n|---|---|---|")
    for label, *_ in OBJECTIVES:
        cells = []
        for state in ("drawn", "equilibrium"):
            held = [a for a, ok in zip(ACTIVATIONS, premise[(label, state)]) if ok]
            cells.append("holds (all heads)" if len(held) == len(ACTIVATIONS) else
                         ("fails (all heads)" if not held else "holds for " + ", ".join(held)))
        print(f"| {label} | {cells[0]} | {cells[1]} |")
    print(f"\n{len(results)} measurements in {time.perf_counter() - t0:.0f} s (CPU, 1 thread)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
