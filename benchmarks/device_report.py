"""The table ``benchmarks/device_check.py`` prints and writes to ``device_check.txt``: one line per
part (status, seconds, what it ran), its error, and the part's own rows under it (each test's
outcome; a throughput row per precision mode; an H_eff row per dtype; the search's best head and
verdict). It reads the report dict that ``device_check.json`` holds, so a stored report renders
again: ``table(json.load(open("device_check.json")))``.
"""
from __future__ import annotations

import math
from typing import Any

PAD = " " * 30  # the indent of a part's own rows, under its "result" column


def _fmt(x: Any, spec: str = ".3g") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def table(report: dict[str, Any]) -> str:
    """The whole table of ``report`` (device_check.json's dict)."""
    env = report["environment"]
    lines = [f"device_check: {env['device']} ({env.get('device_name')}){' --tiny' if env['tiny'] else ''}, "
             f"torch {env['torch']}, {env['threads']} threads, {report['wall_s']:.0f} s",
             f"{'part':12s} {'status':7s} {'seconds':>8s}  result"]
    for name, rec in report["parts"].items():
        r = rec["result"]
        lines.append(f"{name:12s} {rec['status']:7s} {rec['seconds']:8.1f}  {SUMMARY[name](r) if r else ''}")
        if rec["error"]:
            lines.append(f"{PAD}error: {rec['error'][:300]}")
        if r:
            lines += [PAD + row for row in ROWS[name](r)]
    return "\n".join(lines)


def _tests_summary(r: dict[str, Any]) -> str:
    return (f"{r.get('passed', 0)} passed, {r.get('failed', 0)} failed, {r.get('error', 0)} errors, "
            f"{r.get('skipped', 0)} skipped")


def _throughput_summary(r: dict[str, Any]) -> str:
    return f"{r.get('backbone')} batch {r.get('batch_size')}, {r.get('timed_steps')} timed steps"


def _hvp_summary(r: dict[str, Any]) -> str:
    return f"B={r.get('batch')} d={r.get('d')}, {r.get('head')}"


def _search_summary(r: dict[str, Any]) -> str:
    t, sp = r.get("trials", {}), r.get("spearman") or {}
    return (f"{t.get('complete', 0)} complete, {t.get('pruned', 0)} pruned, {t.get('failed', 0)} failed in "
            f"{_fmt(r.get('wall_s'), '.0f')} s; spearman {_fmt(sp.get('rho'), '.3f')} (n={sp.get('n')})")


def _tests_rows(r: dict[str, Any]) -> list[str]:
    return [f"{t['outcome']:8s} {t['name']}" for t in r.get("tests", [])]


def _throughput_rows(r: dict[str, Any]) -> list[str]:
    if not r.get("modes"):
        return []
    rows = [f"{'mode':13s} {'img/s':>9s} {'x fp32':>7s} {'step ms':>8s} {'views ms':>9s} "
            f"{'peak MB':>8s} {'1st s':>7s} {'loss0':>9s} {'rel fp32':>9s}"]
    for m in r["modes"]:
        if not m["ok"]:
            rows.append(f"{m['mode']:13s} failed: {m['error'][:200]}")
            continue
        rows.append(f"{m['mode']:13s} {m['img_per_s']:9.1f} {_fmt(m.get('speedup_vs_fp32'), '7.2f')} "
                    f"{m['step_ms']:8.1f} {m['views_ms']:9.2f} {_fmt(m['peak_mem_mb'], '8.0f')} "
                    f"{m['first_step_s']:7.2f} {m['loss0']:9.4g} {_fmt(m.get('loss0_rel_vs_fp32'), '9.1e')}")
    return rows


def _hvp_rows(r: dict[str, Any]) -> list[str]:
    if not r.get("dtypes"):
        return []
    rows = [f"{'dtype':8s} {'1st HVP s':>10s} {'HVP s':>8s} {'Lanczos':>8s} {'s':>7s} "
            f"{'lambda_min':>11s} {'lambda_max':>11s} {'sym err':>8s} {'FD err':>8s} {'vs CPU':>8s}"]
    for dt, d in r["dtypes"].items():
        rows.append(f"{dt:8s} {d['first_hvp_s']:10.4f} {d['hvp_s']:8.4f} {d['lanczos_steps']:8d} "
                    f"{d['lanczos_s']:7.3f} {d['lambda_min']:11.4g} {d['lambda_max']:11.4g} "
                    f"{_fmt(d['symmetry_rel_err'], '8.1e')} {_fmt(d.get('finite_difference_rel_err'), '8.1e')} "
                    f"{_fmt(d.get('cpu_float64_rel_err'), '8.1e')}")
    return rows


def _search_rows(r: dict[str, Any]) -> list[str]:
    b, v = r.get("best") or {}, r.get("verdict") or {}
    rows = [f"{r.get('data')} ({r.get('backbone')}); best #{b.get('number')} score "
            f"{_fmt(b.get('score'), '.3f')} kNN {_fmt(b.get('knn_backbone'), '.3f')}: {b.get('head_desc')}"]
    if v.get("recommended"):
        rows.append(f"verdict: {v['recommended']} ({v.get('reason')})")
    if r.get("data_note"):
        rows.append(f"note: {r['data_note']}")
    return rows


SUMMARY = {"tests": _tests_summary, "throughput": _throughput_summary, "hvp": _hvp_summary, "search": _search_summary}
ROWS = {"tests": _tests_rows, "throughput": _throughput_rows, "hvp": _hvp_rows, "search": _search_rows}
