"""The figures of a training run, for ``geohead report RUN``: from ``metrics.jsonl`` and ``diagnose.json``.

* ``loss.png`` — the training loss (and the learning rate) over steps;
* ``monitors.png`` — RankMe and the std of L2-normalised outputs (Chen & He's collapse check,
  healthy ≈ 1/√dim) of backbone and head over steps;
* ``hessian.png`` — λ_min / λ_max of the effective Hessian at the training batch's features
  and ‖M‖_F/‖H‖_F over steps (when the run tracked them: ``track.hessian_every``);
* from ``diagnose.json`` (``geohead diagnose`` writes it into the run folder):
  ``orbit_compression.png`` (per augmentation family, the width-invariant compression beside
  the paper's two formulas), ``hessian_density.png`` (the spectral density of H_eff at real
  features, by stochastic Lanczos quadrature) and ``guillotine.png`` (probe accuracies of
  backbone vs head, per target).

Each ``plot_*`` function writes one PNG and returns its path, or returns None when the records
hold nothing to plot. Figures come from :func:`geohead.plotting.agg_figure` (Agg canvas, no pyplot).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from geohead.plotting import agg_figure

#: The most probe targets a guillotine figure draws (a run's are the class and a few nuisance factors).
MAX_TARGETS = 256

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def _figure(ncols: int = 1, width: float = 6.4, height: float = 4.0) -> tuple["Figure", Sequence["Axes"]]:
    """A constrained-layout figure with ``ncols`` panels side by side (each width × height inches)."""
    fig = agg_figure(width * ncols, height, layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, axes


def _save(fig: "Figure", path: Path) -> Path:
    fig.savefig(path, dpi=110)
    return path


def _series(records: list[dict], key: str) -> tuple[list[float], list[float]]:
    pts = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
    return [p[0] for p in pts], [float(p[1]) for p in pts]


def plot_loss(losses: list[dict], path: Path, title: str) -> Path | None:
    steps, loss = _series(losses, "loss")
    if not steps:
        return None
    fig, (ax,) = _figure()
    ax.plot(steps, loss, color="C0", lw=1.5, label="loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss", color="C0")
    ax.set_title(f"training loss: {title}")
    ax.grid(alpha=0.3)
    s_lr, lr = _series(losses, "lr")
    if s_lr:
        ax2 = ax.twinx()
        ax2.plot(s_lr, lr, color="C1", lw=1, ls="--", label="learning rate")
        ax2.set_ylabel("learning rate", color="C1")
    return _save(fig, path)


def plot_monitors(monitors: list[dict], path: Path) -> Path | None:
    if not any("rankme_head" in m for m in monitors):
        return None
    fig, (a1, a2) = _figure(2, width=5.2)
    for space, color in (("backbone", "C0"), ("head", "C3")):
        s, v = _series(monitors, f"rankme_{space}")
        a1.plot(s, v, marker="o", ms=3, color=color, label=space)
        s, v = _series(monitors, f"std_{space}")
        a2.plot(s, v, marker="o", ms=3, color=color, label=f"{space}")
        _, healthy = _series(monitors, f"std_healthy_{space}")
        if healthy:
            a2.axhline(healthy[-1], color=color, ls=":", lw=1, label=f"{space} healthy 1/sqrt(dim)")
    a1.set_title("RankMe (effective rank of the outputs)")
    a2.set_title("std of L2-normalised outputs (0 = collapse)")
    for a in (a1, a2):
        a.set_xlabel("step")
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    return _save(fig, path)


def plot_hessian_tracking(monitors: list[dict], path: Path) -> Path | None:
    s_min, lmin = _series(monitors, "hessian_lambda_min")
    if not s_min:
        return None
    s_max, lmax = _series(monitors, "hessian_lambda_max")
    s_r, ratio = _series(monitors, "m_over_h")
    fig, (a1, a2) = _figure(2, width=5.2)
    a1.plot(s_max, lmax, marker="o", ms=3, color="C2", label="λ_max(H_eff)")
    a1.plot(s_min, lmin, marker="o", ms=3, color="C3", label="λ_min(H_eff)")
    a1.axhline(0, color="k", lw=0.8)
    a1.set_yscale("symlog", linthresh=max(1e-6, min([abs(x) for x in lmin + lmax if x != 0] or [1e-6])))
    a1.set_title("H_eff extremes at the training batch's features")
    a2.plot(s_r, ratio, marker="o", ms=3, color="C4")
    a2.set_title("‖M‖_F / ‖H_eff‖_F (the head's own curvature)")
    for a in (a1, a2):
        a.set_xlabel("step")
        a.grid(alpha=0.3)
    a1.legend(fontsize=8)
    return _save(fig, path)


def _num(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def plot_orbit_compression(diag: dict, path: Path) -> Path | None:
    orbits = diag.get("orbits") or {}
    if not orbits:
        return None
    fams = list(orbits)
    kinds = [("compression", "relative (width-invariant, default)"), ("compression_paper_l2", "paper_l2 (L2-normalised)"),
             ("compression_paper_var", "paper_var (per-dim variance; × d_head/d_backbone)")]
    fig, (ax,) = _figure(width=7.5)
    w = 0.8 / len(kinds)
    for j, (key, label) in enumerate(kinds):
        vals = [_num(orbits[f].get(key)) for f in fams]
        ax.bar([i + (j - 1) * w for i in range(len(fams))], vals, width=w, label=label, color=f"C{j}")
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xticks(range(len(fams)), fams)
    ax.set_yscale("log")
    ax.set_ylabel("orbit compression, backbone / head")
    ax.set_title(f"orbit compression per augmentation ({diag.get('data', {}).get('n_orbit_images', '?')} images; > 1: head shrinks orbits)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)


def plot_density(diag: dict, path: Path, grid_points: int = 600) -> Path | None:
    import torch

    from geohead.geometry.density import SpectralDensity
    from geohead.geometry.summary import MAX_LANCZOS_STEPS

    d = diag.get("density")
    if not d:
        return None
    if len(d["nodes"]) > MAX_LANCZOS_STEPS or any(len(row) > MAX_LANCZOS_STEPS for row in d["nodes"]):
        raise ValueError(f"its density has more than {MAX_LANCZOS_STEPS:,} probes or nodes a probe, more than "
                         "geohead diagnose writes")
    nodes = torch.tensor([[_num(x) for x in row] for row in d["nodes"]], dtype=torch.float64)
    weights = torch.tensor(d["weights"], dtype=torch.float64)
    if weights.shape != nodes.shape:
        raise ValueError(f"its density's weights {tuple(weights.shape)} do not match its nodes {tuple(nodes.shape)}")
    sd = SpectralDensity(nodes, weights, int(d["dim"]), int(d.get("n_matvec", 0)))
    finite = nodes[torch.isfinite(nodes)]
    if finite.numel() == 0:
        return None
    lo, hi = float(finite.min()), float(finite.max())
    span = max(hi - lo, 1e-12 * max(abs(lo), abs(hi), 1.0))
    grid = torch.linspace(lo - 0.05 * span, hi + 0.05 * span, grid_points, dtype=torch.float64)
    sigma = span / 150
    dens = sd.density(grid, sigma)
    h = diag.get("hessian") or {}
    fig, (ax,) = _figure(width=7.5)
    ax.fill_between(grid.numpy(), dens.clamp_min(1e-12).numpy(), 1e-12, color="C0", alpha=0.35)
    ax.plot(grid.numpy(), dens.clamp_min(1e-12).numpy(), color="C0", lw=1)
    ax.set_yscale("log")
    ax.set_ylim(bottom=max(1e-6 * float(dens.max()), 1e-12))
    for key, color in (("lambda_min", "C3"), ("lambda_max", "C2")):
        if isinstance(h.get(key), (int, float)):
            ax.axvline(h[key], color=color, ls="--", lw=1, label=f"{key} (Lanczos) = {h[key]:.3g}")
    ax.axvline(0, color="k", lw=0.6)
    # a Gauss node stands for a whole cluster (the near-null space sits in one node of either
    # sign), so only eigenvalues clearly away from 0 are counted: beyond 1 % of max|λ|
    cut = 1e-2 * max(abs(lo), abs(hi))
    neg, near = sd.fraction_below(-cut), sd.fraction_below(cut) - sd.fraction_below(-cut)
    ax.set_title(f"spectral density of H_eff at real features (dim {sd.dim})\nSLQ: {nodes.shape[0]} probes x "
                 f"{nodes.shape[1]} Lanczos steps, Gaussian σ={sigma:.2g}\nestimated fraction of eigenvalues below "
                 f"-1% of max|λ|: {neg:.3f}, within ±1%: {near:.3f}", fontsize=10)
    ax.set_xlabel("eigenvalue")
    ax.set_ylabel("density (log)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_guillotine(probes: dict, path: Path,
                    title: str = "guillotine: what the backbone keeps and the head destroys") -> Path | None:
    """Backbone vs head test accuracy per target, one panel per probe (kNN, linear, ...):
    diagnose.json's probes, or the end-of-training probes.json of a run."""
    targets = (probes or {}).get("targets") or {}
    if not targets:
        return None
    names = list(targets)
    from geohead.probes.guillotine import PROBES

    if len(names) > MAX_TARGETS:
        raise ValueError(f"its probes name {len(names):,} targets, more than the {MAX_TARGETS} a report draws")
    kinds = [p for p in dict.fromkeys(probes.get("probes") or ["knn"])  # each known probe once
             if p in PROBES and all(p in targets[t]["backbone"] for t in names)]
    fig, axes = _figure(len(kinds), width=max(6.4, 0.6 * len(names) + 2), height=4.2)
    w = 0.38
    for ax, probe in zip(axes, kinds):
        for j, space in enumerate(("backbone", "head")):
            vals = [_num(targets[t][space].get(probe)) for t in names]
            ax.bar([i + (j - 0.5) * w for i in range(len(names))], vals, width=w, label=space, color=("C0", "C3")[j])
        ax.scatter(range(len(names)), [_num(targets[t].get("chance")) for t in names], marker="_", s=300, color="k",
                   label="chance", zorder=3)
        ax.set_xticks(range(len(names)), names, rotation=35, ha="right")
        ax.set_ylim(0, 1)
        ax.set_ylabel("test accuracy")
        ax.set_title(f"{probe} probe")
        ax.grid(alpha=0.3, axis="y")
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    return _save(fig, path)



__all__ = ["plot_density", "plot_guillotine", "plot_hessian_tracking", "plot_loss", "plot_monitors",
           "plot_orbit_compression"]
