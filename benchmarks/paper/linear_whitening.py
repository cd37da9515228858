"""Thm 3.1 (linear heads as implicit subspace whitening): a trained linear head's W Σ_Z Wᵀ vs Σ_Z.

Thm 3.1 says a linear head e = W z can make the embedding covariance W Σ_Z Wᵀ isotropic on its
range (it whitens one subspace, through the metric WᵀW), but being global it cannot flatten a
curved loss (Prop. 3.3). The paper states this as a theorem and gives no number for it; the
closest measurement in the released code is the tracker's covariance "condition number"
λ_max / max(λ_min, 1e-7) of L2-normalised representations (hessian_tracker.py,
experiments.py), which for a rank-deficient covariance is just λ_max · 10⁷.

We train SimCLR (the Table 1 settings) with the released code's linear head,
ProjectionHead(activation='linear'): Linear(d, 2048) · Linear(2048, 2048), no bias, no
BatchNorm, so W = W₂W₁ (2048 × d) has rank ≤ d and W Σ_Z Wᵀ is 2048 × 2048 of rank ≤ d. On the
backbone features of the 10,000 test images (eval mode, no augmentation):

* paper's formula: the clamped condition number of the covariance of L2-normalised backbone
  features and of L2-normalised head outputs;
* corrected: geohead's ``linear_head_geometry``: the condition number of Σ_Z and of W Σ_Z Wᵀ on
  its numerical range (λ_max / λ_r), their RMS deviation from isotropy, the whitening gain
  cond(Σ_Z)/cond(W Σ_Z Wᵀ), and the same for the head at its random initialisation (what
  training adds). Because Thm 3.1 is about *one subspace*, also the condition number over the
  top m eigen-directions, m = the effective rank exp(H(λ/Σλ)) of the trained W Σ_Z Wᵀ, for
  W Σ_Z Wᵀ and for Σ_Z's own top m.

Scales: ``cpu`` = resnet18_w16 (d = 128), 10,000 training images, 20 epochs (paper's SimCLR runs:
ResNet-18 d = 512, 50,000 images, 50 epochs); ``paper`` = those (GPU); ``smoke`` = seconds.

    flock /tmp/geohead-bench.lock python benchmarks/paper/linear_whitening.py [--scale cpu]
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

LINEAR_HEAD = {"hidden_dim": 2048, "out_dim": 2048, "depth": 2, "activation": "identity", "norm": None,
               "last_norm": None, "bias": False}
EPOCHS = {"smoke": 1, "cpu": 20, "paper": 50}


def head_matrix(head) -> torch.Tensor:
    """W = W_{L}…W_1 of a GeometricHead with identity activations and no norms (float64)."""
    w = None
    for name, m in head.mlp.named_children():
        if isinstance(m, torch.nn.Linear):
            mw = m.weight.detach().double()
            w = mw if w is None else mw @ w
    return w


def measure(w: torch.Tensor, z: torch.Tensor) -> dict:
    from geohead.geometry.linear import isotropy, linear_head_geometry

    geo = linear_head_geometry(w, z)
    e = z.double() @ w.T
    ec = (e - e.mean(0)) / (e.shape[0] - 1) ** 0.5
    full = torch.linalg.eigvalsh(ec.T @ ec).flip(0)  # the whole k × k spectrum (what the clamp sees)
    en = F.normalize(e, dim=1)
    enc = (en - en.mean(0)) / (en.shape[0] - 1) ** 0.5
    full_norm = torch.linalg.eigvalsh((enc.T @ enc).float()).flip(0)
    return {"geometry": geo.to_dict(), "cond_paper_z": C.clamped_condition(z), "cond_paper_e": C.clamped_condition(e),
            "spectrum_z": geo.features.eigenvalues, "spectrum_e_range": geo.embeddings.eigenvalues,
            "spectrum_e_full": full.tolist(), "spectrum_e_normalised_float32": full_norm.tolist(),
            "isotropy_normalised_e": isotropy(enc.T @ enc).to_dict()["condition"]}


def effective_rank(lam: list[float]) -> int:
    """exp of the Shannon entropy of the normalised eigenvalues (Roy & Vetterli 2007), rounded."""
    x = torch.tensor(lam, dtype=torch.float64).clamp_min(0)
    p = x / x.sum()
    p = p[p > 0]
    return max(1, round(float(torch.exp(-(p * p.log()).sum()))))


def top_condition(lam: list[float], m: int) -> float:
    """λ_1 / λ_m of a descending spectrum."""
    return lam[0] / lam[m - 1]


def plot(args, title: str, trained: dict, init: dict, m: int, d: int) -> None:
    """linear_whitening.png: the spectra on the numerical range (Σ_Z, W Σ_Z Wᵀ at init and
    trained, the effective rank ``m``) beside the full float32 spectrum the paper's clamp sees."""
    plt = C.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    ax = axes[0]
    for label, lam, style in (("Σ_Z (backbone)", trained["spectrum_z"], "k-"),
                              ("W Σ_Z Wᵀ, random init", init["spectrum_e_range"], "c--"),
                              ("W Σ_Z Wᵀ, trained", trained["spectrum_e_range"], "r-")):
        lam = torch.tensor(lam)
        ax.semilogy(range(1, len(lam) + 1), (lam / lam.mean()).tolist(), style, label=f"{label}: cond {lam[0] / lam[-1]:.3g}")
    ax.axhline(1, color="gray", lw=0.8)
    ax.axvline(m, color="r", ls=":", lw=1, label=f"effective rank of trained W Σ_Z Wᵀ: m = {m}")
    ax.legend(fontsize=8)
    ax.set_xlabel("eigenvalue index (on the range)")
    ax.set_ylabel("λ_i / mean λ")
    ax.set_title("corrected: spectra on the numerical range")
    ax = axes[1]
    lam = torch.tensor(trained["spectrum_e_normalised_float32"]).abs().clamp_min(1e-30)
    ax.semilogy(range(1, len(lam) + 1), lam.tolist(), "r-", label="cov of normalised head outputs (float32), trained")
    ax.axhline(1e-7, color="k", ls="--", lw=1, label="the tracker's clamp 1e-7")
    ax.axvline(d, color="gray", ls=":", lw=1, label=f"rank ≤ d = {d}")
    ax.set_xlabel("eigenvalue index (all k)")
    ax.set_ylabel("|λ_i|")
    ax.set_title(f"paper's formula: λ_max/1e-7 = {trained['cond_paper_e']:.3g}")
    ax.legend(fontsize=8)
    fig.suptitle(title, fontweight="bold", fontsize=9)
    fig.tight_layout()
    C.figure(args.out / "linear_whitening.png", fig)


def main(argv: list[str] | None = None) -> None:
    args = C.finish_args(C.parser(__doc__, "linear_whitening").parse_args(argv))
    t0 = time.perf_counter()
    from geohead.training.model import build_models

    cfg = C.simclr_config(args, "simclr_linear", LINEAR_HEAD, epochs=EPOCHS[args.scale],
                          width_cut=64 if args.scale == "smoke" else None)
    torch.manual_seed(cfg.seed)
    init_model, *_ = build_models(cfg)  # the same initialisation train() starts from
    model, run, (mean, std), train_s = C.train_or_load(cfg, args.overwrite)
    test = C.load_split(args, train=False, n=512 if args.scale == "smoke" else None)
    z, _ = C.features(model, test.images, mean, std)
    trained = measure(head_matrix(model.head), z)
    init = measure(head_matrix(init_model.head), z)
    gt, gi = trained["geometry"], init["geometry"]
    d, k = z.shape[1], head_matrix(model.head).shape[0]

    t = C.Table(f"Thm 3.1: linear SimCLR head Linear({d},{cfg.head.spec['hidden_dim']})·Linear(→{k}), "
                f"backbone {cfg.backbone.name}, {cfg.optim.epochs:g} epochs, covariances of {len(test)} test features, "
                f"scale {args.scale}")
    t.add("backbone Σ_Z condition number", None, trained["cond_paper_z"], gt["features"]["condition"],
          f"paper's: normalised, λ_min clamped 1e-7; corrected: on the range (rank {gt['features']['rank']}/{d})")
    t.add("embedding W Σ_Z Wᵀ condition number, trained", "→ 1 on the range (Thm 3.1)", trained["cond_paper_e"],
          gt["embeddings"]["condition"], f"rank {gt['embeddings']['rank']} of {k}: the clamp reports λ_max·1e7")
    t.add("embedding W Σ_Z Wᵀ condition number, random init", None, init["cond_paper_e"], gi["embeddings"]["condition"])
    t.add("whitening gain cond(Σ_Z)/cond(W Σ_Z Wᵀ), trained", "> 1", trained["cond_paper_z"] / trained["cond_paper_e"],
          gt["whitening_gain"])
    t.add("whitening gain, random init", None, init["cond_paper_z"] / init["cond_paper_e"], gi["whitening_gain"])
    t.add("RMS deviation from isotropy on the range, Σ_Z", None, None, gt["features"]["deviation_normalized"])
    t.add("RMS deviation from isotropy on the range, W Σ_Z Wᵀ trained", "0", None, gt["embeddings"]["deviation_normalized"])
    t.add("RMS deviation from isotropy on the range, W Σ_Z Wᵀ init", None, None, gi["embeddings"]["deviation_normalized"])
    m = effective_rank(trained["spectrum_e_range"])
    er = {"z": effective_rank(trained["spectrum_z"]), "trained": m, "init": effective_rank(init["spectrum_e_range"])}
    top = {"z": top_condition(trained["spectrum_z"], m), "trained": top_condition(trained["spectrum_e_range"], m),
           "init": top_condition(init["spectrum_e_range"], m)}
    t.add("effective rank exp(H(λ)): Σ_Z | W Σ_Z Wᵀ trained | init", None, None, f"{er['z']} | {m} | {er['init']}")
    t.add(f"condition over the top m = {m} directions: W Σ_Z Wᵀ trained", "→ 1 (the whitened subspace)", None,
          top["trained"], f"Σ_Z's top {m}: {top['z']:.3g}; init: {top['init']:.3g}")
    t.add(f"subspace whitening gain cond_top{m}(Σ_Z)/cond_top{m}(W Σ_Z Wᵀ), trained | init", "> 1", None,
          f"{top['z'] / top['trained']:.3g} | {top['z'] / top['init']:.3g}")
    t.add("metric WᵀW condition number, trained | init", None, None,
          f"{gt['metric_condition']:.3g} | {gi['metric_condition']:.3g}")

    plot(args, t.title, trained, init, m, d)
    C.report(args, [t], {"trained": trained, "init": init, "effective_rank": er, "top_condition": top, "m": m,
                         "run": str(run), "train_s": round(train_s, 1)}, t0)


if __name__ == "__main__":
    main()
