"""Plots and one self-contained ``report.html``: ``geohead report RUN_OR_SEARCH_DIR``.

For a **run folder** (``metrics.jsonl`` / ``last.ckpt`` of ``geohead train``):

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

For a **search folder** (``search.json`` / ``trials.csv`` of ``geohead search``): the plots of
:func:`geohead.search.write_search_plots` (criteria vs accuracy, Pareto front) and any PNG that
``search.json`` names.

``report.html`` embeds every PNG as base64 data (one file to send or archive) with the run's
summary tables. Figures are drawn with matplotlib's Agg canvas directly (no pyplot, no change to
the user's global backend).
"""
from __future__ import annotations

import base64
import dataclasses
import html
import json
import os
from pathlib import Path
from typing import Any, Iterable


class ReportError(ValueError):
    """A folder that is neither a run nor a search, or a missing plotting library."""


@dataclasses.dataclass
class ReportResult:
    """What :func:`make_report` wrote: ``html`` and the PNGs it embeds; ``kind`` "run"/"search";
    ``notes``: what could not be plotted and why."""

    html: Path
    pngs: list[Path]
    kind: str
    notes: list[str]


def _matplotlib():
    try:
        import matplotlib  # noqa: F401
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ReportError(
            f"geohead report needs matplotlib, which cannot be imported here ({exc}); install it with "
            "`pip install matplotlib` (it is a geohead dependency)"
        ) from None
    return Figure, FigureCanvasAgg


def agg_figure(width: float, height: float, **kwargs: Any):
    """A matplotlib ``Figure`` (width × height inches) on the Agg canvas, whatever pyplot's
    backend is (pyplot is never imported); ``kwargs`` go to ``Figure``."""
    Figure, FigureCanvasAgg = _matplotlib()
    fig = Figure(figsize=(width, height), **kwargs)
    FigureCanvasAgg(fig)
    return fig


def _figure(ncols: int = 1, width: float = 6.4, height: float = 4.0):
    fig = agg_figure(width * ncols, height, layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, axes


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=110)
    return path


def detect(folder: str | os.PathLike) -> str:
    """``"search"`` (search.json or trials.csv), ``"run"`` (metrics.jsonl or last.ckpt), else ReportError."""
    d = Path(folder)
    if not d.exists():
        raise ReportError(f"{str(d)!r} does not exist; give a run folder (geohead train) or a search folder (geohead search)")
    if not d.is_dir():
        raise ReportError(f"{str(d)!r} is not a folder; give a run folder (geohead train) or a search folder (geohead search)")
    if (d / "search.json").is_file() or (d / "trials.csv").is_file():
        return "search"
    if (d / "metrics.jsonl").is_file() or (d / "last.ckpt").is_file():
        return "run"
    raise ReportError(
        f"{str(d)!r} holds neither a run (metrics.jsonl, last.ckpt) nor a search (search.json, trials.csv)"
    )


# ---------------------------------------------------------------------- run plots
def read_metrics(run: str | os.PathLike) -> tuple[list[dict], list[dict]]:
    """(loss records, monitor records) of ``RUN/metrics.jsonl`` (lines that fail to parse are skipped)."""
    path = Path(run) / "metrics.jsonl"
    losses, monitors = [], []
    if not path.is_file():
        return losses, monitors
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if rec.get("kind") == "monitor":
            monitors.append(rec)
        elif "loss" in rec:
            losses.append(rec)
    return losses, monitors


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

    from geohead.geometry.spectral import SpectralDensity

    d = diag.get("density")
    if not d:
        return None
    nodes = torch.tensor([[_num(x) for x in row] for row in d["nodes"]], dtype=torch.float64)
    weights = torch.tensor(d["weights"], dtype=torch.float64)
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


def plot_guillotine(probes: dict, path: Path) -> Path | None:
    """Backbone vs head test accuracy per target, one panel per probe (kNN, linear, ...)."""
    targets = (probes or {}).get("targets") or {}
    if not targets:
        return None
    names = list(targets)
    kinds = [p for p in (probes.get("probes") or ["knn"]) if all(p in targets[t]["backbone"] for t in names)]
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
    fig.suptitle("guillotine: what the backbone keeps and the head destroys")
    return _save(fig, path)


# ---------------------------------------------------------------------- HTML
def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (f'<figure><img alt="{html.escape(path.name)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(path.name)}</figcaption></figure>")


def write_html(title: str, blocks: Iterable[tuple[str, str]], path: Path) -> Path:
    """One self-contained HTML file: ``blocks`` are (heading, inner HTML) pairs."""
    body = "\n".join(f"<section><h2>{html.escape(h)}</h2>\n{inner}\n</section>" for h, inner in blocks)
    doc = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #222; }}
img {{ max-width: 100%; border: 1px solid #ddd; }}
figure {{ margin: 1em 0; }} figcaption {{ color: #666; font-size: 0.85em; }}
pre {{ background: #f6f6f6; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }}
.note {{ color: #8a5300; }}
</style></head>
<body><h1>{html.escape(title)}</h1>
{body}
</body></html>
"""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(doc)
    tmp.replace(path)
    return path


def _pre(text: str) -> str:
    return f"<pre>{html.escape(text)}</pre>"


def _run_report(run: Path, out: Path) -> tuple[str, list[tuple[str, str]], list[Path], list[str]]:
    losses, monitors = read_metrics(run)
    notes: list[str] = []
    pngs: list[Path] = []
    cfg = {}
    if (run / "config.json").is_file():
        try:
            cfg = json.loads((run / "config.json").read_text())
        except json.JSONDecodeError:
            notes.append("config.json is not valid JSON; skipped")
    title_bits = [str(cfg.get("objective", "run")), str((cfg.get("backbone") or {}).get("name") or "default backbone"),
                  str((cfg.get("data") or {}).get("name", ""))]
    title = " / ".join(b for b in title_bits if b)
    blocks: list[tuple[str, str]] = []

    training = []
    for name, fn in (("loss.png", lambda p: plot_loss(losses, p, title)), ("monitors.png", lambda p: plot_monitors(monitors, p)),
                     ("hessian.png", lambda p: plot_hessian_tracking(monitors, p))):
        made = fn(out / name)
        if made is not None:
            pngs.append(made)
            training.append(_img(made))
    if not losses:
        notes.append("metrics.jsonl has no loss lines: no training curves")
    if not any("hessian_lambda_min" in m for m in monitors):
        notes.append("the run did not track the effective Hessian (set track.hessian_every > 0 in the recipe for λ_min/λ_max over steps)")
    blocks.append(("Training", "\n".join(training) or "<p>no training metrics</p>"))

    summary = run / "summary.json"
    if summary.is_file():
        try:
            s = json.loads(summary.read_text())
            text = f"steps {s.get('steps')} of {s.get('total_steps')}; final loss {s.get('final_loss')}"
            if s.get("probes"):
                from geohead.probes import GuillotineReport

                text += "\n\nprobes at the end of training:\n" + GuillotineReport.from_dict(s["probes"]).table()
            blocks.append(("Summary", _pre(text)))
        except (json.JSONDecodeError, KeyError, TypeError):
            notes.append("summary.json could not be read; skipped")

    diag_path = run / "diagnose.json"
    if diag_path.is_file():
        try:
            diag = json.loads(diag_path.read_text())
        except json.JSONDecodeError:
            diag = None
            notes.append("diagnose.json is not valid JSON; run geohead diagnose again")
        if diag is not None:
            parts = []
            for name, fn in (("orbit_compression.png", plot_orbit_compression), ("hessian_density.png", plot_density)):
                made = fn(diag, out / name)
                if made is not None:
                    pngs.append(made)
                    parts.append(_img(made))
            if diag.get("probes"):
                made = plot_guillotine(diag["probes"], out / "guillotine.png")
                if made is not None:
                    pngs.append(made)
                    parts.append(_img(made))
            from geohead.diagnose import format_table

            try:
                parts.append(_pre(format_table(diag)))
            except (KeyError, TypeError):
                notes.append("diagnose.json is from another geohead version; its table was skipped")
            blocks.append(("Geometry (geohead diagnose)", "\n".join(parts)))
    else:
        notes.append(f"no diagnose.json: run `geohead diagnose {run}` for orbit compression, the Hessian spectral density "
                     "and the guillotine plots")
    return f"geohead run report: {title}", blocks, pngs, notes


def _pngs_named(obj: Any) -> list[str]:
    """Every string ending in .png inside a JSON value."""
    if isinstance(obj, str):
        return [obj] if obj.lower().endswith(".png") else []
    if isinstance(obj, dict):
        return [p for v in obj.values() for p in _pngs_named(v)]
    if isinstance(obj, list):
        return [p for v in obj for p in _pngs_named(v)]
    return []


def _search_report(folder: Path, out: Path) -> tuple[str, list[tuple[str, str]], list[Path], list[str]]:
    notes: list[str] = []
    try:
        from geohead.search import write_search_plots
    except ImportError as exc:
        raise ReportError(f"this geohead cannot plot searches (geohead.search is not importable: {exc})") from None
    made = [Path(p) for p in write_search_plots(folder)]
    meta: dict = {}
    if (folder / "search.json").is_file():
        try:
            meta = json.loads((folder / "search.json").read_text())
        except json.JSONDecodeError:
            notes.append("search.json is not valid JSON; skipped")
    named = []
    for p in _pngs_named(meta):
        q = Path(p) if Path(p).is_absolute() else folder / p
        if q.is_file():
            named.append(q)
        else:
            notes.append(f"search.json names {p}, which does not exist")
    pngs: list[Path] = []
    for p in made + named:
        p = p if p.is_absolute() else folder / p
        if p.is_file() and p.resolve() not in {q.resolve() for q in pngs}:
            pngs.append(p)
    blocks = [("Search", "\n".join(_img(p) for p in pngs) or "<p>no plots</p>")]
    if (folder / "best_head.json").is_file():
        blocks.append(("Best head (best_head.json)", _pre((folder / "best_head.json").read_text())))
    if meta:
        blocks.append(("search.json", _pre(json.dumps(meta, indent=2)[:20000])))
    title = f"geohead search report: {meta.get('objective', folder.name) if isinstance(meta, dict) else folder.name}"
    return title, blocks, pngs, notes


def make_report(folder: str | os.PathLike, out_dir: str | os.PathLike | None = None) -> ReportResult:
    """Write the PNGs and ``report.html`` of a run or search folder (see the module docstring).

    Args:
        folder: a run folder (``geohead train``) or a search folder (``geohead search``).
        out_dir: where the PNGs and report.html go (default: ``folder`` itself; search plots are
            always written by the search module into the search folder).

    Raises:
        ReportError: not a run or search folder, matplotlib missing.
    """
    folder = Path(folder)
    kind = detect(folder)
    _matplotlib()  # fail early and clearly without matplotlib
    out = Path(out_dir) if out_dir is not None else folder
    out.mkdir(parents=True, exist_ok=True)
    if kind == "run":
        title, blocks, pngs, notes = _run_report(folder, out)
    else:
        title, blocks, pngs, notes = _search_report(folder, out)
    if notes:
        blocks.append(("Notes", "<ul>" + "".join(f'<li class="note">{html.escape(n)}</li>' for n in notes) + "</ul>"))
    page = write_html(title, blocks, out / "report.html")
    return ReportResult(page, pngs, kind, notes)


__all__ = ["ReportError", "ReportResult", "detect", "make_report", "plot_density", "plot_guillotine",
           "plot_hessian_tracking", "plot_loss", "plot_monitors", "plot_orbit_compression", "read_metrics", "write_html"]
