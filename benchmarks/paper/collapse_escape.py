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
  float32, 20 + 20 steps) of the *ambient* H_eff on our model, same batch; the clamped
  condition number;
* corrected: SimSiam's negative cosine is scale-invariant, so the curvature is measured in the
  sphere-tangent frame (docs/theory.md, "The effective Hessian"): H_tan = G_tan + M with
  G_tan = Jᵀ P ∇²_e L P J, of z1 ↦ L(predictor(head(z1)), head(z2)) (the ambient H_eff adds one
  radial negative eigenvalue per sample for every head, shown beside it). Per epoch: Lanczos
  with full reorthogonalisation in float64 (converged to a residual ≤ 1e-8·max|λ| where
  reported), an eigenvalue counted negative only below −1e-6·max|λ| (a guaranteed lower bound
  on the count, by interlacing); ‖M‖_F/‖H_tan‖_F; the split of the escape curvature along the
  bottom Ritz vector v, λ_min = vᵀG_tan v + vᵀMv; ‖∇_Z f‖ relative to the curvature (these
  training states are not equilibria, so no negative eigenvalue here is a saddle); the
  within-rank condition number. At the first and last epoch also, on the first 12 samples,
  the dense float64 spectra of H_tan and H_eff and the exact ‖M‖_F/‖H_tan‖_F, and the spectrum
  of P ∇²_e L P (Thm 4.1's premise: PSD).

Heads: Swish (SiLU), ReLU, linear (identity activation), as in the released code.

Scales: ``cpu`` = resnet18_w16 backbone (d = 128 instead of 512), projector 128 → 512 → 512 and
predictor 512 → 128 → 512 (the paper's widths divided by 4, like the backbone), 10,000 training
images (instead of 50,000), 25 epochs (instead of 100), the Hessian on 32 samples of the
epoch's last batch (instead of averaging 5 batches of 256; dense spectra on 12 of them).
``--epochs`` and ``--n-train`` shorten it further (the README says which setting it reports). ``paper`` = the published settings
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

sys.path.append(str(Path(__file__).resolve().parents[1]))  # benchmarks/: power_iteration

PAPER = {"silu": {"negative_epochs": 72, "epochs": 100}, "relu": {"negative_epochs": 1, "epochs": 100},
         "identity": None}
HEADS = {"silu": "Swish", "relu": "ReLU", "identity": "linear"}
SETTINGS = {  # epochs, projector width, Hessian samples (Lanczos / dense), Lanczos budget, data
    "smoke": dict(epochs=1, width=32, samples=8, dense=4, max_iter=40, n_train=512, batch=128),
    "cpu": dict(epochs=25, width=512, samples=32, dense=12, max_iter=300, n_train=None, batch=256),
    "paper": dict(epochs=100, width=2048, samples=256, dense=16, max_iter=600, n_train=None, batch=256),
}
TOL = 1e-6


def config(args, act: str):
    from geohead.training.config import config_from_dict

    s = {**SETTINGS[args.scale], **{k: v for k, v in (("epochs", args.epochs), ("n_train", args.n_train)) if v}}
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


def dense_spectra(model, objective, z1, z2) -> dict:
    """Exact float64 spectra of H_tan and the ambient H_eff, and exact ‖M‖_F/‖H_tan‖_F, on a few
    samples: dense Hessians by torch.func (vectorised, unlike one operator product per column)
    and H_tan = H_eff − Jᵀ C J with C = −blockdiag_b (g_b ê_bᵀ + ê_b g_bᵀ)/‖e_b‖ (the identity
    tests/test_geometry_frames.py checks against the H_tangent operator)."""
    from geohead.geometry import EffectiveHessian, stationarity

    eh = EffectiveHessian(model.head, objective, z1.double(), z2.double(), predictor=model.predictor)
    z, n, (b, d) = eh.z, eh.dim, eh.z.shape
    h_amb = torch.func.hessian(eh.composite)(z).reshape(n, n)
    g_e = eh.grad_e
    m = torch.func.hessian(lambda x: (g_e * eh.branch(x)).sum())(z).reshape(n, n)
    e = eh.embeddings
    e_hat = e / e.norm(dim=1, keepdim=True)
    jac = torch.func.vmap(torch.func.jacrev(lambda x: eh.branch(x[None])[0]))(z)  # (B, k, d): J is block-diagonal
    a_vec, c_vec = torch.einsum("bkd,bk->bd", jac, g_e), torch.einsum("bkd,bk->bd", jac, e_hat)
    h_tan = h_amb.clone()
    for i in range(b):  # − Jᵀ C J on the sample's diagonal block
        blk = (torch.outer(a_vec[i], c_vec[i]) + torch.outer(c_vec[i], a_vec[i])) / e[i].norm()
        h_tan[i * d:(i + 1) * d, i * d:(i + 1) * d] += blk
    lt, la, lg = (torch.linalg.eigvalsh(x) for x in (h_tan, h_amb, h_tan - m))
    neg = lambda lam: int((lam < -TOL * lam.abs().max()).sum())  # noqa: E731
    st = stationarity(eh.grad_z, float(lt.abs().max()), z)
    return {"samples": b, "dim": n, "neg_tangent": neg(lt), "neg_ambient": neg(la), "neg_G_tangent": neg(lg),
            "lambda_min_tangent": float(lt[0]), "lambda_max_tangent": float(lt[-1]), "lambda_min_ambient": float(la[0]),
            "m_over_h": float(m.norm() / h_tan.norm()), "gradient_relative": st.gradient_relative}


class Recorder:
    """The per-epoch measurements (a train() callback)."""

    def __init__(self, args, act: str) -> None:
        self.args, self.act = args, act
        self.s = SETTINGS[args.scale]
        self.rows: list[dict] = []
        self.full: dict[int, dict] = {}
        self.dense: dict[int, dict] = {}

    def __call__(self, info) -> None:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # small products: a second (spinning) thread only slows them on a shared CPU
        try:
            self.measure(info)
        finally:
            torch.set_num_threads(threads)

    def measure(self, info) -> None:
        from geohead.geometry import (
            EffectiveHessian, EscapeSettings, escape_curvature, lanczos, normalized_std, within_rank_condition,
        )
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
        # the tangent frame (auto for SimSiam's cosine loss); ambient H_eff beside it
        settings = EscapeSettings(k=4, tol=TOL, mode="accurate", max_iter=self.s["max_iter"], fro_probes=10,
                                  exact_dim=0, pullback=False, objective_spectrum=full, m_over_h=True)
        esc = escape_curvature(model.head, info.objective, settings=settings, predictor=model.predictor, state=state,
                               generator=g)
        eh = EffectiveHessian(model.head, info.objective, state.z1, state.z2, predictor=model.predictor)
        amb = lanczos(eh.H, k=4, which="both", max_iter=self.s["max_iter"], generator=g)
        eh32 = EffectiveHessian(model.head, info.objective, z1[:n], z2[:n], predictor=model.predictor,
                                dtype=torch.float32)
        p_min, p_max, _ = shifted_power_iteration(eh32.H, steps=20, generator=torch.Generator().manual_seed(info.epoch))
        zz = torch.cat([z1, z2])
        row = {
            "epoch": info.epoch, "frame": esc.frame,
            "lambda_min": esc.lambda_min_H, "lambda_max": esc.lambda_max_H, "num_negative": esc.num_negative_H,
            "lambda_min_ambient": amb.lambda_min, "lambda_max_ambient": amb.lambda_max,
            "num_negative_ambient": int((amb.ritz_values < -TOL * amb.scale).sum()), "converged_ambient": amb.converged,
            "head_curvature": esc.head_curvature, "pullback_curvature": esc.pullback_curvature,
            "head_share": esc.head_share, "m_over_h": esc.m_over_h, "m_over_h_stderr": esc.m_over_h_stderr,
            "grad_norm": esc.reference.grad_norm, "gradient_relative": esc.gradient_relative, "stationary": esc.stationary,
            "converged": esc.converged, "paper_lambda_min": p_min, "paper_lambda_max": p_max,
            "std_backbone": normalized_std(zz), "std_head": normalized_std(e1),
            "healthy_backbone": 1 / math.sqrt(zz.shape[1]), "healthy_head": 1 / math.sqrt(e1.shape[1]),
            "cond_paper": C.clamped_condition(zz), "cond_within_rank": within_rank_condition(zz, normalize=True).condition,
            "rank_backbone": within_rank_condition(zz, normalize=True).rank,
            "dead_hidden_fraction": float((hidden <= 0).all(0).double().mean()) if self.act == "relu" else 0.0,
        }
        if full:
            self.full[info.epoch] = esc.to_dict()
            nd = self.s["dense"]
            self.dense[info.epoch] = dense_spectra(model, info.objective, z1[:nd], z2[:nd])
        row["seconds"] = round(time.perf_counter() - t, 2)
        self.rows.append(row)
        print(f"  [{HEADS[self.act]}] epoch {info.epoch:3d}: λ_min tan {row['lambda_min']:+.3e} ({row['num_negative']} neg, "
              f"{'conv' if row['converged'] else 'unconv'}) amb {row['lambda_min_ambient']:+.3e} (paper est. {p_min:+.3e}) "
              f"‖M‖/‖H‖ {row['m_over_h']:.2e} |∇f| rel {row['gradient_relative']:.1e} std_h {row['std_head']:.4f} "
              f"({row['seconds']:.1f}s)", flush=True)


def run_head(args, act: str) -> dict:
    from geohead.training.loop import train

    cfg = config(args, act)
    args.epochs_total = int(cfg.optim.epochs)
    rec = Recorder(args, act)
    t = time.perf_counter()
    train(cfg, overwrite=True, callback=rec)  # always fresh: the callback needs every epoch
    return {"rows": rec.rows, "full": rec.full, "dense": rec.dense, "wall_s": round(time.perf_counter() - t, 1),
            "head_width": cfg.head.spec["hidden_dim"], "backbone": cfg.backbone.name, "epochs": cfg.optim.epochs,
            "n_train": cfg.data.n_train}


def summarise(res: dict) -> dict:
    rows = [r for r in res["rows"] if r["epoch"] > 0]  # the paper averages over training epochs
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    last = res["rows"][-1]
    dense = {int(k): v for k, v in res.get("dense", {}).items()}
    return {"epochs": len(rows),
            "negative_corrected": sum(r["num_negative"] > 0 for r in rows),
            "negative_ambient": sum(r["num_negative_ambient"] > 0 for r in rows),
            "negative_paper": sum(r["paper_lambda_min"] < 0 for r in rows),
            "head_only": sum(r["pullback_curvature"] >= 0 > r["head_curvature"] for r in rows),
            "converged": sum(bool(r["converged"]) for r in rows),
            "stationary": sum(bool(r["stationary"]) for r in rows),
            "median_rel_lambda_min": med([r["lambda_min"] / max(abs(r["lambda_max"]), abs(r["lambda_min"]), 1e-300)
                                          for r in rows]),
            "median_m_over_h": med([r["m_over_h"] for r in rows]),
            "median_gradient_relative": med([r["gradient_relative"] for r in rows]),
            "final": last, "escaped": last["std_head"] >= 0.5 * last["healthy_head"],
            "dense_first": dense.get(0), "dense_last": dense.get(max(dense)) if dense else None,
            "escape_first": _labelled(res["full"], 0), "escape_last": _labelled(res["full"], max(res["full"]))}


def _labelled(full: dict, epoch: int) -> dict | None:
    return {**full[epoch], "epoch_label": epoch} if epoch in full else None


def table(results: dict, args) -> C.Table:
    any_res = next(iter(results.values()))
    t = C.Table(f"Thm 4.1 / Fig. 3: SimSiam from projector weights × 0.1, no BatchNorm, backbone {any_res['backbone']}, "
                f"heads {any_res['head_width']} wide, {any_res['epochs']:g} epochs on "
                f"{any_res.get('n_train') or 'all'} training images, scale {args.scale}; corrected = "
                f"sphere-tangent frame H_tan = G_tan + M (SimSiam's loss is scale-invariant)")
    sums = {act: summarise(res) for act, res in results.items()}
    for act, res in results.items():
        s, name, p = sums[act], HEADS[act], PAPER[act]
        e = s["epochs"]
        paper_neg = f"{p['negative_epochs']}/{p['epochs']}" if p else None
        t.add(f"{name}: epochs with λ_min < 0", paper_neg, f"{s['negative_paper']}/{e}",
              f"{s['negative_corrected']}/{e} (ambient H_eff: {s['negative_ambient']}/{e})",
              f"paper's: float32 shifted power iteration, ambient; corrected: float64 Lanczos on {SETTINGS[args.scale]['samples']} "
              f"samples, < -1e-6·max|λ|, converged in {s['converged']}/{e} epochs (unconverged: a lower bound)")
        d0, d1 = s["dense_first"], s["dense_last"]
        if d0 and d1:
            t.add(f"{name}: negative eigenvalues, dense float64 on {d1['samples']} samples, first → last epoch", None, None,
                  f"tangent {d0['neg_tangent']} → {d1['neg_tangent']} (G_tan {d0['neg_G_tangent']} → {d1['neg_G_tangent']}); "
                  f"ambient {d0['neg_ambient']} → {d1['neg_ambient']}",
                  f"of {d1['dim']}; ambient adds one radial negative per sample where ∇_e L ≠ 0")
            t.add(f"{name}: ‖M‖_F/‖H_tan‖_F exact (dense), first → last epoch", None, None,
                  f"{d0['m_over_h']:.3g} → {d1['m_over_h']:.3g}", "0 = the head adds no curvature (M = 0 exactly)")
        t.add(f"{name}: epochs where only the head's M bends the escape direction down (vᵀG_tan v ≥ 0 > vᵀMv)",
              "smooth heads only (Thm 4.1)", None, f"{s['head_only']}/{e}", "along the bottom Ritz vector of H_tan")
        t.add(f"{name}: median λ_min / max|λ| (tangent frame)", None, None, s["median_rel_lambda_min"])
        t.add(f"{name}: median ‖∇_Z f‖ / (max|λ|·‖Z‖)", None, None, s["median_gradient_relative"],
              f"stationary (≤ 1e-8) in {s['stationary']}/{e} epochs: these training states are no equilibria")
        f = s["final"]
        t.add(f"{name}: ‖∇_e L‖ first → last epoch (M ∝ ∇_e L)", None, None,
              f"{res['rows'][0]['grad_norm']:.2g} → {f['grad_norm']:.2g}")
        t.add(f"{name}: final std of normalised head outputs (healthy {f['healthy_head']:.3f})", None, f["std_head"],
              f["std_head"], "escaped collapse" if s["escaped"] else "still collapsed")
        t.add(f"{name}: final backbone covariance condition number", None, f["cond_paper"], f["cond_within_rank"],
              f"paper's: λ_min clamped at 1e-7; corrected: within rank {f['rank_backbone']}")
        if act == "relu":
            t.add(f"{name}: dead hidden units at the end (fraction)", None, None, f["dead_hidden_fraction"])
    # once for the objective: its premise (P ∇²_e L P = blockdiag cos(p_b, t_b)/(B‖p_b‖²)·P_b for the negative cosine)
    prem = [(f"{HEADS[a]} epoch {s[k]['epoch_label']}", s[k].get("premise_holds")) for a, s in sums.items()
            for k in ("escape_first", "escape_last") if s.get(k)]
    held = sum(bool(v) for _, v in prem)
    t.add("SimSiam's negative cosine: Thm 4.1 premise (P ∇²_e L P ⪰ 0, ∇_e L ≠ 0) at first and last epochs", None, None,
          f"holds at {held}/{len(prem)} states" + ("" if held == len(prem) else
                                                    " (fails: " + ", ".join(n for n, v in prem if not v) + ")"),
          "P ∇²_e L P = blockdiag_b cos(p_b, t_b)/(B‖p_b‖²)·P_b: PSD iff every cos ≥ 0")
    esc = [HEADS[a] for a, s in sums.items() if s["escaped"]]
    sw = sums.get("silu")
    swish = ""
    if sw:
        swish = f"Swish M term: median ‖M‖/‖H_tan‖ {sw['median_m_over_h']:.2g}"
        if sw["dense_last"]:
            swish += f" (dense, last epoch: {sw['dense_last']['m_over_h']:.2g})"
    t.add(f"Verdict: did any head escape collapse in {any_res['epochs']:g} epochs?", "Swish yes, ReLU no", None,
          ("yes: " + ", ".join(esc)) if esc else "no head escaped", swish)
    return t


def plot(results: dict, path: Path, title: str) -> None:
    plt = C.pyplot()
    fig, axes = plt.subplots(2, len(results), figsize=(5.6 * len(results), 8.5), squeeze=False)
    for col, (act, res) in enumerate(results.items()):
        rows = res["rows"]
        ep = [r["epoch"] for r in rows]
        scale = [max(abs(r["lambda_max"]), abs(r["lambda_min"]), 1e-300) for r in rows]
        ax = axes[0, col]
        ax.plot(ep, [r["lambda_min"] / s for r, s in zip(rows, scale)], "r-", label="λ_min/max|λ| of H_tan, Lanczos float64")
        amb = [max(abs(r["lambda_max_ambient"]), abs(r["lambda_min_ambient"]), 1e-300) for r in rows]
        ax.plot(ep, [r["lambda_min_ambient"] / s for r, s in zip(rows, amb)], "r:", lw=1.2,
                label="λ_min/max|λ| of ambient H_eff, Lanczos float64")
        ax.plot(ep, [r["paper_lambda_min"] / s for r, s in zip(rows, amb)], "k--", lw=1.2,
                label="λ_min/max|λ|, paper's shifted power (float32, ambient)")
        ax.axhline(0, color="gray", lw=0.8)
        ax.axhline(-TOL, color="r", lw=0.6, ls=":")
        ax.set_yscale("symlog", linthresh=1e-8)
        ax.set_title(f"{HEADS[act]} head")
        ax.set_xlabel("epoch")
        if col == 0:
            ax.set_ylabel("λ_min, relative")
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
        ax.semilogy(ep, [max(r["m_over_h"], 1e-17) for r in rows], "m-", label="‖M‖_F/‖H_tan‖_F (1e-17 = exactly 0)")
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
    p.add_argument("--epochs", type=int, default=None, help="override the scale's epochs (a smaller documented setting)")
    p.add_argument("--n-train", type=int, default=None, help="override the scale's training images")
    p.add_argument("--merge", nargs="+", type=Path, default=None,
                   help="with --replot: join the heads of these output folders (one head per run) into <out>")
    args = C.finish_args(p.parse_args(argv))
    t0 = time.perf_counter()
    results = {}
    if args.replot:
        import json

        for folder in args.merge or [args.out]:
            results.update(json.loads((folder / "results.json").read_text())["heads"])
        for res in results.values():
            res["full"] = {int(k): v for k, v in res["full"].items()}
            res["dense"] = {int(k): v for k, v in res.get("dense", {}).items()}
        results = {a: results[a] for a in HEADS if a in results}
        if args.merge:  # the joined runs, as one results.json
            (args.out / "results.json").write_text(json.dumps(
                {"scale": args.scale, "merged_from": [str(f) for f in args.merge], "heads": results,
                 "summary": {a: summarise(r) for a, r in results.items()}}, indent=2, default=str) + "\n")
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
