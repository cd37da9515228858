"""``run_search``: run (or resume) a search and write its outputs.

The study lives in an Optuna storage (:mod:`geohead.search.storage`, default ``OUT/study.db``);
one or more workers (:mod:`geohead.search.workers`) run trials (:mod:`geohead.search.trial`)
until it holds ``trials`` finished ones or the timeout passes, then the outputs are written
(:mod:`geohead.search.outputs`). ``trials`` counts finished trials of the study (complete,
pruned, failed), so rerunning the same command resumes a study until it holds ``trials`` of
them; a FAIL that was retried (its worker died) is replaced by its retry.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Callable

from geohead.search.config import BUILTIN_DATA, SearchConfig, SearchError
from geohead.search.study import create_study, quiet_optuna
from geohead.search.workers import echo_stderr, run_worker, worker_main


@dataclasses.dataclass
class SearchResult:
    """What :func:`run_search` leaves: the output folder, the study and its summary (search.json)."""

    out_dir: Path
    study_name: str
    storage: str
    summary: dict[str, Any]
    table: str


def check_data(cfg: SearchConfig) -> None:
    """Fail early, naming the flag, when --data or --test cannot be read (one image of each split
    the search will use); with ``download`` this is where torchvision downloads the files."""
    from geohead.data import load_dataset

    reads = [("--data", cfg.data, True)]
    if cfg.test is not None:
        reads.append(("--test", cfg.test, False))
    elif cfg.data in BUILTIN_DATA:
        reads.append(("--data", cfg.data, False))
    for flag, name, train in reads:
        try:
            load_dataset(name, root=cfg.data_root, download=cfg.download, train=train, n=1, img_size=cfg.img_size)
        except (ValueError, FileNotFoundError) as exc:
            raise SearchError(f"{flag} {name!r}: {exc}") from None


def run_search(cfg: SearchConfig, echo: Callable[[str], None] | None = None) -> SearchResult:
    """Run (or resume) the search of ``cfg`` and write its outputs; see the module docstring.

    Raises :class:`SearchError` (a ``ValueError``) for bad settings and storages.
    """
    import optuna

    from geohead.search.outputs import write_outputs
    from geohead.search.storage import describe, open_storage, storage_url

    cfg.validate()
    check_data(cfg)  # before anything is written; downloads here (once) when asked
    cfg = dataclasses.replace(cfg, download=False)
    quiet_optuna()
    say = echo or echo_stderr
    out = cfg.out_dir
    out.mkdir(parents=True, exist_ok=True)
    url = storage_url(cfg.storage, out)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        storage = open_storage(url, cfg.heartbeat)
    except ValueError as exc:
        raise SearchError(str(exc)) from None
    study = create_study(cfg, storage)
    t0 = time.time()
    deadline = t0 + cfg.timeout if cfg.timeout else None
    say(f"geohead search: {cfg.objective} on {cfg.data}, study {cfg.study_name!r} in {describe(url)}, "
        f"{len(study.trials)} trial(s) stored, target {cfg.trials}"
        + (f", timeout {cfg.timeout:.0f} s" if cfg.timeout else "") + f" -> {out}")
    interrupted = False
    try:
        _run_workers(cfg, url, deadline, say)
    except KeyboardInterrupt:
        interrupted = True
        say("interrupted: writing the outputs of the finished trials")
    study = optuna.load_study(study_name=cfg.study_name, storage=storage)
    summary, table = write_outputs(study, cfg, describe(url), time.time() - t0)
    if interrupted:
        raise KeyboardInterrupt
    return SearchResult(out, cfg.study_name, describe(url), summary, table)


def _run_workers(cfg: SearchConfig, url: str, deadline: float | None, say: Callable[[str], None]) -> None:
    """One worker here, or ``cfg.workers`` spawned processes (waited for; a worker that died is
    reported, its running trial is retried by the next run)."""
    if cfg.workers == 1:
        run_worker(cfg, 0, url, deadline, say)
        return
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=worker_main, args=(dataclasses.asdict(cfg), i, url, deadline), daemon=False)
             for i in range(cfg.workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    bad = [p.exitcode for p in procs if p.exitcode]
    if bad:
        say(f"warning: {len(bad)} worker(s) exited with codes {bad}; their running trials are retried by the next run")


__all__ = ["SearchResult", "check_data", "run_search"]
