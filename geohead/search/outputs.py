"""What a search leaves in its folder: trials.csv, best_head.json, search.json, PNG plots, a table.

* ``trials.csv``: one row per trial of the study: number, state, objective value(s), the label-free
  score and kNN accuracies, the seven head dimensions, every screen and trained criterion, seed,
  worker, retry/prune/fail reasons, seconds per stage.
* ``best_head.json``: the best trial's :class:`~geohead.heads.HeadSpec` (highest objective value;
  for ``--multi`` the Pareto-optimal trial with the highest label-free score), readable by
  ``GeometricHead.from_spec`` and ``geohead train --head``.
* ``search.json``: the summary: trial counts, the Spearman correlation of the label-free score
  with backbone kNN accuracy (ρ, p, n), the same for every criterion, the best trial, wall time,
  parameter importances and the PNG names.
* PNGs from :func:`write_search_plots` (reads trials.csv only, so ``geohead report`` can rebuild
  them): ``criteria_vs_knn.png``, ``pareto_front.png``, ``param_importances.png``.

Parameter importance here is the correlation ratio η² (the share of a column's variance across
completed trials explained by grouping them by one dimension's value, "n/a" being a value for
dimensions a depth-1 head does not have): model-free, computed from trials.csv alone.
"""
from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any, Sequence

from geohead.io import atomic_write_text
from geohead.search.space import DIMENSIONS

PLOTS = ("criteria_vs_knn.png", "pareto_front.png", "param_importances.png")
TRUTH = "knn_backbone"
#: Criteria correlated with kNN accuracy in the table and plots (when present), in this order.
CORRELATED = (
    "score", "score_rankme", "score_uniformity", "score_compression", "score_conditioning",
    "rankme_backbone_frac", "std_backbone", "compression", "tangent_invariance", "heff_stable_rank", "heff_condition",
    "condition_backbone", "rankme_head_frac", "std_head",
    "screen_head_escape", "screen_m_over_h", "screen_escape_lambda_min", "screen_heff_stable_rank",
    "screen_heff_condition", "screen_output_condition", "screen_tangent_invariance", "screen_fisher_rank_loss",
)
#: Criteria whose spread is over orders of magnitude (plotted on a log axis).
LOG_SCALE = ("heff_condition", "screen_heff_condition", "screen_output_condition", "condition_backbone",
             "heff_stable_rank", "screen_heff_stable_rank")
_FIRST = ("number", "state", "value", "score", "knn_backbone", "knn_head") + DIMENSIONS
_LAST = ("seed", "worker", "retry_of", "duplicate_of", "pruned_by", "fail_reason", "screen_seconds", "train_seconds",
         "eval_seconds", "duration_s", "datetime_start")


# ---------------------------------------------------------------------- rows
def trial_rows(study: Any) -> list[dict[str, Any]]:
    """One dict per trial: the columns of trials.csv."""
    rows = []
    multi = len(study.directions) > 1
    names = study.user_attrs.get("criteria", [])
    for t in study.get_trials(deepcopy=False):
        ua = dict(t.user_attrs)
        head = ua.pop("head", None) or {}
        ua.pop("trial", None)
        row: dict[str, Any] = {"number": t.number, "state": t.state.name}
        if t.values is not None:
            if multi:
                for i, v in enumerate(t.values):
                    row[f"value_{names[i] if i < len(names) else i}"] = v
            else:
                row["value"] = t.values[0]
        for dim in DIMENSIONS:
            v = head.get(dim, t.params.get(dim))
            if head and int(head.get("depth", 2)) == 1 and dim in ("hidden_dim", "activation", "norm"):
                v = "n/a"
            row[dim] = "none" if v is None and head else v
        for k, v in ua.items():
            row[k] = v
        row["duration_s"] = t.duration.total_seconds() if t.duration is not None else None
        row["datetime_start"] = t.datetime_start.isoformat(timespec="seconds") if t.datetime_start else None
        rows.append(row)
    return rows


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for r in rows:
        for k in r:
            seen.setdefault(k, None)
    keys = list(seen)
    first = [k for k in _FIRST if k in seen] + sorted(k for k in keys if k.startswith("value_"))
    last = [k for k in _LAST if k in seen]
    middle = [k for k in keys if k not in first and k not in last]
    screen = sorted(k for k in middle if k.startswith("screen_"))
    rest = [k for k in middle if not k.startswith("screen_")]
    return first + screen + rest + last


def write_trials_csv(rows: list[dict[str, Any]], path: Path) -> Path:
    """Write ``rows`` (from :func:`trial_rows`) to ``path`` atomically, one column per key (None as empty)."""
    cols = _columns(rows) if rows else list(_FIRST)
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in cols})
    return atomic_write_text(path, buf.getvalue())


def read_trials_csv(path: Path) -> list[dict[str, Any]]:
    """trials.csv back as dicts, numbers parsed (empty cells are None)."""
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows.append({k: _parse(v) for k, v in r.items()})
    return rows


def _parse(v: str | None) -> Any:
    if v is None or v == "":
        return None
    try:
        x = float(v)
    except ValueError:
        return v
    return int(x) if x.is_integer() and "." not in v and "e" not in v.lower() and "inf" not in v.lower() else x


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)) else None


# ---------------------------------------------------------------------- statistics
def spearman(xs: Sequence[Any], ys: Sequence[Any]) -> dict[str, Any]:
    """Spearman ρ, two-sided p-value and n over the pairs where both are finite numbers."""
    pairs = [(a, b) for a, b in ((_num(x), _num(y)) for x, y in zip(xs, ys)) if a is not None and b is not None]
    n = len(pairs)
    if n < 3 or len({a for a, _ in pairs}) < 2 or len({b for _, b in pairs}) < 2:
        return {"rho": None, "p": None, "n": n}
    from scipy.stats import spearmanr

    res = spearmanr([a for a, _ in pairs], [b for _, b in pairs])
    rho, p = float(res.statistic), float(res.pvalue)
    return {"rho": rho if math.isfinite(rho) else None, "p": p if math.isfinite(p) else None, "n": n}


def _unique_complete(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Completed trials, each head once (trials that repeated a head, ``duplicate_of``, left out)."""
    return [r for r in rows if r.get("state") == "COMPLETE" and r.get("duplicate_of") is None]


def correlations(rows: list[dict[str, Any]], truth: str = TRUTH) -> dict[str, dict[str, Any]]:
    """Spearman correlation of each criterion in :data:`CORRELATED` with ``truth`` over completed
    trials, each head once."""
    done = _unique_complete(rows)
    out = {}
    for c in CORRELATED:
        if any(_num(r.get(c)) is not None for r in done):
            out[c] = spearman([r.get(c) for r in done], [r.get(truth) for r in done])
    return out


def importances(rows: list[dict[str, Any]], target: str) -> dict[str, float]:
    """η² of ``target`` grouped by each head dimension, over completed trials (see the module docstring)."""
    done = [r for r in _unique_complete(rows) if _num(r.get(target)) is not None]
    if len(done) < 3:
        return {}
    ys = [float(r[target]) for r in done]
    mean = sum(ys) / len(ys)
    total = sum((y - mean) ** 2 for y in ys)
    out = {}
    for dim in DIMENSIONS:
        groups: dict[str, list[float]] = {}
        for r, y in zip(done, ys):
            groups.setdefault(str(r.get(dim)), []).append(y)
        if len(groups) < 2 or total == 0:
            out[dim] = 0.0
            continue
        between = sum(len(g) * (sum(g) / len(g) - mean) ** 2 for g in groups.values())
        out[dim] = between / total
    return out


# ---------------------------------------------------------------------- best, table, summary
def best_trial(study: Any) -> Any | None:
    from optuna.trial import TrialState

    complete = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    if not complete:
        return None
    if len(study.directions) > 1:
        front = study.best_trials
        return max(front, key=lambda t: t.user_attrs.get("score", float("-inf")))
    return max(complete, key=lambda t: t.values[0])


def _fmt(v: Any, digits: int = 3) -> str:
    x = _num(v)
    if x is None:
        return "-" if v is None else str(v)
    if x != 0 and (abs(x) >= 1e4 or abs(x) < 1e-3):
        return f"{x:.2e}"
    return f"{x:.{digits}f}"


def _p(v: Any) -> str:
    x = _num(v)
    return "-" if x is None else (f"{x:.1e}" if x < 1e-3 else f"{x:.3f}")


def format_table(rows: list[dict[str, Any]], corr: dict[str, dict[str, Any]], value_key: str, top: int = 5) -> str:
    """The final printed table: the top heads and their criteria, then the correlation table."""
    done = [r for r in _unique_complete(rows) if _num(r.get(value_key)) is not None]
    done.sort(key=lambda r: -float(r[value_key]))
    lines = [f"top heads (by {value_key}):"]
    hdr = (f"{'trial':>5}  {'depth':>5} {'hidden':>6} {'out':>5} {'act':>8} {'norm':>5} {'last':>14} {'whiten':>6}  "
           f"{'score':>6} {'kNN':>6} {'rankme':>6} {'unif':>6} {'comp':>6} {'cond':>6}")
    lines.append(hdr)
    for r in done[:top]:
        lines.append(
            f"{r['number']:>5}  {str(r.get('depth')):>5} {str(r.get('hidden_dim')):>6} {str(r.get('out_dim')):>5} "
            f"{str(r.get('activation')):>8} {str(r.get('norm')):>5} {str(r.get('last_norm')):>14} {str(r.get('whiten')):>6}  "
            f"{_fmt(r.get('score')):>6} {_fmt(r.get('knn_backbone')):>6} {_fmt(r.get('score_rankme')):>6} "
            f"{_fmt(r.get('score_uniformity')):>6} {_fmt(r.get('score_compression')):>6} {_fmt(r.get('score_conditioning')):>6}")
    if not done:
        lines.append("  (no completed trial)")
    lines.append("")
    lines.append("Spearman correlation with backbone kNN accuracy over completed trials:")
    lines.append(f"  {'criterion':<26} {'rho':>7} {'p':>8} {'n':>4}")
    for name, c in corr.items():
        lines.append(f"  {name:<26} {_fmt(c['rho']):>7} {_p(c['p']):>8} {c['n']:>4}")
    if not corr:
        lines.append("  (no completed trial with kNN accuracy)")
    return "\n".join(lines)


def write_outputs(study: Any, cfg: Any, storage: str, wall_time: float) -> tuple[dict[str, Any], str]:
    """Write trials.csv, best_head.json, the plots, search.json and table.txt; return (summary, table)."""
    from geohead.search.storage import count_trials

    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = trial_rows(study)
    write_trials_csv(rows, out / "trials.csv")
    multi = len(study.directions) > 1
    value_key = "score" if multi or cfg.score == "geometry" else TRUTH
    best = best_trial(study)
    best_info = _write_best(best, out / "best_head.json") if best is not None else None
    corr = correlations(rows)
    plots = write_search_plots(out)
    counts = count_trials(study)
    summary = {
        "study": study.study_name, "storage": storage, "objective": cfg.objective, "data": cfg.data,
        "score": "multi" if multi else cfg.score, "criteria": list(study.user_attrs.get("criteria", [])),
        "settings": study.user_attrs.get("search_config"),
        "trials": {**{k: counts[k] for k in ("complete", "pruned", "failed", "running", "waiting")},
                   "duplicates": sum(1 for r in rows if r.get("duplicate_of") is not None)},
        "spearman": corr.get("score", {"rho": None, "p": None, "n": 0}),
        "correlations": corr,
        "best": best_info,
        "wall_time_s": wall_time,
        "trial_seconds": sum(float(r["duration_s"]) for r in rows if _num(r.get("duration_s")) is not None),
        "importances": {"score": importances(rows, "score"), TRUTH: importances(rows, TRUTH)},
        "plots": [p.name for p in plots],
    }
    atomic_write_text(out / "search.json", json.dumps(summary, indent=2, default=str) + "\n")
    table = format_table(rows, corr, value_key)
    head = _headline(summary, out / "best_head.json")
    atomic_write_text(out / "table.txt", head.lstrip("\n") + "\n\n" + table + "\n")
    return summary, head + "\n\n" + table


def _write_best(best: Any, path: Path) -> dict[str, Any]:
    """Write the best trial's head to ``path``; return its entry of search.json."""
    from geohead.heads import HeadSpec

    spec = HeadSpec.from_dict(best.user_attrs["head"])
    spec.to_json(path)
    ua = best.user_attrs
    return {"number": best.number, "values": list(best.values), "score": ua.get("score"),
            "knn_backbone": ua.get("knn_backbone"), "knn_head": ua.get("knn_head"), "head": spec.to_dict()}


def _headline(summary: dict[str, Any], best_path: Path) -> str:
    """The lines above the table: trial counts, wall time, the best head, the score's Spearman ρ."""
    from geohead.heads import HeadSpec

    counts, best, s = summary["trials"], summary["best"], summary["spearman"]
    head = (f"\n{counts['complete']} complete ({counts['duplicates']} repeating an earlier head), {counts['pruned']} pruned, "
            f"{counts['failed']} failed trial(s); wall time {summary['wall_time_s']:.0f} s")
    if best is not None:
        head += (f"\nbest trial {best['number']}: {HeadSpec.from_dict(best['head']).describe()}; "
                 f"score {_fmt(best['score'])}, kNN {_fmt(best['knn_backbone'])} -> {best_path}")
    head += (f"\nlabel-free score vs kNN accuracy: Spearman rho = {_fmt(s.get('rho'))} (p = {_p(s.get('p'))}, "
             f"n = {s.get('n', 0)})")
    return head


# ---------------------------------------------------------------------- plots
def _figure(w: float, h: float) -> Any:
    """A w × h inch Agg figure at 100 dpi (:func:`geohead.plotting.agg_figure`)."""
    from geohead.plotting import agg_figure

    return agg_figure(w, h, dpi=100)


def write_search_plots(out_dir: Path) -> list[Path]:
    """(Re)create the search PNGs of ``out_dir`` from ``out_dir/trials.csv`` (matplotlib Agg).

    Writes ``criteria_vs_knn.png`` (each criterion against backbone kNN accuracy, Spearman ρ in
    the panel titles), ``pareto_front.png`` (orbit compression vs backbone RankMe criteria, the
    Pareto-optimal trials over the four score criteria marked, colour = kNN accuracy) and
    ``param_importances.png`` (η² of score and kNN accuracy per head dimension). Returns the paths
    written (a plot without data to show is skipped). Raises ``FileNotFoundError`` without trials.csv.
    """
    out_dir = Path(out_dir)
    path = out_dir / "trials.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; run `geohead search --out {out_dir}` first")
    rows = read_trials_csv(path)
    done = _unique_complete(rows)
    written = []
    for name, fn in zip(PLOTS, (_plot_criteria, _plot_pareto, _plot_importances)):
        fig = fn(done)
        if fig is None:
            (out_dir / name).unlink(missing_ok=True)
            continue
        fig.savefig(out_dir / name, bbox_inches="tight")
        written.append(out_dir / name)
    return written


def _plot_criteria(done: list[dict[str, Any]]):
    names = [c for c in CORRELATED if sum(_num(r.get(c)) is not None and _num(r.get(TRUTH)) is not None for r in done) >= 2]
    if not names:
        return None
    cols = 4
    nrows = math.ceil(len(names) / cols)
    fig = _figure(3.2 * cols, 2.6 * nrows)
    for i, c in enumerate(names):
        ax = fig.add_subplot(nrows, cols, i + 1)
        pts = [(_num(r.get(c)), _num(r.get(TRUTH))) for r in done]
        pts = [(x, y) for x, y in pts if x is not None and y is not None and (c not in LOG_SCALE or x > 0)]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=14, color="C3" if c == "score" else "C0", alpha=0.8)
        if c in LOG_SCALE:
            ax.set_xscale("log")
        s = spearman([p[0] for p in pts], [p[1] for p in pts])
        rho = "n/a" if s["rho"] is None else f"{s['rho']:+.2f} (p={_p(s['p'])})"
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
    keys = ("score_rankme", "score_uniformity", "score_compression", "score_conditioning")
    rows = [r for r in done if all(_num(r.get(k)) is not None for k in keys)]
    if len(rows) < 2:
        return None
    pts = [tuple(float(r[k]) for k in keys) for r in rows]
    front = set(_pareto(pts))
    fig = _figure(6.0, 4.6)
    ax = fig.add_subplot(1, 1, 1)
    x = [float(r["score_compression"]) for r in rows]
    y = [float(r["score_rankme"]) for r in rows]
    knn = [_num(r.get(TRUTH)) for r in rows]
    has_knn = all(k is not None for k in knn)
    sc = ax.scatter(x, y, c=knn if has_knn else "C0", cmap="viridis", s=28, edgecolors="none")
    fx = [x[i] for i in sorted(front)]
    fy = [y[i] for i in sorted(front)]
    ax.scatter(fx, fy, s=90, facecolors="none", edgecolors="C3", linewidths=1.2, label="Pareto-optimal (4 criteria)")
    front2 = sorted(_pareto([(a, b) for a, b in zip(x, y)]), key=lambda i: x[i])
    ax.plot([x[i] for i in front2], [y[i] for i in front2], color="C3", lw=1, ls="--", label="front in this plane")
    for i in sorted(front):
        ax.annotate(str(rows[i]["number"]), (x[i], y[i]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    if has_knn:
        fig.colorbar(sc, ax=ax, label="backbone kNN accuracy")
    ax.set_xlabel("orbit compression criterion c/(1+c)")
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


__all__ = ["PLOTS", "correlations", "format_table", "importances", "read_trials_csv", "spearman", "trial_rows",
           "write_outputs", "write_search_plots", "write_trials_csv"]
