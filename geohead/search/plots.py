"""The search's PNGs, drawn from trials.csv alone (so ``geohead report`` can rebuild them):
``criteria_vs_knn.png``, ``pareto_front.png``, ``param_importances.png``.

What the score is made of and the parameters' distributions come from search.json (or from the
search itself, which draws the plots before it writes search.json): which criteria the score
weighs (:data:`~geohead.search.score.LABEL_FREE_SCORES`) and the distributions optuna-dashboard's
importances are computed on (:mod:`geohead.search.importance`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from geohead.search.importance import row_importances
from geohead.search.results import TRUTH, format_rho, num, read_trials_csv, spearman_test, unique_complete
from geohead.search.score import (
    CRITERION_NAMES, DEFAULT_SCORE, LABEL_FREE_SCORES, SCORE_CRITERIA, fisher_erank, low_compression,
)
from geohead.search.space import DIMENSIONS

PLOTS = ("criteria_vs_knn.png", "pareto_front.png", "param_importances.png")


def _figure(w: float, h: float, **kwargs: Any) -> Any:
    """A w × h inch Agg figure at 100 dpi (:func:`geohead.plotting.agg_figure`)."""
    from geohead.plotting import agg_figure

    return agg_figure(w, h, dpi=100, **kwargs)


def write_search_plots(out_dir: Path, meta: Mapping[str, Any] | None = None, dest: Path | None = None) -> list[Path]:
    """(Re)create the search PNGs of ``out_dir`` from ``out_dir/trials.csv`` (matplotlib Agg), in
    ``dest`` when given (``geohead report --out``: the search folder is only read), else in ``out_dir``.

    Writes ``criteria_vs_knn.png`` (one panel per criterion the score weighs against backbone
    kNN accuracy, Spearman ρ and its p-value, exact below 10 trials, in each title),
    ``pareto_front.png`` (orbit compression vs backbone RankMe criteria, the Pareto-optimal
    trials over the score criteria (``SCORE_CRITERIA``) marked, colour = kNN accuracy) and
    ``param_importances.png`` (optuna-dashboard's PED-ANOVA importances of the score and of kNN
    accuracy per head dimension, or a note saying why there are none). ``meta``: search.json's
    content (``score``, ``score_weights``, ``param_distributions``; default: read from
    ``out_dir/search.json`` when there is one). Returns the paths written (a plot without data to
    show is skipped). Raises ``FileNotFoundError`` without trials.csv,
    :class:`~geohead.io.OutsideFolderError` when trials.csv is a link out of ``out_dir``.
    """
    from geohead.io import atomic_write, path_in

    out_dir = Path(out_dir)
    path = path_in(out_dir, "trials.csv", "search file")
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; run `geohead search --out {out_dir}` first")
    meta = _read_meta(out_dir) if meta is None else meta
    done = unique_complete(read_trials_csv(path))
    draw = (lambda: _plot_criteria(done, scored_terms(meta)), lambda: _plot_pareto(done),
            lambda: _plot_importances(done, meta.get("param_distributions")))
    written, dest = [], out_dir if dest is None else Path(dest)
    for name, fn in zip(PLOTS, draw):
        fig = fn()
        if fig is None:
            (dest / name).unlink(missing_ok=True)
            continue
        # atomic_write: a link planted at the PNG's name is replaced, never written through
        atomic_write(dest / name, lambda tmp, fig=fig: fig.savefig(tmp, format="png", bbox_inches="tight"))
        written.append(dest / name)
    return written


def _read_meta(out_dir: Path) -> dict[str, Any]:
    """search.json's content, or {} (none, not JSON, not an object, a link out of the folder)."""
    from geohead.io import OutsideFolderError, path_in, read_json

    try:
        meta = read_json(path_in(out_dir, "search.json", "search file"), "search file", "remove it")
    except (OSError, ValueError, OutsideFolderError):
        return {}
    return meta if isinstance(meta, dict) else {}


def scored_terms(meta: Mapping[str, Any]) -> dict[str, float]:
    """The criteria the search's score weighs and their weights (zero weights and names that are no
    criterion left out, so a foreign file sizes no figure): search.json's
    ``score_weights``, else the weights of its ``score`` (``multi``: the five objectives), else the
    default score's (a ``knn`` search records the default label-free score)."""
    weights = meta.get("score_weights")
    if not (isinstance(weights, dict) and weights):
        score = meta.get("score")
        if score == "multi":
            weights = {c: 1.0 for c in SCORE_CRITERIA}
        else:
            weights = LABEL_FREE_SCORES.get(score if isinstance(score, str) else "", LABEL_FREE_SCORES[DEFAULT_SCORE])
    return {k: float(w) for k, w in weights.items() if k in CRITERION_NAMES and num(w) is not None and float(w) > 0}


def term_value(row: Mapping[str, Any], key: str) -> float | None:
    """Criterion ``key`` of a trials.csv row, in [0, 1] as the score uses it: its ``score_<key>``
    column, or, for the two terms recorded only as raw criteria, their transform of those."""
    recorded = num(row.get(f"score_{key}"))
    if recorded is not None:
        return recorded
    if key == "low_compression" and num(row.get("compression")) is not None:
        return low_compression(float(row["compression"]))
    if key == "fisher_erank" and num(row.get("fisher_effective_rank")) is not None and num(row.get("dim_backbone")):
        return fisher_erank(float(row["fisher_effective_rank"]), float(row["dim_backbone"]))
    return None


def _plot_criteria(done: list[dict[str, Any]], terms: Mapping[str, float]) -> Any:
    """One panel per criterion of ``terms`` (key -> weight) against backbone kNN accuracy, or None
    when no criterion has two trials to show."""
    from matplotlib.ticker import MaxNLocator

    pts = {k: [(x, y) for x, y in ((term_value(r, k), num(r.get(TRUTH))) for r in done) if x is not None and y is not None]
           for k in terms}
    if not any(len(p) >= 2 for p in pts.values()):
        return None
    cols = 2 if len(terms) in (2, 4) else min(3, len(terms))
    rows = -(-len(terms) // cols)
    fig = _figure(4.2 * cols, 3.5 * rows, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    total = sum(terms.values())
    for ax, (key, weight) in zip(axes, terms.items()):
        xs, ys = [p[0] for p in pts[key]], [p[1] for p in pts[key]]
        ax.scatter(xs, ys, s=18, color="C0", alpha=0.8)
        if not xs:
            ax.text(0.5, 0.5, "not recorded in trials.csv", ha="center", va="center", transform=ax.transAxes, fontsize=9)
        ax.set_title(f"{CRITERION_NAMES.get(key, key)}\n{format_rho(spearman_test(xs, ys))}", fontsize=9)
        ax.set_xlabel(f"criterion in [0, 1] (weight {weight / total:.2g})", fontsize=8)
        ax.set_ylabel("backbone kNN accuracy", fontsize=8)
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(MaxNLocator(nbins=4))  # few ticks: no overlapping labels
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    for ax in axes[len(terms):]:
        ax.set_visible(False)
    score = spearman_test([r.get("score") for r in done], [r.get(TRUTH) for r in done])
    fig.suptitle(f"the score's criteria vs backbone kNN accuracy (completed trials); the score itself: {format_rho(score)}",
                 fontsize=10)
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


def _plot_importances(done: list[dict[str, Any]], distributions: Mapping[str, Any] | None) -> Any:
    """Bars of the PED-ANOVA importances (optuna-dashboard's) of the score and of kNN accuracy per
    head dimension; a target without importances gets a note on the plot saying why."""
    dists = distributions if isinstance(distributions, dict) and distributions else None
    imps = {label: row_importances(done, key, dists) for key, label in (("score", "label-free score"),
                                                                          (TRUTH, "backbone kNN accuracy"))}
    fig = _figure(6.4, 3.8, layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    dims = [d for d in DIMENSIONS if any(d in imp.values for imp in imps.values())]
    shown = {label: imp for label, imp in imps.items() if imp.values}
    h = 0.8 / max(1, len(shown))
    for j, (label, imp) in enumerate(shown.items()):
        ax.barh([i - 0.4 + h * (j + 0.5) for i in range(len(dims))], [imp.values.get(d, 0.0) for d in dims],
                height=h, label=label, color=f"C{j}")
    notes = [f"{label}: {imp.note}" for label, imp in imps.items() if not imp.values]
    if dims:
        ax.set_yticks(range(len(dims)), dims)
        ax.invert_yaxis()
        ax.set_xlim(0, 1)
        ax.legend(fontsize=8, loc="lower right")
    else:
        ax.set_yticks([])
    if notes:
        ax.text(0.5, 0.5 if not dims else 0.02, "no importances for\n" + "\n".join(notes), transform=ax.transAxes,
                ha="center", va="center" if not dims else "bottom", fontsize=8, wrap=True,
                bbox={"facecolor": "white", "edgecolor": "0.7"})
    ax.set_xlabel("importance (PED-ANOVA, as optuna-dashboard; sums to 1)")
    n = max(imp.n for imp in imps.values())
    ax.set_title(f"parameter importances ({n} completed trials): which dimensions set the best 10 %", fontsize=10)
    return fig


__all__ = ["PLOTS", "write_search_plots"]
