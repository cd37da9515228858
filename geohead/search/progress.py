"""One progress bar over a whole search: distinct heads measured / target, elapsed / timeout,
the best value so far (tqdm, on stderr), with the per-trial lines printed above it.

The bar is drawn only on a terminal (or when ``force``): logs get the per-trial lines, which carry
the same ``[done/target]`` count. A ticker thread redraws it every second so the clock moves
between trials.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO


def _clock(seconds: float) -> str:
    s = int(max(0.0, seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class StudyProgress:
    """The study's bar. :meth:`update` reads the study's counts and best trial, :meth:`write`
    prints a line above the bar, :meth:`close` removes the ticker (the bar's last state stays)."""

    def __init__(self, target: int, timeout: float | None, *, what: str = "score", enabled: bool = True,
                 file: TextIO | None = None, force: bool = False, tick: float = 1.0) -> None:
        self.target, self.timeout, self.what = int(target), timeout, what
        self.file = file or sys.stderr
        self.t0 = time.time()
        self.best: tuple[float, int] | None = None
        self.done = 0
        self.bar: Any = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        on_tty = bool(getattr(self.file, "isatty", lambda: False)())
        if enabled and (on_tty or force):
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self.target, unit="head", file=self.file,
                            bar_format="search {n_fmt}/{total_fmt} heads |{bar:20}| {desc}", leave=True)
            self._draw()
            if tick > 0:
                self._thread = threading.Thread(target=self._run, args=(tick,), daemon=True)
                self._thread.start()

    def postfix(self) -> str:
        """``elapsed 1:23 / 8:00, best score 0.512 (trial 7)``."""
        elapsed = _clock(time.time() - self.t0)
        limit = f" / {_clock(self.timeout)}" if self.timeout else ""
        best = f", best {self.what} {self.best[0]:.4f} (trial {self.best[1]})" if self.best else f", no {self.what} yet"
        return f"elapsed {elapsed}{limit}{best}"

    def update(self, study: Any) -> None:
        """Counts and best value from ``study`` (single-objective: the best COMPLETE trial; with
        several objectives: the highest label-free score among them)."""
        from optuna.trial import TrialState

        from geohead.search.storage import count_trials

        self.done = count_trials(study)["done"]
        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        complete = [t for t in complete if "duplicate_of" not in t.user_attrs]
        if complete:
            if len(study.directions) > 1:
                t = max(complete, key=lambda t: t.user_attrs.get("score", float("-inf")))
                self.best = (float(t.user_attrs.get("score", float("nan"))), t.number)
            else:
                t = max(complete, key=lambda t: t.values[0])
                self.best = (float(t.values[0]), t.number)
        self._draw()

    def write(self, line: str) -> None:
        """Print ``line`` above the bar (or plainly when there is no bar)."""
        if self.bar is None:
            print(line, file=self.file, flush=True)
            return
        from tqdm.auto import tqdm

        with self._lock:
            tqdm.write(line, file=self.file)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.bar is not None:
            self._draw()
            self.bar.close()

    def _draw(self) -> None:
        if self.bar is None:
            return
        with self._lock:
            self.bar.n = min(self.done, self.target)
            self.bar.set_description_str(self.postfix(), refresh=False)
            self.bar.refresh()

    def _run(self, tick: float) -> None:
        while not self._stop.wait(tick):
            self._draw()


__all__ = ["StudyProgress"]
