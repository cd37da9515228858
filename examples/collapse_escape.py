"""Thm 4.1 across objectives and activations: where collapse is a saddle, and who makes it one.

For each SSL objective and head activation, build a small 3-layer head (6 → 16 → 16 → 8, the
set-up of docs/theory.md, "Measured facts"), put B = 12 representations at the objective's
collapsed state (all equal up to noise of std 1e-2), and compute the *full* spectra of the
objective's Hessian ∇²_e L, the pullback metric G and the effective Hessian H_eff = G + M in
float64 (Lanczos run to the full dimension: exact). Prints one markdown table:

    λ_min(∇²_e L) | λ_min(G) | λ_min(H_eff) | #neg G | #neg H_eff | ‖M‖/‖H_eff‖ | head share | premise

"#neg" counts eigenvalues below −1e-6·max|λ| (of B·d = 72); "head share" is the fraction of the
escape curvature λ_min(H_eff) that the head's curvature M contributes along the escape direction
(> 1: the objective alone is non-negative there); "premise" is Thm 4.1's premise: ∇²_e L positive
semi-definite (its sphere-tangent version for cosine losses) and ∇_e L ≠ 0.

Usage:  python examples/collapse_escape.py [--norm batch|none] [--seed 0] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import time

import torch
from torch import nn

from geohead.geometry import EscapeSettings, escape_curvature
from geohead.heads import GeometricHead
from geohead.objectives import get_objective

B, D, HIDDEN, K, SPREAD = 12, 6, 16, 8, 1e-2
ACTIVATIONS = ("silu", "gelu", "relu", "identity")

# (label, registry name, kwargs, predictor): "pred" = a 2-layer predictor with the head's
# activation; "none" = predictor nn.Identity() (the head alone against a fixed target)
OBJECTIVES = [
    ("Barlow Twins", "barlow", {}, None),
    ("VICReg", "vicreg", {}, None),
    ("SimCLR (τ=0.5)", "simclr", {}, None),
    ("DINO (logits, K=8)", "dino", {"out_dim": K}, None),
    ("BYOL (cosine) + predictor", "byol", {}, "pred"),
    ("SimSiam (cosine) + predictor", "simsiam", {}, "pred"),
    ("BYOL MSE + predictor", "byol", {"distance": "mse"}, "pred"),
    ("SimSiam MSE + predictor", "simsiam", {"distance": "mse"}, "pred"),
    ("MSE to target (BYOL-MSE, head only)", "byol", {"distance": "mse"}, "none"),
    ("cosine to target (SimSiam, head only)", "simsiam", {}, "none"),
]


def measure(name: str, kw: dict, pred_kind: str | None, act: str, norm: str | None, seed: int):
    torch.manual_seed(seed)
    obj = get_objective(name, **kw)
    head = GeometricHead(D, K, hidden_dim=HIDDEN, depth=3, activation=act, norm=norm)
    pred: nn.Module | None = None
    if pred_kind == "pred":
        pred = GeometricHead(K, K, hidden_dim=HIDDEN, depth=2, activation=act, norm=norm)
    elif pred_kind == "none":
        pred = nn.Identity()
    settings = EscapeSettings(batch_size=B, spread=SPREAD, k=B * D // 2)
    return escape_curvature(head, obj, settings=settings, predictor=pred, generator=torch.Generator().manual_seed(seed))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--norm", choices=["batch", "none"], default="batch", help="hidden-layer norm (BatchNorm in eval mode)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write every result's to_dict() to this file")
    args = ap.parse_args()
    norm = None if args.norm == "none" else "batch"
    torch.set_num_threads(1)  # tiny problems

    print(f"heads {D}→{HIDDEN}→{HIDDEN}→{K}, norm={args.norm} (eval mode), B={B}, spread={SPREAD}, float64, "
          f"seed={args.seed}; full spectra (dim {B * D}); negatives below −1e-6·max|λ|\n")
    print("| objective | head | λ_min(∇²_e L) | λ_min(G) | λ_min(H_eff) | #neg G | #neg H_eff | ‖M‖/‖H‖ | head share | premise |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    results = []
    t0 = time.perf_counter()
    for label, name, kw, pred_kind in OBJECTIVES:
        for act in ACTIVATIONS:
            r = measure(name, kw, pred_kind, act, norm, args.seed)
            results.append({"objective": label, "activation": act, **r.to_dict()})
            ref = r.reference  # what the objective does: ∇²_e L, G
            lam_e = f"{ref.lambda_min_objective:.3g}"
            if r.frame == "tangent":  # scale-invariant loss: H, G, ∇²_e L in the sphere-tangent frame
                lam_e += " (tangent; ambient " + ("PSD" if ref.objective_psd_ambient else "indef.") + ")"
            print(
                f"| {label} | {act} | {lam_e} | {ref.lambda_min_G:.3g} | {r.lambda_min_H:.3g} | {ref.num_negative_G} | "
                f"{r.num_negative_H} | {r.m_over_h:.2g} | {r.head_share:.2f} | {'holds' if ref.premise_holds else 'fails'} |"
            )
    print(f"\n{len(results)} configurations in {time.perf_counter() - t0:.1f} s (CPU, 1 thread)")

    # the theorem's two claims, checked on this table
    flat = [x for x in results if x["activation"] in ("relu", "identity")]
    worst = max(x["m_over_h"] for x in flat)
    print(f"linear/ReLU heads: max ‖M‖/‖H_eff‖ = {worst:.1e} (M vanishes exactly, every objective)")
    smooth = [x for x in results if x["activation"] in ("silu", "gelu")]
    print(f"smooth heads: min ‖M‖/‖H_eff‖ = {min(x['m_over_h'] for x in smooth):.1e}")
    psd = [x for x in flat if x["premise_holds"]]
    print("premise holds, linear/ReLU heads: negatives of H_eff =", sorted({x["num_negative_H"] for x in psd}))
    psd_smooth = [x for x in smooth if x["premise_holds"]]
    print("premise holds, smooth heads: negatives of H_eff =", sorted({x["num_negative_H"] for x in psd_smooth}),
          "head share along the escape direction ≥", f"{min(x['head_share'] for x in psd_smooth if x['num_negative_H']):.2f}"
          if any(x["num_negative_H"] for x in psd_smooth) else "n/a")
    fails = sorted({x["objective"] for x in results if not x["premise_holds"]})
    print("premise fails (∇²_e L indefinite, or ∇_e L = 0):", "; ".join(fails))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
