"""Where records go: rows of a CSV file under one header, scalars of TensorBoard events (the
collapse monitor's and ``geohead train``'s tracker's writers)."""
from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from geohead.io import append_text, atomic_write


class CsvLog:
    """Records as rows of a CSV file under one header, an empty cell where a record lacks a key.

    ``fields`` is the header; a record's other keys are left out, unless ``grow``: then a record
    with a new key rewrites the file once with the wider header (new keys last, earlier rows
    empty there), so a log whose keys are not known in advance keeps every value. Appending to a
    file that already has rows adds none of the header; appends never follow a symbolic link
    (:func:`geohead.io.append_text`) and a rewrite replaces a link instead of writing through it.
    """

    #: The most columns a growing log takes: keys first seen after them are left out (a run's
    #: records hold a few dozen; a log of records with ever-new keys would grow rows x keys).
    MAX_FIELDS = 512

    def __init__(self, path: str | Path, fields: Sequence[str] = (), grow: bool = False) -> None:
        self.path, self.fields, self.grow = Path(path), list(fields), grow
        self._has_header = False

    def write(self, rec: dict[str, Any]) -> None:
        """Append ``rec`` as one row."""
        if not self._has_header and self.path.exists() and self.path.stat().st_size:
            self._has_header = True  # rows of an earlier run under the same header: continue them
        new = [k for k in rec if k not in self.fields][:max(self.MAX_FIELDS - len(self.fields), 0)] if self.grow else []
        self.fields += new
        if new and self._has_header:
            self._widen()
        append_text(self.path, self._text([rec], header=not self._has_header))
        self._has_header = True

    def _widen(self) -> None:
        """Rewrite the file's rows under the file's header widened by ``fields``."""
        with open(self.path, newline="", encoding="utf-8") as f:
            header = next(csv.reader(f), [])
        self.rewrite(self._rows, list(dict.fromkeys([*header, *self.fields]))[:max(self.MAX_FIELDS, len(self.fields))])

    def _rows(self) -> Iterator[dict[str, Any]]:
        with open(self.path, newline="", encoding="utf-8") as f:
            yield from csv.DictReader(f)

    def rewrite(self, records: Callable[[], Iterable[dict[str, Any]]], fields: Sequence[str] | None = None) -> None:
        """Replace the file by the records ``records()`` yields (the header: ``fields``, else their
        keys in order of first appearance, from a first pass over them); no records leave an empty
        file. Rows are streamed to the file, so a log of millions of rows is never held whole."""
        if fields is None:
            fields = list(dict.fromkeys(k for r in records() for k in r))[:self.MAX_FIELDS]
        self.fields = list(fields)
        written = 0

        def write(tmp: Path) -> None:
            nonlocal written
            with open(tmp, "w", newline="", encoding="utf-8") as f:
                w = csv.DictWriter(f, fieldnames=self.fields, restval="", extrasaction="ignore")
                for rec in records():
                    if not written:
                        w.writeheader()
                    w.writerow(rec)
                    written += 1

        atomic_write(self.path, write)
        self._has_header = bool(written)

    def _text(self, records: Sequence[dict[str, Any]], header: bool) -> str:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=self.fields, restval="", extrasaction="ignore")
        if header:
            w.writeheader()
        w.writerows(records)
        return buf.getvalue()


class TensorBoardLog:
    """The numbers of records as TensorBoard scalars ``<prefix>/<key>`` at the record's ``step``.

    ``target`` is a SummaryWriter (or anything with ``add_scalar`` and ``flush``) or a log
    directory, where a SummaryWriter opens on the first record: torch.utils.tensorboard (it needs
    the tensorboard package) is imported only then. Each record is flushed, so a killed run's
    events are on disk.
    """

    def __init__(self, target: Any, prefix: str = "geometry") -> None:
        self.target, self.prefix, self._writer = target, prefix, None

    def write(self, rec: dict[str, Any], prefix: str | None = None) -> None:
        """Add the record's numbers (not ``step``, not strings) under ``prefix`` (default: the log's)."""
        if self._writer is None:
            self._writer = self.target if hasattr(self.target, "add_scalar") else self._open(self.target)
        for k, v in rec.items():
            if k != "step" and isinstance(v, (int, float)):
                self._writer.add_scalar(f"{prefix or self.prefix}/{k}", v, global_step=rec["step"])
        self._writer.flush()

    def close(self) -> None:
        """Close the writer this log opened (a writer given to it is the caller's to close)."""
        if self._writer is not None and self._writer is not self.target:
            self._writer.close()
        self._writer = None

    @staticmethod
    def _open(log_dir: str | Path) -> Any:
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

        return SummaryWriter(log_dir=str(log_dir))


__all__ = ["CsvLog", "GeometryMonitor", "HESSIAN_KEYS", "MONITOR_KEYS", "TensorBoardLog"]
