"""The plain-text tables of a ``geohead.diagnose/1`` report (``geohead diagnose`` prints them):
the verdict first (:mod:`geohead.diagnose.verdict`), then each measurement's table."""
from __future__ import annotations

import textwrap
from typing import Any

from geohead.diagnose.verdict import verdict

def fmt(x: Any) -> str:
    """How the table prints one number (4 significant digits; ints as ints; missing as '-')."""
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, str):
        return x
    return f"{x:.4g}"


def _rows(header: list[str], rows: list[list[Any]]) -> list[str]:
    cells = [header] + [[fmt(v) if not isinstance(v, str) else v for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    out = []
    for j, r in enumerate(cells):
        out.append("  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    return out


def _read_lines(pre: dict[str, Any]) -> list[str]:
    """What was read from a checkpoint trained elsewhere: layout, prefixes, the head check, notes."""
    if not pre:
        return []
    check = pre.get("head_check")
    line = (f"read: {pre.get('layout')} layout, backbone prefix {(pre.get('backbone') or {}).get('prefix')!r}, head prefix "
            f"{pre.get('head_prefix')!r}; " + (f"head check vs {check['reference']}: max |difference| "
                                               f"{fmt(check['max_abs_diff'])} (exact: {fmt(check['exact'])})" if check else "no head check"))
    return [line] + [f"  note: {n}" for n in pre.get("notes", []) if n.startswith(("no head", "assumed"))]


#: what a report's ``data.normalisation`` says of the mean/std the images were normalised with
_NORMALISATION = {"training": "the training data's mean/std", "given": "the model's mean/std (given or recorded)",
                  "data": "the data's own mean/std (the model's were not given)"}


def _normalisation(report: dict[str, Any]) -> str:
    """Which mean/std the images were normalised with: the report's ``data.normalisation``; a
    geohead run's report without it used the training data's, a foreign model's did not say."""
    key = report["data"].get("normalisation")
    if isinstance(key, str) and key in _NORMALISATION:
        return _NORMALISATION[key]
    return "a mean/std the report does not name" if report.get("pretrained") else _NORMALISATION["training"]


def _head_text(src: dict[str, Any]) -> str:
    """What the header says of the head: a GeometricHead's spec, else what a forward found."""
    hs = src.get("head_spec") or {}
    if hs.get("depth") == 1:  # a linear head's spec keeps a hidden_dim it does not use
        return f"linear {hs.get('in_dim')}->{hs.get('out_dim')}"
    if hs.get("depth") is not None:
        return f"{hs.get('activation')} depth {hs.get('depth')} {hs.get('in_dim')}->{hs.get('hidden_dim')}->{hs.get('out_dim')}"
    return str(src.get("head") or hs.get("module") or "?")


def format_table(report: dict[str, Any]) -> str:
    """The report as plain-text tables (every number printed with :func:`fmt`)."""
    src, data, e, h = report["source"], report["data"], report["escape"], report["hessian"]
    lines = _read_lines(report.get("pretrained") or {})
    split = data.get("probe_split") or {}
    lines += [
        f"geohead diagnose: {src['objective']} | backbone {src['backbone']} (d={src['backbone_dim']}) | head "
        f"{_head_text(src)}" + (f" | step {src['step']}/{src['total_steps']}" if src.get("step") is not None else ""),
        f"data: {data['test']} ({data['n_test']} test images; normalised with {_normalisation(report)})"
        + ("; probe-test part held out of it, disjoint from the probe-train part" if split.get("held_out") else ""),
        "",
        *textwrap.wrap("Verdict: " + verdict(report), width=110),
        "",
        f"Escape curvature at complete collapse (B={e['batch_size']}, spread {fmt(e['spread'])}, {e['dtype']}, BN {e['bn_mode']}, "
        f"{e['frame']} frame)",
        f"  equilibrium: {e['equilibrium']} (|grad_Z f| / (max|lambda| |Z|) = {fmt(e['gradient_relative'])}; "
        + ("a saddle" if e["saddle"] else "no saddle: " + ("no negative curvature" if e["stationary"] else "not stationary"))
        + ")",
    ]
    tangent = e["frame"] == "tangent"
    lines += _rows(
        ["operator", "lambda_min", "lambda_max", "#negative"],
        [["H_tan = G_tan + M" if tangent else "H_eff = G + M", e["lambda_min_H"], e["lambda_max_H"], e["num_negative_H"]],
         ["G_tan (pullback)" if tangent else "G (pullback)", e["lambda_min_G"], e["lambda_max_G"], e["num_negative_G"]],
         ["P hess_e L P" if tangent else "objective Hessian", e["lambda_min_objective"], e["lambda_max_objective"],
          e["num_negative_objective"]]]
        + ([["H_eff (ambient, reference)", e["lambda_min_H_ambient"], None, e["num_negative_H_ambient"]]] if tangent else []),
    )
    lines.append(
        f"  head curvature along the escape direction v'Mv = {fmt(e['head_curvature'])} (v'Gv = {fmt(e['pullback_curvature'])}), "
        f"head share {fmt(e['head_share'])}, |M|/|H| = {fmt(e['m_over_h'])}, Thm 4.1 premise holds: {fmt(e['premise_holds'])}"
    )
    lines += ["", f"Effective Hessian at real features (B={data['hessian_samples']}, two training views, {h['dtype']}, BN eval)"]
    lines += _rows(
        ["lambda_min", "lambda_max", "#negative", "cond (within rank)", "|M|/|H|", "converged"],
        [[h["lambda_min"], h["lambda_max"], h["num_negative"], h["condition_within_rank"], h["m_over_h"], h["converged"]]],
    )
    lines += ["", f"Orbit compression, backbone over head ({data['n_orbit_images']} images; > 1: the head shrinks orbits more)"]
    rows = []
    for name, o in report["orbits"].items():
        t = o.get("tangents") or {}
        rows.append([name, o["compression"], o["compression_paper_l2"], o["compression_paper_var"], t.get("invariance"),
                     t.get("killed_fraction"), f"{fmt(t.get('rank_backbone'))}->{fmt(t.get('rank_head'))}"])
    lines += _rows(["family", "relative", "paper_l2", "paper_var", "tangent gain", "killed", "Fisher rank"], rows)
    summary = report.get("orbit_summary") or {}
    if summary.get("head"):
        lines.append(f"  the head {summary['head']} augmentation orbits (geometric mean of 'relative' over "
                     f"{summary['families']} families: {fmt(summary['geometric_mean'])})")
    lines += ["", "Collapse monitors (test features)"]
    lines += _rows(
        ["space", "RankMe", "alpha-ReQ", "std", "healthy std", "condition", "rank/dim"],
        [[sp, c["rankme"], c["alpha_req"], c["normalized_std"], c["healthy_std"], c["condition"], f"{c['rank']}/{c['dim']}"]
         for sp, c in report["collapse"].items()],
    )
    if report.get("probes"):
        from geohead.probes import GuillotineReport

        lines += ["", "Guillotine probes (test accuracy; what the head destroyed the backbone keeps)"]
        lines += ["  " + line for line in GuillotineReport.from_dict(report["probes"]).table().splitlines()]
    return "\n".join(lines)


__all__ = ["fmt", "format_table"]
