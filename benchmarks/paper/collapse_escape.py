"""Thm 4.1 / Fig. 3 (collapse escape): Hessian tracking of SimSiam from a pseudo-collapsed start.

The released hessian_tracker.py trains SimSiam (negative cosine, stop-gradient; SGD lr 0.05,
momentum 0.9, batch 256, 100 epochs; views RandomResizedCrop(32, 0.2-1) + flip) with a
projector Linear-act-Linear (512 → 2048 → 2048, no bias, **no BatchNorm**) and a predictor
Linear-act-Linear (2048 → 512 → 2048, same activation, no BatchNorm), the projector's weights
multiplied by 0.1 at the start ("pseudo-collapsed"). In the first 5 batches of every epoch it
estimates λ_min of the Hessian of the loss with respect to the backbone features z1 by
float32 power iteration shifted by λ_max (20 + 20 steps) and averages them; it also logs the
std of L2-normalised backbone features and a covariance "condition number" with λ_min
clamped at 1e-7. Published (results/cifar10/resnet18/hessian_tracker/*.npz): λ_min < 0 in
72 of 100 epochs for Swish, 1 of 100 for ReLU.

Columns:

* paper's formula: the released estimator (benchmarks/power_iteration.py, shifted_power_iteration,
  float32, 20 + 20 steps) on our model, same batch; the clamped condition number;
* corrected: Lanczos with full reorthogonalisation in float64 on the same operator (the
  effective Hessian H_eff = G + M of z1 ↦ L(predictor(head(z1)), head(z2)), geohead's
  EffectiveHessian), an eigenvalue counted negative only below −1e-6·max|λ| (a guaranteed
  lower bound on the count, by interlacing); ‖M‖_F/‖H_eff‖_F; the split of the escape curvature
  along the bottom Ritz vector v, λ_min = vᵀGv + vᵀMv, into the objective's part (G) and the
  head's own curvature (M, Thm 4.1's mechanism, exactly 0 for ReLU and linear heads); the
  within-rank condition number. At the first and last epoch also the spectrum of ∇²_e L and
  its sphere-tangent version (Thm 4.1's premise: PSD) and of G, G_tan.

Heads: Swish (SiLU), ReLU, linear (identity activation), as in the released code.

Scales: ``cpu`` = resnet18_w16 backbone (d = 128 instead of 512), projector 128 → 512 → 512 and
predictor 512 → 128 → 512 (the paper's widths divided by 4, like the backbone), 10,000 training
images (instead of 50,000), 25 epochs (instead of 100), the Hessian on 64 samples of the
epoch's last batch (instead of averaging 5 batches of 256). ``paper`` = the published settings
(ResNet-18 CIFAR stem, 2048 widths, 100 epochs, Hessian on 256 samples; GPU). ``smoke`` = seconds.

    flock /tmp/geohead-bench.lock python benchmarks/paper/collapse_escape.py [--scale cpu]
"""
from __future__ import annotations

import copy
import math
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

sys.path.append(str(Path(__file__).resolve().parents[1]))  # benchmarks/: power_iteration

PAPER = {"silu": {"negative_epochs": 72, "epochs": 100}, "relu": {"negative_epochs": 1, "epochs": 100},
         "identity": None}
HEADS = {"silu": "Swish", "relu": "ReLU", "identity": "linear"}
SETTINGS = {  # epochs, backbone width factor, projector width, Hessian samples, Lanczos budget
    "smoke": dict(epochs=1, width=32, samples=8, max_iter=20, n_train=512, batch=128),
    "cpu": dict(epochs=25, width=512, samples=64, max_iter=120, n_train=None, batch=256),
    "paper": dict(epochs=100, width=2048, samples=256, max_iter=200, n_train=None, batch=256),
}
TOL = 1e-6


def config(args, act: str):
    from geohead.config import config_from_dict

    s = SETTINGS[args.scale]
    w = s["width"]
    src = C.train_source(args)
    if s["n_train"]:
        src["n_train"] = s["n_train"]
    d = {
        "objective": "simsiam",
        "seed": args.seed,
        "data": {**src, "views": "simsiam", "view_args": C.PAPER_SIMSIAM_VIEWS},
        "backbone": {"name": "resnet18_cifar" if args.scale == "paper" else "resnet18_w16"},
        "head": {"preset": "simsiam", "init_scale": 0.1,
                 "spec": {"depth": 2, "hidden_dim": w, "out_dim": w, "activation": act, "norm": None,
                          "last_norm": None, "bias": False},
                 "predictor": {"hidden_dim": w // 4, "activation": act, "norm": None, "bias": False}},
        "optim": {"name": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.0, "batch_size": s["batch"],
                  "epochs": s["epochs"], "warmup_epochs": 0, "final_lr_ratio": 1.0},
        "track": {"progress": False, "monitor_every": 0, "log_every": 10},
        "probe": {"enabled": False},
        "out": str(args.runs / f"simsiam_collapsed_{act}"),
    }
    return config_from_dict(d)


class Recorder:
    """The per-epoch measurements (a train() callback)."""

    def __init__(self, args, act: str) -> None:
        self.args, self.act = args, act
        self.s = SETTINGS[args.scale]
        self.rows: list[dict] = []
        self.full: dict[int, dict] = {}

    def __call__(self, info) -> None:
        from geohead.geometry import EffectiveHessian, escape_curvature, normalized_std, within_rank_condition
        from geohead.objectives.base import CollapsedState
        from power_iteration import shifted_power_iteration

        t = time.perf_counter()
        model = info.model
        with torch.no_grad():  # backbone features as the training step sees them (batch statistics)
            bb = copy.deepcopy(model.backbone).train()
            z1, z2 = bb(info.views[0]).float(), bb(info.views[1]).float()
            e1 = model.head(z1)
            hidden = model.head.mlp.act0(model.head.mlp.fc0(z1))
        n = self.s["samples"]
        state = CollapsedState(z1[:n].double(), z2[:n].double(), "training", 0, 0.0)
        last = info.epoch == self.args.epochs_total
        full = info.epoch == 0 or last
        g = torch.Generator().manual_seed(1000 + info.epoch)
        esc = escape_curvature(model.head, info.objective, predictor=model.predictor, state=state, k=4, tol=TOL,
                               mode="accurate", max_iter=self.s["max_iter"], fro_probes=10, generator=g,
                               pullback=full, objective_spectrum=full, m_over_h=True)
        eh32 = EffectiveHessian(model.head, info.objective, z1[:n], z2[:n], predictor=model.predictor,
                                dtype=torch.float32)
        p_min, p_max, _ = shifted_power_iteration(eh32.H, steps=20, generator=torch.Generator().manual_seed(info.epoch))
        zz = torch.cat([z1, z2])
        row = {
            "epoch": info.epoch,
            "lambda_min": esc.lambda_min_H, "lambda_max": esc.lambda_max_H, "num_negative": esc.num_negative_H,
            "head_curvature": esc.head_curvature, "pullback_curvature": esc.pullback_curvature,
            "head_share": esc.head_share, "m_over_h": esc.m_over_h, "grad_norm": esc.grad_norm,
            "converged": esc.converged, "paper_lambda_min": p_min, "paper_lambda_max": p_max,
            "std_backbone": normalized_std(zz), "std_head": normalized_std(e1),
            "healthy_backbone": 1 / math.sqrt(zz.shape[1]), "healthy_head": 1 / math.sqrt(e1.shape[1]),
            "cond_paper": C.clamped_condition(zz), "cond_within_rank": within_rank_condition(zz, normalize=True).condition,
            "rank_backbone": within_rank_condition(zz, normalize=True).rank,
            "dead_hidden_fraction": float((hidden <= 0).all(0).double().mean()) if self.act == "relu" else 0.0,
            "seconds": round(time.perf_counter() - t, 2),
        }
        if full:
            self.full[info.epoch] = esc.to_dict()
        self.rows.append(row)
        print(f"  [{HEADS[self.act]}] epoch {info.epoch:3d}: λ_min {row['lambda_min']:+.3e} (paper est. {p_min:+.3e}) "
              f"λ_max {row['lambda_max']:.3e} ‖M‖/‖H‖ {row['m_over_h']:.2e} std_h {row['std_head']:.4f} "
              f"({row['seconds']:.1f}s)", flush=True)


def run_head(args, act: str) -> dict:
    from geohead.train import train

    cfg = config(args, act)
    args.epochs_total = int(cfg.optim.epochs)
    rec = Recorder(args, act)
    t = time.perf_counter()
    train(cfg, overwrite=True, callback=rec)  # always fresh: the callback needs every epoch
    return {"rows": rec.rows, "full": rec.full, "wall_s": round(time.perf_counter() - t, 1),
            "head_width": cfg.head.spec["hidden_dim"], "backbone": cfg.backbone.name, "epochs": cfg.optim.epochs}


def summarise(res: dict) -> dict:
    rows = [r for r in res["rows"] if r["epoch"] > 0]  # the paper averages over training epochs
    neg_c = sum(r["num_negative"] > 0 for r in rows)
    neg_p = sum(r["paper_lambda_min"] < 0 for r in rows)
    rel = sorted(r["lambda_min"] / max(abs(r["lambda_max"]), abs(r["lambda_min"]), 1e-300) for r in rows)
    mh = sorted(r["m_over_h"] for r in rows)
    last = res["rows"][-1]
    mech = sum(r["pullback_curvature"] >= 0 > r["head_curvature"] for r in rows)
    return {"epochs": len(rows), "negative_corrected": neg_c, "negative_paper": neg_p, "head_only": mech,
            "converged": sum(bool(r["converged"]) for r in rows),
            "median_rel_lambda_min": rel[len(rel) // 2], "median_m_over_h": mh[len(mh) // 2],
            "final": last, "escape_first": res["full"].get(0), "escape_last": res["full"].get(max(res["full"]))}


def table(results: dict, args) -> C.Table:
    any_res = next(iter(results.values()))
    t = C.Table(f"Thm 4.1 / Fig. 3: SimSiam from projector weights × 0.1, no BatchNorm, backbone {any_res['backbone']}, "
                f"heads {any_res['head_width']} wide, {any_res['epochs']:g} epochs, scale {args.scale}")
    for act, res in results.items():
        s = summarise(res)
        name = HEADS[act]
        p = PAPER[act]
        paper_neg = f"{p['negative_epochs']}/{p['epochs']}" if p else None
        t.add(f"{name}: epochs with λ_min(H_eff) < 0", paper_neg, f"{s['negative_paper']}/{s['epochs']}",
              f"{s['negative_corrected']}/{s['epochs']}", "corrected: < -1e-6·max|λ|, Lanczos float64")
        t.add(f"{name}: epochs where only the head's M bends the escape direction down (vᵀGv ≥ 0 > vᵀMv)",
              "smooth heads only (Thm 4.1)", None, f"{s['head_only']}/{s['epochs']}",
              f"Lanczos converged (residual ≤ 1e-8·max|λ|) in {s['converged']}/{s['epochs']}; a Ritz value is ≥ λ_min")
        t.add(f"{name}: median λ_min / max|λ|", None, None, s["median_rel_lambda_min"])
        t.add(f"{name}: median ‖M‖_F/‖H_eff‖_F", None, None, s["median_m_over_h"], "0 = the head adds no curvature")
        esc = s["escape_last"] or {}
        if esc:
            t.add(f"{name}: escape curvature split vᵀGv | vᵀMv (last epoch)", None, None,
                  f"{esc['pullback_curvature']:.2e} | {esc['head_curvature']:.2e}", "λ_min = vᵀGv + vᵀMv")
            t.add(f"{name}: Thm 4.1 premise (∇²_e L PSD on the sphere, ∇_e L ≠ 0), last epoch", None, None,
                  str(esc.get("premise_holds")))
        f = s["final"]
        t.add(f"{name}: ‖∇_e L‖ first → last epoch (M ∝ ∇_e L)", None, None,
              f"{res['rows'][0]['grad_norm']:.2g} → {f['grad_norm']:.2g}")
        t.add(f"{name}: final std of normalised head outputs (healthy {f['healthy_head']:.3f})", None, f["std_head"],
              f["std_head"])
        t.add(f"{name}: final backbone covariance condition number", None, f["cond_paper"], f["cond_within_rank"],
              f"paper's: λ_min clamped at 1e-7; corrected: within rank {f['rank_backbone']}")
        if act == "relu":
            t.add(f"{name}: dead hidden units at the end (fraction)", None, None, f["dead_hidden_fraction"])
    return t


def plot(results: dict, path: Path, title: str) -> None:
    plt = C.pyplot()
    fig, axes = plt.subplots(2, len(results), figsize=(5.6 * len(results), 8.5), squeeze=False)
    for col, (act, res) in enumerate(results.items()):
        rows = res["rows"]
        ep = [r["epoch"] for r in rows]
        scale = [max(abs(r["lambda_max"]), abs(r["lambda_min"]), 1e-300) for r in rows]
        ax = axes[0, col]
        ax.plot(ep, [r["lambda_min"] / s for r, s in zip(rows, scale)], "r-", label="λ_min/max|λ|, Lanczos float64")
        ax.plot(ep, [r["paper_lambda_min"] / s for r, s in zip(rows, scale)], "k--", lw=1.2,
                label="λ_min/max|λ|, paper's shifted power (float32)")
        ax.axhline(0, color="gray", lw=0.8)
        ax.axhline(-TOL, color="r", lw=0.6, ls=":")
        ax.set_yscale("symlog", linthresh=1e-8)
        ax.set_title(f"{HEADS[act]} head")
        ax.set_xlabel("epoch")
        if col == 0:
            ax.set_ylabel("λ_min of H_eff, relative")
        ax2 = ax.twinx()
        ax2.plot(ep, [r["std_head"] for r in rows], "b-", lw=1.5, alpha=0.7, label="std of normalised head outputs")
        ax2.plot(ep, [r["std_backbone"] for r in rows], "c-", lw=1.2, alpha=0.7, label="std of normalised z")
        ax2.axhline(rows[0]["healthy_head"], color="b", ls=":", lw=0.8)
        ax2.set_ylim(bottom=0)
        if col == len(results) - 1:
            ax2.set_ylabel("std of normalised outputs", color="b")
        if col == 0:
            h1, l1 = ax.get_legend_handles_labels()
            h2, l2 = ax2.get_legend_handles_labels()
            ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="lower right")
        ax = axes[1, col]
        ax.semilogy(ep, [r["cond_paper"] for r in rows], "g--", label="paper's condition number (λ_min clamped 1e-7)")
        ax.semilogy(ep, [r["cond_within_rank"] for r in rows], "g-", label="within-rank condition number")
        ax.semilogy(ep, [max(r["m_over_h"], 1e-17) for r in rows], "m-", label="‖M‖_F/‖H_eff‖_F (1e-17 = exactly 0)")
        if all(r["m_over_h"] == 0 for r in rows):
            ax.text(0.5, 0.08, "‖M‖ = 0 exactly: the head adds no curvature", transform=ax.transAxes, ha="center",
                    color="m", fontsize=9)
        ax.set_xlabel("epoch")
        if col == 0:
            ax.legend(fontsize=7)
    fig.suptitle(title, fontweight="bold", fontsize=10)
    fig.tight_layout()
    C.figure(path, fig)


def main(argv: list[str] | None = None) -> None:
    p = C.parser(__doc__, "collapse_escape")
    p.add_argument("--heads", nargs="+", choices=list(HEADS), default=list(HEADS))
    p.add_argument("--replot", action="store_true", help="redraw the table and figure from <out>/results.json")
    args = C.finish_args(p.parse_args(argv))
    t0 = time.perf_counter()
    results = {}
    if args.replot:
        import json

        results = json.loads((args.out / "results.json").read_text())["heads"]
        for res in results.values():
            res["full"] = {int(k): v for k, v in res["full"].items()}
    for act in [] if args.replot else args.heads:
        print(f"training SimSiam with a {HEADS[act]} head ...", flush=True)
        results[act] = run_head(args, act)
    t = table(results, args)
    plot(results, args.out / "collapse_escape.png", t.title)
    if args.replot:  # results.json keeps the measured run (and its wall time)
        print(t.text())
        (args.out / "tables.md").write_text(t.markdown() + "\n")
        return
    C.report(args, [t], {"heads": results, "summary": {a: summarise(r) for a, r in results.items()}}, t0)


if __name__ == "__main__":
    main()
