"""The records a run report draws over steps: ``metrics.jsonl`` of a geohead run, or the
GeometryMonitor log (``*.jsonl``) of someone else's loop.

A folder may hold several monitor logs (several runs) and a log may hold several runs (a
GeometryMonitor appends to its ``log_file``, so a rerun starts again at step 1): the report draws
one run, the newest log's last, and says what it left out, so that records of different runs are
never joined into one curve.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Callable

from geohead.io import MAX_SMALL_FILE, json_lines

#: The most records of one kind a report plots: a longer log is thinned evenly (every 2nd, 4th, ... record).
MAX_PLOTTED = 100_000


class Thinned:
    """At most ``limit`` of the records added, evenly spaced: when full, every other record kept so
    far is dropped and from then on only every ``stride``-th added is kept, so memory stays bounded
    however long the log."""

    def __init__(self, limit: int) -> None:
        self.limit, self.stride, self.seen, self.kept = limit, 1, 0, []

    def add(self, rec: dict) -> None:
        if self.seen % self.stride == 0:
            self.kept.append(rec)
            if len(self.kept) > self.limit:
                self.kept, self.stride = self.kept[::2], self.stride * 2
        self.seen += 1


@dataclasses.dataclass
class Curves:
    """What a run report draws: ``losses`` and ``monitors`` (records, at most :data:`MAX_PLOTTED`
    of each), the file they came from (None: neither metrics.jsonl nor a monitor log), and
    ``notes`` on what was left out (other logs, earlier runs in the log)."""

    losses: list[dict]
    monitors: list[dict]
    source: Path | None
    notes: list[str]

    @property
    def own(self) -> bool:
        """Whether the records are a geohead run's ``metrics.jsonl`` (not a GeometryMonitor log)."""
        return self.source is not None and self.source.name == "metrics.jsonl"


def monitor_files(folder: str | os.PathLike) -> list[Path]:
    """The ``*.jsonl`` files of :class:`geohead.monitor.GeometryMonitor` (first line: a record
    with ``step`` and ``rankme_head``) in ``folder``, by name; ``metrics.jsonl`` excluded."""
    found = []
    for p in sorted(Path(folder).glob("*.jsonl")):
        if p.name == "metrics.jsonl":
            continue
        try:
            with open(p) as fh:
                first = json.loads(fh.readline(MAX_SMALL_FILE) or "{}")  # a record's line, not a whole file
        except (OSError, json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            continue
        if isinstance(first, dict) and "step" in first and "rankme_head" in first:
            found.append(p)
    return found


def _modified(path: Path) -> float:
    """When ``path`` was last written; -inf for a file that went away since it was listed."""
    try:
        return path.stat().st_mtime
    except OSError:
        return float("-inf")


def read_curves(run: str | os.PathLike, error: Callable[[str], Exception] = ValueError) -> Curves:
    """The loss and monitor records of ``RUN/metrics.jsonl``; without one, of the folder's newest
    GeometryMonitor log (:func:`monitor_files`), from its last run: the monitor records, and as
    loss records those holding a ``loss`` (what ``GeometryMonitor.log_loss`` gives them). Lines
    that fail to parse are skipped; a file above :data:`geohead.io.MAX_RECORDS_FILE` bytes is ``error``."""
    own = Path(run) / "metrics.jsonl"
    if own.is_file():
        return _read(own, error, monitor_log=False)
    logs = monitor_files(run)
    if not logs:
        return Curves([], [], None, [])
    newest = max(logs, key=lambda p: (_modified(p), p.name))
    curves = _read(newest, error, monitor_log=True)
    if len(logs) > 1:
        names = ", ".join(p.name for p in logs[:8]) + (", ..." if len(logs) > 8 else "")
        curves.notes.insert(0, f"{len(logs)} GeometryMonitor logs here ({names}): the curves are the newest, "
                               f"{newest.name}; give each run its own folder to report the others")
    return curves


def _read(path: Path, error: Callable[[str], Exception], monitor_log: bool) -> Curves:
    """One file's records; in a monitor log a step below the one before starts a new run (the
    monitor appends), and only the last run is kept."""
    losses, monitors = Thinned(MAX_PLOTTED), Thinned(MAX_PLOTTED)
    runs, last_step = 1, None
    hint = "a run's records are far smaller: this is not a run's metrics file"
    for _, rec in json_lines(path, "metrics file", hint, error):
        if not isinstance(rec, dict):
            continue
        if rec.get("kind") == "monitor" or (monitor_log and "rankme_head" in rec):
            step = rec.get("step")
            if monitor_log and isinstance(step, (int, float)) and last_step is not None and step < last_step:
                losses, monitors, runs = Thinned(MAX_PLOTTED), Thinned(MAX_PLOTTED), runs + 1
            last_step = step if isinstance(step, (int, float)) else last_step
            monitors.add(rec)
            if monitor_log and "loss" in rec:  # a loss logged on a GeometryMonitor record
                losses.add(rec)
        elif "loss" in rec:
            losses.add(rec)
    notes = [f"{path.name} holds {runs} runs (its steps start again {runs - 1} time(s): a GeometryMonitor appends to "
             "its log_file): the curves are the last run's; give each run its own log_file"] if runs > 1 else []
    return Curves(losses.kept, monitors.kept, path, notes)


def read_metrics(run: str | os.PathLike, error: Callable[[str], Exception] = ValueError) -> tuple[list[dict], list[dict]]:
    """(loss records, monitor records) of :func:`read_curves`."""
    curves = read_curves(run, error)
    return curves.losses, curves.monitors


__all__ = ["Curves", "MAX_PLOTTED", "Thinned", "monitor_files", "read_curves", "read_metrics"]
