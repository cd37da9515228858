"""A progress bar with an ETA over a diagnosis' stages (tqdm, on stderr).

Each stage advances the bar by its typical share of the run (:data:`WEIGHTS`, measured on the
default settings: ``benchmarks/diagnose_speed.py``), so tqdm's rate gives a usable ETA even
though the stages differ a hundredfold in cost.
"""
from __future__ import annotations

import sys
from typing import Any, TextIO

#: Typical share of each stage (per orbit family for ``orbits``), in arbitrary units.
WEIGHTS: dict[str, float] = {"data": 0.5, "escape": 24.0, "hessian": 15.0, "orbits": 1.5, "collapse": 5.0, "probes": 3.0}


class StageBar:
    """A callable progress sink for :func:`geohead.diagnose.diagnose` and ``diagnose_model``:
    ``bar(msg, part)`` finishes the previous stage and names the next one; ``bar.close()``."""

    def __init__(self, families: int, probes: bool = True, file: TextIO | None = None, disable: bool | None = None) -> None:
        from tqdm.auto import tqdm

        total = sum(w for k, w in WEIGHTS.items() if k != "orbits" and (probes or k != "probes")) + families * WEIGHTS["orbits"]
        self.file = file or sys.stderr
        self.bar = tqdm(total=total, desc="diagnose", unit="", file=self.file, disable=disable, leave=False,
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}] {postfix}")
        self.part: str | None = None

    def __call__(self, msg: str, part: str | None = None) -> None:
        if self.part is not None:
            self.bar.update(min(WEIGHTS.get(self.part, 1.0), self.bar.total - self.bar.n))
        self.part = part
        if part is None:
            self.close()
        else:
            self.bar.set_postfix_str(msg, refresh=True)

    def write(self, text: str) -> None:
        """``text`` as a line of its own above the bar (a warning while a stage runs)."""
        self.bar.write(text, file=self.file)

    def close(self) -> None:
        self.bar.close()


def stage_sink(progress: Any, families: int, probes: bool) -> Any:
    """``progress`` as given, or a :class:`StageBar` for ``"bar"`` (``"auto"``: when stderr is a terminal)."""
    if progress == "auto":
        progress = "bar" if sys.stderr.isatty() else None
    return StageBar(families, probes) if progress == "bar" else progress


__all__ = ["StageBar", "WEIGHTS", "stage_sink"]
