"""What a search leaves in its folder: trials.csv, rungs.csv, best_head.json, search.json, PNGs, a table.

* ``trials.csv``, ``rungs.csv``: see :mod:`geohead.search.results`.
* ``best_head.json``: the recommended head's :class:`~geohead.heads.HeadSpec`, readable by
  ``GeometricHead.from_spec`` and ``geohead train --head``: the pick (the best trial: highest
  objective value among the trials that trained the full budget; for ``--multi`` the
  Pareto-optimal trial with the highest label-free score), or the published head when the
  verdict (:mod:`geohead.search.verdict`) finds the pick's margin over it within the noise;
  ``pick_head.json`` always holds the pick.
* ``search.json``: the summary: heads measured (complete, pruned at the screen or by successive
  halving, failed; duplicates), why the search stopped, the budget and its rungs, the Spearman
  correlation of the label-free score with backbone kNN accuracy (ρ, p, n) over completed trials
  and at each rung, the same for every criterion, the best trial, wall time, parameter
  importances (optuna-dashboard's, :mod:`geohead.search.importance`) and the parameters'
  distributions they are computed on (``param_distributions``: the plots recompute them from
  trials.csv), the PNG names, the optuna-dashboard command, the reference (published head)
  trial and the verdict (margin, noise, which head is recommended and why).
* PNGs from :func:`~geohead.search.plots.write_search_plots`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from geohead.io import atomic_write_text
from geohead.search.plots import write_search_plots
from geohead.search.reference import reference_trial
from geohead.search.results import (  # noqa: F401 - read_trials_csv: callers of the former outputs.read_trials_csv
    TRUTH, add_ranks, correlations, fmt, fmt_p, num, read_trials_csv, rung_correlations, rung_rows, trial_rows,
    unique_complete, write_trials_csv,
)


def best_trial(study: Any) -> Any | None:
    from optuna.trial import TrialState

    complete = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    if not complete:
        return None
    if len(study.directions) > 1:
        front = study.best_trials
        return max(front, key=lambda t: t.user_attrs.get("score", float("-inf")))
    return max(complete, key=lambda t: t.values[0])


def format_table(rows: list[dict[str, Any]], corr: dict[str, dict[str, Any]], value_key: str, top: int = 5) -> str:
    """The final printed table: the top heads and their criteria, then the correlation table.
    Ranked by ``rank`` (the score at the highest rung heads share, :func:`add_ranks`) where the
    rows have one, else completed heads by ``value_key``."""
    done = [r for r in rows if r.get("rank") is not None]
    if done and value_key == "score":
        done.sort(key=lambda r: r["rank"])
        title = "top heads (by the score at the highest rung they share; pruned heads included):"
    else:
        done = sorted((r for r in unique_complete(rows) if num(r.get(value_key)) is not None),
                      key=lambda r: -float(r[value_key]))
        title = f"top heads (by {value_key}):"
    lines = [title]
    hdr = (f"{'trial':>5} {'state':>8} {'depth':>5} {'hidden':>6} {'out':>5} {'act':>8} {'norm':>5} {'last':>14} {'whiten':>6}  "
           f"{'score':>6} {'kNN':>6} {'rankme':>6} {'unif':>6} {'inv':>6} {'fisher':>6} {'cond':>6}")
    lines.append(hdr)
    for r in done[:top]:
        lines.append(
            f"{r['number']:>5} {str(r.get('state')).lower():>8} {str(r.get('depth')):>5} {str(r.get('hidden_dim')):>6} {str(r.get('out_dim')):>5} "
            f"{str(r.get('activation')):>8} {str(r.get('norm')):>5} {str(r.get('last_norm')):>14} {str(r.get('whiten')):>6}  "
            f"{fmt(r.get('score')):>6} {fmt(r.get('knn_backbone')):>6} {fmt(r.get('score_rankme')):>6} "
            f"{fmt(r.get('score_uniformity')):>6} {fmt(r.get('score_invariance')):>6} {fmt(r.get('score_fisher')):>6} "
            f"{fmt(r.get('score_conditioning')):>6}")
    if not done:
        lines.append("  (no completed trial)")
    lines.append("")
    lines.append("Spearman correlation with backbone kNN accuracy over completed trials:")
    lines.append(f"  {'criterion':<26} {'rho':>7} {'p':>8} {'n':>4}")
    for name, c in corr.items():
        lines.append(f"  {name:<26} {fmt(c['rho']):>7} {fmt_p(c['p']):>8} {c['n']:>4}")
    if not corr:
        lines.append("  (no completed trial with kNN accuracy)")
    return "\n".join(lines)


def write_outputs(study: Any, cfg: Any, storage: str, wall_time: float, stopped: str = "target",
                  dashboard: str = "", premise: dict[str, Any] | None = None,
                  verdict: Any | None = None, proxy: dict[str, Any] | None = None) -> tuple[dict[str, Any], str]:
    """Write trials.csv, rungs.csv, best_head.json (and pick_head.json), the plots, search.json
    and table.txt; return (summary, table). ``stopped``: why the search ended; ``dashboard``: the
    optuna-dashboard command; ``premise``: :func:`~geohead.search.escape.criterion_record` (whether
    the escape criterion was on, and why); ``verdict``: the :class:`~geohead.search.verdict.Verdict`
    (None: the pick is recommended unchecked, e.g. after an interrupt); ``proxy``: what the heads
    were measured on (:data:`~geohead.heads.spec.FOUND_ON_KEYS`), recorded in search.json, in
    best_head.json / pick_head.json as ``found_on``, and printed with the axes to re-check."""
    from geohead.search.importance import row_importances, study_distributions
    from geohead.search.score import LABEL_FREE_SCORES
    from geohead.search.storage import count_trials

    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = trial_rows(study)
    rungs = rung_rows(study)
    add_ranks(rows, rungs)
    write_trials_csv(rows, out / "trials.csv")
    write_trials_csv(rungs, out / "rungs.csv")
    multi = len(study.directions) > 1
    value_key = "score" if multi or cfg.score != "knn" else TRUTH
    best = best_trial(study)
    best_info = _write_best(best, out / "pick_head.json", proxy) if best is not None else None
    ref = reference_trial(study)
    recommended = ref if verdict is not None and verdict.recommended == "published" else best
    if recommended is not None:
        _write_best(recommended, out / "best_head.json", proxy)
    corr = correlations(rows)
    score_name = "multi" if multi else cfg.score
    weights = dict(LABEL_FREE_SCORES[cfg.score]) if not multi and cfg.score != "knn" else None
    dists = study_distributions(study)
    plots = write_search_plots(out, {"score": score_name, "score_weights": weights, "param_distributions": dists})
    counts = count_trials(study)
    summary = {
        "study": study.study_name, "storage": storage, "objective": cfg.objective, "data": cfg.data,
        "score": score_name, "criteria": list(study.user_attrs.get("criteria", [])),
        "settings": study.user_attrs.get("search_config"),
        "trials": {**{k: counts[k] for k in ("done", "complete", "pruned", "failed", "running", "waiting", "duplicates")},
                   "pruned_at_screen": sum(1 for r in rows if str(r.get("pruned_by", "")).startswith("screen")),
                   "pruned_at_rung": sum(1 for r in rows if str(r.get("pruned_by", "")).startswith("successive"))},
        "stopped_by": stopped,
        "escape_criterion": premise,
        "score_weights": weights,
        "budget": {"min_steps": cfg.min_steps, "max_steps": cfg.max_steps, "reduction_factor": cfg.reduction_factor,
                   "rungs": list(cfg.rungs) if cfg.prune and not multi else []},
        "spearman": corr.get("score", {"rho": None, "p": None, "n": 0}),
        "rung_spearman": rung_correlations(rungs),
        "correlations": corr,
        "best": best_info,
        "reference": _trial_info(ref) if ref is not None else None,
        "verdict": verdict.to_dict() if verdict is not None else None,
        "proxy": proxy,
        "wall_time_s": wall_time,
        "trial_seconds": sum(float(r["duration_s"]) for r in rows if num(r.get("duration_s")) is not None),
        "importances": {key: row_importances(unique_complete(rows), key, dists).values for key in ("score", TRUTH)},
        "param_distributions": dists,
        "plots": [p.name for p in plots],
        "dashboard": dashboard,
    }
    atomic_write_text(out / "search.json", json.dumps(summary, indent=2, default=str) + "\n")
    table = format_table(rows, corr, value_key)
    head = _headline(summary, out, cfg.max_steps)
    atomic_write_text(out / "table.txt", head.lstrip("\n") + "\n\n" + table + "\n")
    return summary, head + "\n\n" + table


def _write_best(best: Any, path: Path, proxy: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write a trial's head (and the ``proxy`` it was decided on) to ``path``; return its entry of search.json."""
    from geohead.heads import HeadSpec

    HeadSpec.from_dict(best.user_attrs["head"]).to_json(path, found_on=proxy)
    return _trial_info(best)


def _trial_info(best: Any) -> dict[str, Any]:
    """A trial's entry of search.json: number, values, score, kNN accuracies, head."""
    from geohead.heads import HeadSpec

    spec = HeadSpec.from_dict(best.user_attrs["head"])
    ua = best.user_attrs
    return {"number": best.number, "values": list(best.values), "score": ua.get("score"),
            "knn_backbone": ua.get("knn_backbone"), "knn_head": ua.get("knn_head"), "head": spec.to_dict()}


def _headline(summary: dict[str, Any], out: Path, max_steps: int) -> str:
    """The lines above the table: heads measured, why the search stopped, wall time, the best
    head, the verdict against the published head, the score's Spearman ρ at each rung and at
    the full budget."""
    from geohead.heads import HeadSpec

    counts, best, s = summary["trials"], summary["best"], summary["spearman"]
    why = {"target": "the target was reached", "timeout": "the timeout passed", "space": "every head of the space was measured",
           "interrupted": "interrupted"}.get(summary.get("stopped_by", ""), summary.get("stopped_by", ""))
    head = (f"\n{counts['done']} heads measured: {counts['complete']} complete ({max_steps} steps), {counts['pruned']} pruned "
            f"({counts['pruned_at_screen']} at the screen, {counts['pruned_at_rung']} by successive halving), "
            f"{counts['failed']} failed; {counts['duplicates']} trial(s) drew a measured head (not trained, not counted); "
            f"stopped: {why}; wall time {summary['wall_time_s']:.0f} s")
    if summary.get("escape_criterion"):
        esc = summary["escape_criterion"]
        head += f"\nescape criterion {'ON' if esc['on'] else 'OFF'}: {esc['reason']}"
    if best is not None:
        head += (f"\nbest trial {best['number']}: {HeadSpec.from_dict(best['head']).describe()}; "
                 f"score {fmt(best['score'])}, kNN {fmt(best['knn_backbone'])} -> {out / 'pick_head.json'}")
    head += _verdict_lines(summary, out)
    for step, r in summary.get("rung_spearman", {}).items():
        head += (f"\nlabel-free score vs kNN accuracy at step {step} (every trial that trained so far): Spearman rho = "
                 f"{fmt(r.get('rho'))} (p = {fmt_p(r.get('p'))}, n = {r.get('n', 0)})")
    head += (f"\nlabel-free score vs kNN accuracy at {max_steps} steps (completed trials): Spearman rho = "
             f"{fmt(s.get('rho'))} (p = {fmt_p(s.get('p'))}, n = {s.get('n', 0)})")
    return head


def _verdict_lines(summary: dict[str, Any], out: Path) -> str:
    """The published head's line and the verdict's, naming the head best_head.json holds."""
    from geohead.heads import HeadSpec

    ref, v = summary.get("reference"), summary.get("verdict")
    lines = ""
    if ref is not None:
        lines += (f"\npublished head (trial {ref['number']}): {HeadSpec.from_dict(ref['head']).describe()}; "
                  f"score {fmt(ref['score'])}, kNN {fmt(ref['knn_backbone'])}")
    if v is None:
        return lines + (f"\nverdict: not measured; {out / 'best_head.json'} holds the pick" if summary.get("best") else "")
    which = {"pick": "the pick", "published": "the published head", "pick_unchecked": "the pick (unchecked)"}
    lines += f"\nverdict: {v['reason']} -> {out / 'best_head.json'} holds {which[v['recommended']]}"
    return lines + _proxy_line(summary.get("proxy"))


def _proxy_line(proxy: dict[str, Any] | None) -> str:
    """What the verdict was decided on, and what the scale ladder says to re-check when training
    differs from it (:func:`~geohead.search.ladder.recheck`)."""
    from geohead.search.ladder import recheck

    if not proxy:
        return ""
    own = ([f"{proxy['verdict_epochs']:g} epochs"] if proxy.get("verdict_epochs") else []) + (
        [f"on {proxy['verdict_backbone']} (d={proxy['verdict_d']})"] if proxy.get("verdict_backbone") else [])
    verdict = f"; the verdict's runs {' '.join(own)}" if own else ""
    advice = recheck(proxy.get("objective", ""), None, proxy.get("verdict_epochs"), proxy.get("verdict_d"))
    return (f"\ndecided on: {proxy['backbone']} (d={proxy['d']}), {proxy['steps']} steps ({proxy['epochs']:.1f} epochs)"
            f" of {proxy['n_train']:,} images{verdict}; {advice}")


__all__ = ["best_trial", "format_table", "write_outputs"]
