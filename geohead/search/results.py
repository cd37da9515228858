"""The rows of a search: trials.csv and rungs.csv (writing and reading), and their statistics.

* ``trials.csv``: one row per trial of the study: number, state, objective value(s), the label-free
  score and kNN accuracies, the seven head dimensions, every screen and trained criterion (at the
  step the trial stopped: ``steps_trained``), seed, worker, retry/prune/fail/duplicate reasons,
  seconds per stage.
* ``rungs.csv``: one row per (trial, successive-halving rung) with the score, its criteria and
  kNN accuracy at that step: the ranking the pruner decided on.

Parameter importances are :mod:`geohead.search.importance`'s (Optuna's PED-ANOVA, as
optuna-dashboard shows them).
"""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any, Sequence

from geohead.io import MAX_JSON_FILE, atomic_write_text, read_small
from geohead.search.space import DIMENSIONS

TRUTH = "knn_backbone"
#: Criteria correlated with kNN accuracy in the table and plots (when present), in this order.
CORRELATED = (
    "score", "score_rankme", "score_uniformity", "score_invariance", "score_fisher", "score_conditioning",
    "rankme_backbone_frac", "std_backbone", "local_invariance", "fisher_effective_rank", "fisher_soft_rank_loss",
    "compression", "tangent_invariance", "heff_stable_rank", "heff_condition",
    "condition_backbone", "rankme_head_frac", "std_head",
    "screen_head_escape", "screen_m_over_h", "screen_escape_lambda_min", "screen_heff_stable_rank",
    "screen_heff_condition", "screen_output_condition", "screen_tangent_invariance", "screen_fisher_rank_loss",
)
#: Criteria whose spread is over orders of magnitude (plotted on a log axis).
LOG_SCALE = ("heff_condition", "screen_heff_condition", "screen_output_condition", "condition_backbone",
             "heff_stable_rank", "screen_heff_stable_rank")
_FIRST = ("number", "rank", "state", "value", "score", "knn_backbone", "knn_head") + DIMENSIONS
_LAST = ("seed", "worker", "retry_of", "duplicate_of", "pruned_by", "fail_reason", "screen_seconds", "train_seconds",
         "eval_seconds", "duration_s", "datetime_start")


# ---------------------------------------------------------------------- rows
def trial_rows(study: Any) -> list[dict[str, Any]]:
    """One dict per trial: the columns of trials.csv (the per-rung measurements go to
    :func:`rung_rows`)."""
    rows = []
    multi = len(study.directions) > 1
    names = study.user_attrs.get("criteria", [])
    for t in study.get_trials(deepcopy=False):
        ua = dict(t.user_attrs)
        head = ua.pop("head", None) or {}
        ua.pop("trial", None)
        ua.pop("rungs", None)
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
    room = max(MAX_COLUMNS - len(first) - len(last), 0)  # what read_trials_csv reads back; a study's junk keys past it are left out
    return first + (screen + rest)[:room] + last


def rung_rows(study: Any) -> list[dict[str, Any]]:
    """One dict per (trial, rung) that a trial measured under successive halving: number, step,
    the trial's final state and head dimensions, and the criteria at that step (rungs.csv)."""
    out = []
    for r, t in zip(trial_rows(study), study.get_trials(deepcopy=False)):
        for step, crit in sorted(t.user_attrs.get("rungs", {}).items(), key=lambda kv: int(kv[0])):
            out.append({"number": t.number, "step": int(step), "state": t.state.name,
                        **{d: r.get(d) for d in DIMENSIONS}, **crit})
    return out


def write_trials_csv(rows: list[dict[str, Any]], path: Path) -> Path:
    """Write ``rows`` (from :func:`trial_rows`) to ``path`` atomically, one column per key (None as empty)."""
    cols = _columns(rows) if rows else list(_FIRST)
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in cols})
    return atomic_write_text(path, buf.getvalue())


#: The most columns and cells a trials table may hold: a search of 100,000 heads with every
#: criterion recorded fits; a small file whose header names 100,000 columns does not become
#: 100,000-key dicts per row.
MAX_COLUMNS, MAX_CELLS = 512, 20_000_000


def read_trials_csv(path: Path) -> list[dict[str, Any]]:
    """trials.csv back as dicts, numbers parsed (empty cells are None); read whole only below
    :data:`geohead.io.MAX_JSON_FILE` bytes, at most :data:`MAX_COLUMNS` columns and
    :data:`MAX_CELLS` cells, every row as long as the header; anything else (or a field above the
    csv module's 128 KiB) is a ValueError naming the file."""
    text = read_small(path, "trials table", "rerun geohead search, which rewrites it", limit=MAX_JSON_FILE)
    rows: list[dict[str, Any]] = []
    try:
        reader = csv.reader(io.StringIO(text.decode("utf-8"), newline=""))
        header = next(reader, [])
        if len(header) > MAX_COLUMNS:
            raise csv.Error(f"{len(header):,} columns, above {MAX_COLUMNS}")
        for row in reader:
            if not row:  # a blank line, as csv.DictReader skips it
                continue
            if len(row) != len(header):
                raise csv.Error(f"row {len(rows) + 1} has {len(row)} cells, the header {len(header)}")
            if (len(rows) + 1) * len(header) > MAX_CELLS:
                raise csv.Error(f"more than {MAX_CELLS:,} cells")
            rows.append({k: _parse(v) for k, v in zip(header, row)})
    except (csv.Error, UnicodeDecodeError) as exc:
        raise ValueError(f"{str(path)!r} is not the trials table geohead search writes ({str(exc)[:80]}); "
                         "rerun geohead search, which rewrites it") from None
    return rows


def _parse(v: str | None) -> Any:
    if v is None or v == "":
        return None
    try:
        x = float(v)
    except ValueError:
        return v
    return int(x) if x.is_integer() and "." not in v and "e" not in v.lower() and "inf" not in v.lower() else x


def num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)) else None


def fmt(v: Any, digits: int = 3) -> str:
    x = num(v)
    if x is None:
        return "-" if v is None else str(v)
    if x != 0 and (abs(x) >= 1e4 or abs(x) < 1e-3):
        return f"{x:.2e}"
    return f"{x:.{digits}f}"


def fmt_p(v: Any) -> str:
    """A p-value for a table: never ``0`` (an asymptotic p below 0.001 reads ``<0.001``)."""
    x = num(v)
    return "-" if x is None else ("<0.001" if x < 1e-3 else f"{x:.3f}")


# ---------------------------------------------------------------------- statistics
def spearman(xs: Sequence[Any], ys: Sequence[Any]) -> dict[str, Any]:
    """Spearman ρ, two-sided p-value and n over the pairs where both are finite numbers."""
    pairs = [(a, b) for a, b in ((num(x), num(y)) for x, y in zip(xs, ys)) if a is not None and b is not None]
    n = len(pairs)
    if n < 3 or len({a for a, _ in pairs}) < 2 or len({b for _, b in pairs}) < 2:
        return {"rho": None, "p": None, "n": n}
    from scipy.stats import spearmanr

    res = spearmanr([a for a, _ in pairs], [b for _, b in pairs])
    rho, p = float(res.statistic), float(res.pvalue)
    return {"rho": rho if math.isfinite(rho) else None, "p": p if math.isfinite(p) else None, "n": n}


#: Below this many pairs :func:`spearman_test` is exact: it enumerates all n! pairings.
EXACT_BELOW = 10


def spearman_test(xs: Sequence[Any], ys: Sequence[Any]) -> dict[str, Any]:
    """Spearman ρ, two-sided p-value, n and ``exact`` over the pairs where both are finite numbers.

    Below :data:`EXACT_BELOW` pairs the p-value is a permutation test over every pairing of the
    values (``scipy.stats.permutation_test``, ``permutation_type="pairings"``, all n! of them): the
    asymptotic p-value of :func:`spearman` is meaningless there (0 for n = 3 and ρ = 1). From
    :data:`EXACT_BELOW` on it is :func:`spearman`'s."""
    pairs = [(a, b) for a, b in ((num(x), num(y)) for x, y in zip(xs, ys)) if a is not None and b is not None]
    n = len(pairs)
    if n >= EXACT_BELOW:
        return {**spearman(xs, ys), "exact": False}
    if n < 3 or len({a for a, _ in pairs}) < 2 or len({b for _, b in pairs}) < 2:
        return {"rho": None, "p": None, "n": n, "exact": False}
    import numpy as np
    from scipy.stats import permutation_test, rankdata

    rx = rankdata([a for a, _ in pairs])
    ry = rankdata([b for _, b in pairs])
    ry = ry - ry.mean()

    def rho(x: Any, axis: int = -1) -> Any:
        # Pearson's r of the ranks (Spearman's ρ, ties as average ranks); permuting x keeps its ranks
        xc = x - x.mean(axis=axis, keepdims=True)
        return (xc * ry).sum(axis=axis) / np.sqrt((xc ** 2).sum(axis=axis) * (ry ** 2).sum())

    res = permutation_test((rx,), rho, permutation_type="pairings", vectorized=True,
                           n_resamples=math.factorial(n), alternative="two-sided")
    return {"rho": float(res.statistic), "p": float(res.pvalue), "n": n, "exact": True}


def format_rho(test: dict[str, Any]) -> str:
    """``ρ=+0.50, p=0.45 (exact, n=5)`` of a :func:`spearman_test` result (never ``p=0``: an
    asymptotic p-value below 0.001 reads ``p<0.001``)."""
    n = test.get("n", 0)
    if test.get("rho") is None:
        return f"ρ n/a (n={n})"
    p = test.get("p")
    if p is None:
        ptxt = "p n/a"
    elif test.get("exact"):
        ptxt = f"p={p:.2g}"
    else:
        ptxt = "p<0.001" if p < 1e-3 else f"p={p:.2g}"
    return f"ρ={test['rho']:+.2f}, {ptxt} ({'exact, ' if test.get('exact') else ''}n={n})"


def unique_complete(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Completed trials, each head once (trials that repeated a head, ``duplicate_of``, left out)."""
    return [r for r in rows if r.get("state") == "COMPLETE" and r.get("duplicate_of") is None]


def correlations(rows: list[dict[str, Any]], truth: str = TRUTH) -> dict[str, dict[str, Any]]:
    """Spearman correlation of each criterion in :data:`CORRELATED` with ``truth`` over completed
    trials, each head once (:func:`spearman_test`: exact p below :data:`EXACT_BELOW` heads)."""
    done = unique_complete(rows)
    out = {}
    for c in CORRELATED:
        if any(num(r.get(c)) is not None for r in done):
            out[c] = spearman_test([r.get(c) for r in done], [r.get(truth) for r in done])
    return out


def rung_correlations(rungs: list[dict[str, Any]], truth: str = TRUTH) -> dict[str, dict[str, Any]]:
    """Spearman correlation of the score with ``truth`` at each rung step (str), over every trial
    measured there: the ranking successive halving decided on (:func:`spearman_test`)."""
    steps = sorted({int(r["step"]) for r in rungs})
    return {str(s): spearman_test([r.get("score") for r in rungs if r["step"] == s],
                             [r.get(truth) for r in rungs if r["step"] == s]) for s in steps}


def rank_heads(scores: dict[int, dict[int, float]]) -> list[int]:
    """Trial numbers, best first, by the score at the highest rung heads share.

    ``scores``: trial number -> {step: score} at every rung it reached (a completed trial's final
    score at its last step). Made a total order the way successive halving builds one: every head
    sorted by its score at the first rung (the rung all heads share; a head without one goes
    last), then, rung by rung, the heads that reached the next rung re-sorted by their score
    there among the places they hold. So a head that completed without ever meeting the pruner
    (the published-head trial, the first trials) is placed by the scores it shares with the
    others, not above them for having completed."""
    steps = sorted({s for by in scores.values() for s in by})
    if not steps:
        return sorted(scores)
    order = sorted(scores, key=lambda n: (steps[0] not in scores[n], -scores[n].get(steps[0], 0.0), n))
    for step in steps[1:]:
        places = [i for i, n in enumerate(order) if step in scores[n]]
        moved = sorted((order[i] for i in places), key=lambda n: (-scores[n][step], n))
        for i, n in zip(places, moved):
            order[i] = n
    return order


def add_ranks(rows: list[dict[str, Any]], rungs: list[dict[str, Any]]) -> None:
    """Set ``rank`` (1 = best, :func:`rank_heads`) on every distinct head with a score, completed or
    pruned, in the trial ``rows``; ``rungs``: the rung rows (rungs.csv) holding each head's score
    at each rung it reached. A completed head's last score is its score at ``steps_trained``."""
    heads = {r["number"]: r for r in rows if r.get("state") in ("COMPLETE", "PRUNED")
             and r.get("duplicate_of") is None and num(r.get("score")) is not None}
    scores: dict[int, dict[int, float]] = {n: {} for n in heads}
    for g in rungs:
        if g["number"] in scores and num(g.get("score")) is not None:
            scores[g["number"]][int(g["step"])] = float(g["score"])
    for n, r in heads.items():
        if r["state"] == "COMPLETE" or not scores[n]:
            scores[n][int(num(r.get("steps_trained")) or 0)] = float(r["score"])
    for i, n in enumerate(rank_heads(scores)):
        heads[n]["rank"] = i + 1


__all__ = ["CORRELATED", "LOG_SCALE", "TRUTH", "add_ranks", "correlations", "fmt", "fmt_p", "format_rho", "num", "rank_heads", "read_trials_csv",
           "rung_correlations",
           "rung_rows", "spearman", "spearman_test", "EXACT_BELOW", "trial_rows", "unique_complete", "write_trials_csv"]
