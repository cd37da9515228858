"""``run_search``: run (or resume) a search and write its outputs.

The study lives in an Optuna storage (:mod:`geohead.search.storage`, default ``OUT/study.db``);
one or more workers (:mod:`geohead.search.workers`) run trials (:mod:`geohead.search.trial`)
until it holds ``trials`` distinct measured heads, the timeout passes or the space is exhausted,
then the pick is checked against the published head, which every study measures
(:mod:`geohead.search.reference`, :mod:`geohead.search.verdict`), and the outputs are written
(:mod:`geohead.search.outputs`). ``trials`` counts heads measured by
the study (complete, pruned, failed; a trial that repeated a head is not counted), so rerunning
the same command resumes a study until it holds ``trials`` of them; a FAIL that was retried (its
worker died) is replaced by its retry.

Every input is checked before anything is written: the settings (:meth:`SearchConfig.validate`:
names, sizes, ``--set`` keys and values, ``--fix``/``--range``, the storage URL), the data (read,
or downloaded when asked), then the backbone is built and the data prepared
(:func:`~geohead.search.inputs.prepare_trial_inputs`: backbone name, labels for ``--score knn``,
ranges against the backbone's width). Only then are the output folder and the study created; a
study that holds no trial takes the settings of the next run, so a failed start never blocks the
corrected rerun.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Callable

from geohead.search.config import BUILTIN_DATA, SearchConfig, SearchError, auto_workers
from geohead.search.reference import enqueue_reference, published_spec, reference_trial
from geohead.search.study import create_study, quiet_optuna
from geohead.search.workers import echo_stderr, prepare_and_describe, run_worker, worker_main


@dataclasses.dataclass
class SearchResult:
    """What :func:`run_search` leaves: the output folder, the study and its summary (search.json),
    the printed table, and the shell command that browses the study in optuna-dashboard."""

    out_dir: Path
    study_name: str
    storage: str
    summary: dict[str, Any]
    table: str
    dashboard: str = ""


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

    Raises :class:`SearchError` (a ``ValueError``) for bad settings and storages, before anything
    is written.
    """
    import optuna

    from geohead.search.escape import criterion_record
    from geohead.search.outputs import write_outputs
    from geohead.search.progress import StudyProgress
    from geohead.search.storage import dashboard_command, describe, storage_url

    cfg.validate()
    check_data(cfg)  # before anything is written; downloads here (once) when asked
    cfg = dataclasses.replace(cfg, download=False)
    quiet_optuna()
    say = echo or echo_stderr
    if cfg.workers == "auto":
        cfg = dataclasses.replace(cfg, workers=auto_workers(cfg.device))
        say(f"--workers auto: {cfg.workers} worker process(es)")
    inputs = prepare_and_describe(cfg, say)  # the backbone built, the data prepared: nothing written yet
    out = cfg.out_dir
    url = storage_url(cfg.storage, out)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage, study = _open_study(cfg, url, out)
    enqueue_reference(study, inputs.space, published_spec(cfg.objective, inputs.base_spec, inputs.space))
    t0 = time.time()
    deadline = t0 + cfg.timeout if cfg.timeout else None
    say(f"geohead search: {cfg.objective} on {cfg.data}, study {cfg.study_name!r} in {describe(url)}, "
        f"{len(study.trials)} trial(s) stored, target {cfg.trials} heads"
        + (f", timeout {cfg.timeout:.0f} s" if cfg.timeout else "") + f" -> {out}")
    what = "score" if cfg.multi or cfg.score == "geometry" else "kNN"
    bar = StudyProgress(cfg.trials, cfg.timeout, what=what, enabled=cfg.progress)
    bar.update(study)
    interrupted, stopped = False, "target"
    try:
        stopped = _run_workers(cfg, url, deadline, bar.write if echo is None else say, inputs, bar)
    except KeyboardInterrupt:
        interrupted, stopped = True, "interrupted"
        say("interrupted: writing the outputs of the finished trials")
    finally:
        bar.close()
    study = optuna.load_study(study_name=cfg.study_name, storage=storage)
    verdict = None if interrupted else _verdict(cfg, study, inputs, say)
    dashboard = dashboard_command(url)
    summary, table = write_outputs(study, cfg, describe(url), time.time() - t0, stopped=stopped, dashboard=dashboard,
                                   premise=criterion_record(inputs.premise), verdict=verdict)
    if interrupted:
        raise KeyboardInterrupt
    return SearchResult(out, cfg.study_name, describe(url), summary, table, dashboard)


def _verdict(cfg: SearchConfig, study: Any, inputs: Any, say: Callable[[str], None]) -> Any:
    """The pick against the published head at ``cfg.confirm_seeds`` fresh seeds
    (:mod:`geohead.search.verdict`), trained here on the prepared ``inputs``."""
    from geohead.search.outputs import best_trial
    from geohead.search.trial import TrialRunner
    from geohead.search.verdict import run_verdict

    runner = TrialRunner(cfg, inputs, say)
    return run_verdict(best_trial(study), reference_trial(study), cfg.confirm_seeds, cfg.seed, cfg.out_dir / "confirm",
                       runner.measure_head, say)


def _open_study(cfg: SearchConfig, url: str, out: Path) -> tuple[Any, Any]:
    """Create the output folder, open the storage and create (or resume) the study; a folder this
    call created is removed again when the storage or the study cannot be opened."""
    import shutil

    from geohead.search.storage import open_storage

    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        storage = open_storage(url, cfg.heartbeat)
        return storage, create_study(cfg, storage)
    except (SearchError, ValueError) as exc:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise exc if isinstance(exc, SearchError) else SearchError(str(exc)) from None


def _run_workers(cfg: SearchConfig, url: str, deadline: float | None, say: Callable[[str], None], inputs: Any,
                 bar: Any) -> str:
    """One worker here (on the prepared ``inputs``), or ``cfg.workers`` spawned processes
    (waited for, the bar following the storage; a worker that died is reported, its running trial
    is retried by the next run). Returns why the search stopped."""
    if cfg.workers == 1:
        return run_worker(cfg, 0, url, deadline, say, inputs=inputs, on_trial=bar.update)
    import multiprocessing as mp

    import optuna

    from geohead.search.storage import open_storage

    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=worker_main, args=(dataclasses.asdict(cfg), i, url, deadline), daemon=False)
             for i in range(cfg.workers)]
    for p in procs:
        p.start()
    storage = open_storage(url, None)
    while any(p.is_alive() for p in procs):
        for p in procs:
            p.join(timeout=2.0 / len(procs))
        bar.update(optuna.load_study(study_name=cfg.study_name, storage=storage))
    bad = [p.exitcode for p in procs if p.exitcode]
    if bad:
        say(f"warning: {len(bad)} worker(s) exited with codes {bad}; their running trials are retried by the next run")
    return "timeout" if deadline is not None and time.time() >= deadline else "target"


__all__ = ["SearchResult", "check_data", "run_search"]
