"""The search's PNGs, drawn from trials.csv alone (so ``geohead report`` can rebuild them):
``criteria_vs_knn.png``, ``pareto_front.png``, ``param_importances.png``."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from geohead.search.results import (
    CORRELATED, LOG_SCALE, TRUTH, fmt_p, importances, num, read_trials_csv, spearman, unique_complete,
)
from geohead.search.score import SCORE_CRITERIA
from geohead.search.space import DIMENSIONS

PLOTS = ("criteria_vs_knn.png", "pareto_front.png", "param_importances.png")


def _figure(w: float, h: float) -> Any:
    """A w × h inch Agg figure at 100 dpi (:func:`geohead.plotting.agg_figure`)."""
    from geohead.plotting import agg_figure

    return agg_figure(w, h, dpi=100)


def write_search_plots(out_dir: Path) -> list[Path]:
    """(Re)create the search PNGs of ``out_dir`` from ``out_dir/trials.csv`` (matplotlib Agg).

    Writes ``criteria_vs_knn.png`` (each criterion against backbone kNN accuracy, Spearman ρ in
    the panel titles), ``pareto_front.png`` (orbit compression vs backbone RankMe criteria, the
    Pareto-optimal trials over the score criteria (``SCORE_CRITERIA``) marked, colour = kNN accuracy) and
    ``param_importances.png`` (η² of score and kNN accuracy per head dimension). Returns the paths
    written (a plot without data to show is skipped). Raises ``FileNotFoundError`` without trials.csv,
    :class:`~geohead.io.OutsideFolderError` when trials.csv is a link out of ``out_dir``.
    """
    from geohead.io import atomic_write, path_in

    out_dir = Path(out_dir)
    path = path_in(out_dir, "trials.csv", "search file")
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; run `geohead search --out {out_dir}` first")
    rows = read_trials_csv(path)
    done = unique_complete(rows)
    written = []
    for name, fn in zip(PLOTS, (_plot_criteria, _plot_pareto, _plot_importances)):
        fig = fn(done)
        if fig is None:
            (out_dir / name).unlink(missing_ok=True)
            continue
        # atomic_write: a link planted at the PNG's name is replaced, never written through
        atomic_write(out_dir / name, lambda tmp, fig=fig: fig.savefig(tmp, format="png", bbox_inches="tight"))
        written.append(out_dir / name)
    return written


def _plot_criteria(done: list[dict[str, Any]]):
    names = [c for c in CORRELATED if sum(num(r.get(c)) is not None and num(r.get(TRUTH)) is not None for r in done) >= 2]
    if not names:
        return None
    cols = 4
    nrows = math.ceil(len(names) / cols)
    fig = _figure(3.2 * cols, 2.6 * nrows)
    for i, c in enumerate(names):
        ax = fig.add_subplot(nrows, cols, i + 1)
        pts = [(num(r.get(c)), num(r.get(TRUTH))) for r in done]
        pts = [(x, y) for x, y in pts if x is not None and y is not None and (c not in LOG_SCALE or x > 0)]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=14, color="C3" if c == "score" else "C0", alpha=0.8)
        if c in LOG_SCALE:
            ax.set_xscale("log")
        s = spearman([p[0] for p in pts], [p[1] for p in pts])
        rho = "n/a" if s["rho"] is None else f"{s['rho']:+.2f} (p={fmt_p(s['p'])})"
        ax.set_title(f"{c}\nρ = {rho}", fontsize=8)
        ax.tick_params(labelsize=7)
        if i % cols == 0:
            ax.set_ylabel("backbone kNN acc.", fontsize=8)
    fig.suptitle("label-free criteria vs kNN accuracy (completed trials)", fontsize=10)
    fig.tight_layout()
    return fig


def _pareto(points: list[tuple[float, ...]]) -> list[int]:
    """Indices of the points not dominated (all coordinates maximised)."""
    front = []
    for i, p in enumerate(points):
        if not any(all(q[k] >= p[k] for k in range(len(p))) and any(q[k] > p[k] for k in range(len(p)))
                   for j, q in enumerate(points) if j != i):
            front.append(i)
    return front


def _plot_pareto(done: list[dict[str, Any]]):
    keys = [f"score_{c}" for c in SCORE_CRITERIA]
    if not any(all(num(r.get(k)) is not None for k in keys) for r in done):  # a study of an earlier version
        keys = ["score_rankme", "score_uniformity", "score_compression", "score_conditioning"]
    rows = [r for r in done if all(num(r.get(k)) is not None for k in keys)]
    if len(rows) < 2:
        return None
    xkey = "score_invariance" if "score_invariance" in keys else "score_compression"
    pts = [tuple(float(r[k]) for k in keys) for r in rows]
    front = set(_pareto(pts))
    fig = _figure(6.0, 4.6)
    ax = fig.add_subplot(1, 1, 1)
    x = [float(r[xkey]) for r in rows]
    y = [float(r["score_rankme"]) for r in rows]
    knn = [num(r.get(TRUTH)) for r in rows]
    has_knn = all(k is not None for k in knn)
    sc = ax.scatter(x, y, c=knn if has_knn else "C0", cmap="viridis", s=28, edgecolors="none")
    fx = [x[i] for i in sorted(front)]
    fy = [y[i] for i in sorted(front)]
    ax.scatter(fx, fy, s=90, facecolors="none", edgecolors="C3", linewidths=1.2, label=f"Pareto-optimal ({len(keys)} criteria)")
    front2 = sorted(_pareto([(a, b) for a, b in zip(x, y)]), key=lambda i: x[i])
    ax.plot([x[i] for i in front2], [y[i] for i in front2], color="C3", lw=1, ls="--", label="front in this plane")
    for i in sorted(front):
        ax.annotate(str(rows[i]["number"]), (x[i], y[i]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    if has_knn:
        fig.colorbar(sc, ax=ax, label="backbone kNN accuracy")
    ax.set_xlabel("local invariance criterion 1/(1+ratio)" if xkey == "score_invariance" else "orbit compression criterion c/(1+c)")
    ax.set_ylabel("backbone RankMe / d")
    ax.legend(fontsize=7, loc="best")
    ax.set_title("label-free criteria: Pareto front", fontsize=10)
    fig.tight_layout()
    return fig


def _plot_importances(done: list[dict[str, Any]]):
    imp_s = importances(done, "score")
    imp_k = importances(done, TRUTH)
    if not imp_s and not imp_k:
        return None
    dims = list(DIMENSIONS)
    fig = _figure(6.0, 3.6)
    ax = fig.add_subplot(1, 1, 1)
    ys = range(len(dims))
    h = 0.38
    if imp_s:
        ax.barh([y - h / 2 for y in ys], [imp_s.get(d, 0.0) for d in dims], height=h, label="label-free score")
    if imp_k:
        ax.barh([y + h / 2 for y in ys], [imp_k.get(d, 0.0) for d in dims], height=h, label="kNN accuracy")
    ax.set_yticks(list(ys), dims)
    ax.invert_yaxis()
    ax.set_xlabel("η² (share of variance explained by the dimension)")
    ax.set_xlim(0, 1)
    ax.legend(fontsize=8)
    ax.set_title(f"parameter importances ({len(done)} completed trials)", fontsize=10)
    fig.tight_layout()
    return fig


__all__ = ["PLOTS", "write_search_plots"]
