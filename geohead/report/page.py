"""The report page: the PNGs of a run or a search folder in one self-contained ``report.html``.

For a **run folder** (``metrics.jsonl`` / ``last.safetensors`` of ``geohead train``): the training
curves, the end-of-training probes of ``probes.json`` (backbone vs head) and, from ``diagnose.json`` (``geohead diagnose`` writes it into the run folder), the
geometry figures of :mod:`geohead.report.run_plots` (loss, collapse monitors, Hessian extremes over
steps; orbit compression, the spectral density of H_eff, guillotine probes), with the run's
summary tables. A folder holding only GeometryMonitor JSONL (someone else's loop) gets the
monitors of one run (:mod:`geohead.report.curves`: the newest log's last run), and the loss curve
where the file holds a loss. Each run figure has a caption
(:mod:`geohead.report.captions`): what to look for, and what this run shows.

For a **search folder** (``search.json`` / ``trials.csv`` of ``geohead search``): the plots of
:func:`geohead.search.write_search_plots` (criteria vs accuracy, Pareto front), drawn afresh beside
the report (the search folder is only read, unless the report goes there), and any other PNG the
folder holds or ``search.json`` names.

``report.html`` embeds every PNG as base64 data (one file to send or archive) with the run's
summary tables. Figures are drawn with matplotlib's Agg canvas directly (:mod:`geohead.plotting`:
no pyplot, no change to the user's global backend).
"""
from __future__ import annotations

import base64
import dataclasses
import html
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable

from geohead.io import folder_problem, outermost_new, read_json, read_small, refuse_links_out
from geohead.plotting import MatplotlibMissing, require_matplotlib
from geohead.report.captions import loss_caption, monitors_caption, probes_caption
from geohead.report.curves import Curves, monitor_files, read_curves
from geohead.report.run_plots import (
    plot_density, plot_guillotine, plot_hessian_tracking, plot_loss, plot_monitors, plot_orbit_compression,
)


#: The most bytes of a PNG the report embeds (base64 makes it a third larger in report.html).
MAX_PLOT_FILE = 32 << 20
#: The most PNGs a search page embeds (a search draws three; report.html holds at most MAX_PNGS × MAX_PLOT_FILE).
MAX_PNGS = 64
#: how to mend a diagnose report geohead cannot read
_AGAIN = "run `geohead diagnose` again or remove it"


#: what ``geohead report`` takes, for its errors
_INPUTS = ("a run folder (geohead train), a search folder (geohead search), a folder of GeometryMonitor *.jsonl logs, "
           "or the JSON of `geohead diagnose`")


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


def detect(folder: str | os.PathLike) -> str:
    """``"search"`` (search.json or trials.csv), ``"run"`` (metrics.jsonl or a checkpoint), else ReportError."""
    d = Path(folder)
    if not d.exists():
        raise ReportError(f"{str(d)!r} does not exist; give {_INPUTS}")
    if d.is_file() and d.suffix == ".json" and _is_diagnose(d):
        return "run"
    if not d.is_dir():
        from geohead.filekind import describe_kind, file_kind

        kind = file_kind(d)
        if kind in ("lightning", "torch", "torch-legacy", "safetensors"):
            raise ReportError(f"{str(d)!r} is {describe_kind(kind)}, a checkpoint: report plots what `geohead diagnose` "
                              f"measures; run `geohead diagnose {d}` and give its JSON (default {d.with_name(d.stem + '.diagnose.json')})")
        raise ReportError(f"{str(d)!r} is not a folder nor a diagnose report; give {_INPUTS}")
    if (d / "search.json").is_file() or (d / "trials.csv").is_file():
        return "search"
    from geohead.training.checkpoint import RUN_CHECKPOINTS

    if any((d / name).is_file() for name in ("metrics.jsonl", "diagnose.json", *RUN_CHECKPOINTS)):
        return "run"
    if monitor_files(d):
        return "run"
    raise ReportError(
        f"{str(d)!r} holds neither a run (metrics.jsonl, last.safetensors, diagnose.json, GeometryMonitor *.jsonl) nor a search "
        "(search.json, trials.csv); for a checkpoint trained elsewhere give the JSON of `geohead diagnose CKPT`"
    )


def _is_diagnose(path: Path) -> bool:
    """Whether ``path`` is a ``geohead diagnose`` JSON report (``format: geohead.diagnose/1``)."""
    try:
        return read_json(path, "diagnose report", _AGAIN, ReportError).get("format") == "geohead.diagnose/1"
    except (OSError, ReportError, AttributeError):
        return False


# ---------------------------------------------------------------------- HTML
def _img(path: Path, caption: str = "") -> str:
    """``path`` embedded as base64 in a <figure>, captioned with its name and ``caption``."""
    data = base64.b64encode(read_small(path, "plot", "remove it or draw it smaller", ReportError, MAX_PLOT_FILE)).decode("ascii")
    text = html.escape(path.name) + (f": {html.escape(caption)}" if caption else "")
    return (f'<figure><img alt="{html.escape(path.name)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{text}</figcaption></figure>")


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


@dataclasses.dataclass
class _Page:
    """What a report accumulates: its title, (heading, inner HTML) blocks, the PNGs it embeds, notes."""

    title: str = ""
    blocks: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    pngs: list[Path] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

    def figure(self, made: Path | None, caption: str = "") -> list[str]:
        """``made`` (a PNG a plot wrote, or None) embedded with ``caption``: [its <figure>], or []
        when nothing was plotted."""
        if made is None:
            return []
        self.pngs.append(made)
        return [_img(made, caption)]


# ---------------------------------------------------------------------- run folder
def _run_report(run: Path, out: Path, diag_path: Path) -> _Page:
    page = _Page()
    diag = _read_diagnose(run, diag_path)  # parsed once: the title and the geometry section
    curves = read_curves(run, ReportError)  # the one log drawn, named in the title
    title = _run_title(run, page, curves)
    page.title = f"geohead run report: {title}"
    trained_elsewhere = diag is not None and diag.get("format") == "geohead.diagnose/1" and diag.get("pretrained")
    if trained_elsewhere:  # a checkpoint geohead did not train: name it, its layout and method
        title = f"{Path(str(trained_elsewhere.get('source'))).name} ({trained_elsewhere.get('layout')}, {trained_elsewhere.get('method')})"
        page.title = f"geohead report: {title}"
    _training_section(page, curves, out, title)
    _probes_section(page, run, out)
    _summary_section(page, run)
    _diagnose_section(page, run, out, diag)
    return page


def _run_title(run: Path, page: _Page, curves: Curves) -> str:
    """objective / backbone / data of the run's config.json ("run / default backbone" without it);
    the GeometryMonitor log's name for a folder of such logs."""
    cfg = {}
    if (run / "config.json").is_file():
        try:
            cfg = read_json(run / "config.json", "config", "remove it", ReportError)
        except ReportError as exc:
            page.notes.append(f"{exc}; skipped")
        if not isinstance(cfg, dict):
            page.notes.append("config.json is not a JSON object; skipped")
            cfg = {}
    if not cfg and curves.source is not None and not curves.own:  # a GeometryMonitor log of someone else's loop
        return f"GeometryMonitor log {curves.source.name}"
    title_bits = [str(cfg.get("objective", "run")), str((cfg.get("backbone") or {}).get("name") or "default backbone"),
                  str((cfg.get("data") or {}).get("name", ""))]
    return " / ".join(b for b in title_bits if b)


def _training_section(page: _Page, curves: Curves, out: Path, title: str) -> None:
    """Loss, collapse monitors and Hessian extremes over steps, from metrics.jsonl or a monitor log."""
    losses, monitors = curves.losses, curves.monitors
    training = [*page.figure(plot_loss(losses, out / "loss.png", title), loss_caption(losses)),
                *page.figure(plot_monitors(monitors, out / "monitors.png"), monitors_caption(monitors)),
                *page.figure(plot_hessian_tracking(monitors, out / "hessian.png"))]
    own = curves.own
    page.notes.extend(curves.notes)
    if not losses and own:
        page.notes.append("metrics.jsonl has no loss lines: no training curves")
    if not losses and not own and monitors:
        page.notes.append("the GeometryMonitor JSONL holds no loss: call monitor.log_loss(loss) each training step "
                          "for the loss curve")
    if curves.source is None:
        page.notes.append("no metrics.jsonl or GeometryMonitor JSONL here: no curves over steps")
    if (monitors or own) and not any("hessian_lambda_min" in m for m in monitors):
        page.notes.append("no record holds the effective Hessian (set track.hessian_every = K > 0 in the recipe, or "
                          "GeometryMonitor(objective=..., hessian_every=K): every K-th record holds λ_min/λ_max)")
    page.blocks.append(("Training", "\n".join(training) or "<p>no training metrics</p>"))


def _probes_section(page: _Page, run: Path, out: Path) -> None:
    """The end-of-training probes of ``probes.json`` (kNN/linear accuracy of backbone vs head per
    target), captioned with what the gap between them says."""
    path = run / "probes.json"
    if not path.is_file():
        return
    try:
        probes = read_json(path, "probes", "remove it", ReportError)
    except (OSError, ReportError) as exc:
        page.notes.append(f"{exc}; skipped")
        return
    if not isinstance(probes, dict):
        page.notes.append("probes.json is not a JSON object; skipped")
        return
    made = plot_guillotine(probes, out / "probes.png", title="probes at the end of training: backbone vs head")
    if made is not None:
        page.blocks.append(("Probes (probes.json)", "\n".join(page.figure(made, probes_caption(probes)))))


def _summary_section(page: _Page, run: Path) -> None:
    """Steps, final loss and the end-of-training probes of summary.json (when there is one)."""
    summary = run / "summary.json"
    if not summary.is_file():
        return
    try:
        s = read_json(summary, "summary", "remove it", ReportError)
        text = f"steps {s.get('steps')} of {s.get('total_steps')}; final loss {s.get('final_loss')}"
        if s.get("probes"):
            from geohead.probes import GuillotineReport

            text += "\n\nprobes at the end of training:\n" + GuillotineReport.from_dict(s["probes"]).table()
        page.blocks.append(("Summary", _pre(text)))
    except (ReportError, KeyError, TypeError, AttributeError):
        page.notes.append("summary.json could not be read; skipped")


def _read_diagnose(run: Path, diag_path: Path) -> dict[str, Any] | None:
    """The JSON object of ``diag_path`` (diagnose.json), None without one; a :class:`ReportError` when
    it is not a readable JSON object."""
    if not diag_path.is_file():
        return None
    diag = read_json(diag_path, "diagnose report", f"run `geohead diagnose {run}` again or remove it", ReportError)
    if not isinstance(diag, dict):
        raise ReportError(f"{str(diag_path)!r} is not a JSON object; run `geohead diagnose {run}` again or remove it")
    return diag


def _diagnose_section(page: _Page, run: Path, out: Path, diag: dict[str, Any] | None) -> None:
    """The geometry figures and table of diagnose.json (``diag``), or a note saying how to make it."""
    if diag is None:
        from geohead.training.checkpoint import RUN_CHECKPOINTS

        what = run if any((run / name).is_file() for name in RUN_CHECKPOINTS) else "CKPT"
        page.notes.append(f"no diagnose.json: run `geohead diagnose {what}` for orbit compression, the Hessian spectral "
                          "density and the guillotine plots" + ("" if what == run else
                                                                 " of the model's checkpoint, and report its JSON"))
        return
    parts = [*page.figure(plot_orbit_compression(diag, out / "orbit_compression.png")),
             *page.figure(plot_density(diag, out / "hessian_density.png"))]
    if diag.get("probes"):
        parts += page.figure(plot_guillotine(diag["probes"], out / "guillotine.png"))
    from geohead.diagnose import format_table

    try:
        parts.append(_pre(format_table(diag)))
    except (KeyError, TypeError):
        page.notes.append("diagnose.json is from another geohead version; its table was skipped")
    page.blocks.append(("Geometry (geohead diagnose)", "\n".join(parts)))


# ---------------------------------------------------------------------- search folder
def _pngs_named(obj: Any) -> list[str]:
    """Every string ending in .png inside a JSON value."""
    if isinstance(obj, str):
        return [obj] if obj.lower().endswith(".png") else []
    if isinstance(obj, dict):
        return [p for v in obj.values() for p in _pngs_named(v)]
    if isinstance(obj, list):
        return [p for v in obj for p in _pngs_named(v)]
    return []


def _search_report(folder: Path, out: Path) -> _Page:
    """The page of a search folder, its plots drawn afresh into ``out`` (the folder is only read)."""
    page = _Page()
    try:
        from geohead.search import write_search_plots
    except ImportError as exc:
        raise ReportError(f"this geohead cannot plot searches (geohead.search is not importable: {exc})") from None
    if (folder / "trials.csv").is_file():
        made = [Path(p) for p in write_search_plots(folder, dest=out)]
    else:  # a search stopped before its first trial ended: its settings, no plots yet
        made = []
        page.notes.append("the search holds no trials.csv yet (no trial has finished); its plots follow once one has")
    meta = _search_meta(folder, page)
    named = []
    for p in list(dict.fromkeys(_pngs_named(meta)))[:MAX_PNGS]:  # each name once, at most what a page embeds
        q = Path(p) if Path(p).is_absolute() else folder / p
        if not q.resolve().is_relative_to(folder.resolve()):
            page.notes.append(f"search.json names {p}, outside the search folder; not embedded")
        elif q.is_file():
            named.append(q)
        else:
            page.notes.append(f"search.json names {p}, which does not exist")
    # the plots drawn now, those search.json names, then every other PNG the folder holds; the
    # folder's own copies of the drawn plots (_READS) are older versions of them
    seen: set[Path] = set()
    for p in made + [q for q in named + sorted(folder.glob("*.png")) if q.name not in _READS]:
        if p.is_file() and p.resolve() not in seen:
            if len(page.pngs) == MAX_PNGS:
                page.notes.append(f"the folder holds more PNGs than the {MAX_PNGS} a report embeds; the rest are left out")
                break
            seen.add(p.resolve())
            page.pngs.append(p)
    page.blocks.append(("Search", "\n".join(_img(p) for p in page.pngs) or "<p>no plots</p>"))
    if (folder / "best_head.json").is_file():
        spec = read_small(folder / "best_head.json", "head spec", "remove it", ReportError).decode("utf-8", "replace")
        page.blocks.append(("Best head (best_head.json)", _pre(spec)))
    if meta:
        page.blocks.append(("search.json", _pre(json.dumps(meta, indent=2)[:20000])))
    page.title = f"geohead search report: {meta.get('objective', folder.name) if isinstance(meta, dict) else folder.name}"
    return page


def _search_meta(folder: Path, page: _Page) -> Any:
    """search.json's content ({} without it, or with a note when it is not JSON)."""
    if not (folder / "search.json").is_file():
        return {}
    try:
        return read_json(folder / "search.json", "search file", "remove it", ReportError)
    except ReportError as exc:
        page.notes.append(f"{exc}; skipped")
        return {}


# ---------------------------------------------------------------------- entry point
def make_report(folder: str | os.PathLike, out_dir: str | os.PathLike | None = None) -> ReportResult:
    """Write the PNGs and ``report.html`` of a run or search folder (see the module docstring).

    Args:
        folder: a run folder (``geohead train``; or a folder holding only a diagnose.json or
            GeometryMonitor ``*.jsonl`` files), a search folder (``geohead search``), or the
            JSON report of ``geohead diagnose`` of a checkpoint trained elsewhere.
        out_dir: where the PNGs and report.html go (default: ``folder`` itself, or the folder of
            the diagnose JSON; a search folder's plots are redrawn there).

    Raises:
        ReportError: not a run or search folder, matplotlib missing.
    """
    folder = Path(folder)
    kind = detect(folder)
    diag = folder / "diagnose.json"
    if folder.is_file():  # the JSON report of `geohead diagnose CKPT` for a checkpoint trained elsewhere
        folder, diag = folder.parent, folder
    try:
        require_matplotlib()  # fail early and clearly without matplotlib
    except MatplotlibMissing as exc:
        raise ReportError(f"geohead report needs matplotlib, which cannot be imported here ({exc.reason}); install it "
                          "with `pip install matplotlib` (it is a geohead dependency)") from None
    out = Path(out_dir).expanduser() if out_dir is not None else folder  # as folder_problem reads it
    problem = folder_problem(out)
    if problem:
        raise ReportError(f"cannot write the report to {str(out)!r}: {problem}; give another --out folder")
    # nothing read or embedded through a link out: the files it reads and every PNG a search folder holds
    globbed = tuple(p.name for pattern in ("*.png", "*.jsonl") for p in folder.glob(pattern))  # plots, monitor files
    refuse_links_out(folder, _READS + globbed, "report input", ReportError)
    if kind == "search":
        _check_trials(folder / "trials.csv")
    new = outermost_new(out)  # removed again, with the folders made for it, when the report fails
    tmp = None
    try:  # drawn in a temporary folder inside out: a malformed input leaves nothing behind, nothing is made beside out
        out.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".report.tmp-", dir=out))
        page = _draw(folder, kind, tmp, diag)
        made = write_html(page.title, page.blocks, tmp / "report.html")
        moved = {p: out / p.name for p in [*page.pngs, made] if p.parent == tmp}
        for src, dst in moved.items():
            os.replace(src, dst)
    except BaseException:
        if new is not None:
            shutil.rmtree(new, ignore_errors=True)
        raise
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return ReportResult(out / "report.html", [moved.get(p, p) for p in page.pngs], kind, page.notes)


#: The files a report reads in its folder (and the search PNGs it draws afresh beside the report).
_READS = ("metrics.jsonl", "config.json", "summary.json", "probes.json", "diagnose.json", "search.json", "trials.csv", "best_head.json",
          "criteria_vs_knn.png", "pareto_front.png", "param_importances.png")


def _draw(folder: Path, kind: str, out: Path, diag: Path) -> _Page:
    """The page of ``folder`` with its run PNGs drawn into ``out``; a malformed file (a JSON value
    of the wrong shape) is a :class:`ReportError` naming it."""
    try:
        page = _run_report(folder, out, diag) if kind == "run" else _search_report(folder, out)
    except ReportError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        what = "diagnose.json, probes.json or metrics.jsonl" if kind == "run" else "trials.csv or search.json"
        raise ReportError(f"{str(folder)!r}: {what} is malformed ({type(exc).__name__}: {str(exc)[:120]}); "
                          f"write it again (geohead {'diagnose' if kind == 'run' else 'search'}) or remove it") from None
    if page.notes:
        page.blocks.append(("Notes", "<ul>" + "".join(f'<li class="note">{html.escape(n)}</li>' for n in page.notes)
                            + "</ul>"))
    return page


def _check_trials(path: Path) -> None:
    """A search folder's trials.csv must be the search's: UTF-8 CSV whose header names ``number``
    (the trial); otherwise a :class:`ReportError` (before anything is written)."""
    if not path.is_file():
        return
    try:
        with open(path, "rb") as fh:  # the header line alone (at most 64 KiB), not the whole file
            header = fh.readline(1 << 16).decode("utf-8").splitlines()[:1]
    except UnicodeDecodeError:
        raise ReportError(f"{str(path)!r} is not UTF-8 text; it is not the trials.csv geohead search writes. "
                          "Rerun geohead search (it rewrites trials.csv) or remove the file") from None
    columns = header[0].split(",") if header else []
    if "number" not in columns:
        raise ReportError(f"{str(path)!r} has no 'number' column (header {header[0][:80] if header else ''!r}); "
                          "it is not the trials.csv geohead search writes. Rerun geohead search or remove the file")


__all__ = ["ReportError", "ReportResult", "detect", "make_report", "write_html"]
