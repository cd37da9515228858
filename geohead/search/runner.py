"""``run_search``: run (or resume) a search with one or more workers, and write its outputs.

The study lives in an Optuna storage (:mod:`geohead.search.storage`, default ``OUT/study.db``;
sampler, pruner and measured heads: :mod:`geohead.search.study`). Workers run trials
(:mod:`geohead.search.trial`) until the study holds ``trials`` distinct measured heads, the
timeout passes or the space is exhausted; then the pick is checked against the published head,
which every study measures (:mod:`geohead.search.reference`, :mod:`geohead.search.verdict`), and
the outputs are written (:mod:`geohead.search.outputs`). ``trials`` counts heads measured by the
study (complete, pruned, failed; a trial that repeated a head is not counted), so rerunning the
same command resumes a study until it holds ``trials`` of them; a FAIL that was retried (its
worker died) is replaced by its retry.

One worker runs in the calling process; with ``workers > 1`` each is a spawned process
(:func:`worker_main`) with its share of the CPU threads and, on several GPUs, its own device.
One progress bar (:class:`StudyProgress`) covers the whole search.

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
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, TextIO

import torch

from geohead.search.config import BUILTIN_DATA, SearchConfig, SearchError, auto_workers, base_train_config
from geohead.search.criteria import TrialDiverged
from geohead.search.escape import describe_criterion
from geohead.search.inputs import TrialInputs, prepare_trial_inputs
from geohead.search.reference import enqueue_reference, published_spec, reference_trial
from geohead.search.storage import (count_trials, dashboard_command, describe, fail_stale, has_heartbeat, open_storage,
                                     requeue_interrupted, storage_url)
from geohead.search.study import create_study, load_worker_study, measured_heads, quiet_optuna
from geohead.search.trial import TrialError, TrialRunner, trial_line


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


def verdict_backbone(cfg: SearchConfig, base: dict[str, Any]) -> tuple[dict[str, Any], int] | None:
    """The ``backbone`` section the verdict's runs train with ``cfg.confirm_backbone`` (its name,
    built with its own default arguments; the other backbone keys of ``base``, the search's training
    config) and that backbone's d; None without it. Builds the backbone once, so a bad name fails
    before anything is written."""
    if cfg.confirm_backbone is None:
        return None
    import copy

    from geohead.training.config import config_from_dict
    from geohead.training.model import build_backbone

    section = {k: v for k, v in base.get("backbone", {}).items() if k not in ("name", "args")}
    section["name"] = cfg.confirm_backbone
    d = copy.deepcopy(base)
    d["backbone"] = section
    try:
        return section, int(build_backbone(config_from_dict(d)).num_features)
    except ValueError as exc:
        raise SearchError(f"--confirm-backbone {cfg.confirm_backbone!r}: {exc}") from None


def proxy_record(cfg: SearchConfig, inputs: Any, verdict: Any = None,
                 confirm: tuple[dict[str, Any], int] | None = None) -> dict[str, Any]:
    """What the search measured its heads on (best_head.json's ``found_on``): backbone, d, the
    steps and epochs of a completed trial, training images, batch, data and objective; and, when
    the ``verdict`` compared runs of their own, their epochs (``verdict_epochs``, with
    ``confirm_epochs``) and their backbone and its d (``verdict_backbone``, ``verdict_d``, with
    ``confirm``: :func:`verdict_backbone`'s answer)."""
    from geohead.backbones import DEFAULT_BACKBONE

    rec = {"backbone": inputs.base.get("backbone", {}).get("name") or DEFAULT_BACKBONE, "d": inputs.in_dim,
           "steps": int(cfg.max_steps), "epochs": float(inputs.base["optim"]["epochs"]), "n_train": len(inputs.data),
           "batch_size": cfg.batch_size, "data": str(cfg.data)[-200:], "objective": cfg.objective}
    if verdict is None or verdict.steps is None:  # nothing compared at the user's schedule or backbone
        return rec
    if cfg.confirm_epochs is not None:
        rec["verdict_epochs"] = float(cfg.confirm_epochs)
    if confirm is not None:
        rec["verdict_backbone"], rec["verdict_d"] = confirm[0]["name"], confirm[1]
    return rec


def run_search(cfg: SearchConfig, echo: Callable[[str], None] | None = None) -> SearchResult:
    """Run (or resume) the search of ``cfg`` and write its outputs; see the module docstring.

    Raises :class:`SearchError` (a ``ValueError``) for bad settings and storages, before anything
    is written.
    """
    import optuna

    from geohead.search.escape import criterion_record
    from geohead.search.outputs import write_outputs
    cfg.validate()
    check_data(cfg)  # before anything is written; downloads here (once) when asked
    cfg = dataclasses.replace(cfg, download=False)
    quiet_optuna()
    say = echo or echo_stderr
    if cfg.workers == "auto":
        cfg = dataclasses.replace(cfg, workers=auto_workers(cfg.device))
        say(f"--workers auto: {cfg.workers} worker process(es)")
    confirm = verdict_backbone(cfg, base_train_config(cfg, cfg.batch_size)[0])  # a bad name fails before the data
    inputs = prepare_and_describe(cfg, say)  # the backbone built, the data prepared: nothing written yet
    out = cfg.out_dir
    url = storage_url(cfg.storage, out)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage, study = _open_study(cfg, url, out)
    enqueue_reference(study, inputs.space, published_spec(cfg.objective, inputs.base_spec, inputs.space))
    for number in requeue_interrupted(study):  # stopped by a Ctrl-C: not measured, so measured now
        say(f"trial {number} was interrupted by Ctrl-C; it runs again")
    t0 = time.time()
    deadline = t0 + cfg.timeout if cfg.timeout else None
    say(f"geohead search: {cfg.objective} on {cfg.data}, study {cfg.study_name!r} in {describe(url)}, "
        f"{count_trials(study)['done']} of {cfg.trials} heads measured so far"
        + (f", timeout {cfg.timeout:.0f} s" if cfg.timeout else "") + f" -> {out}")
    what = "score" if cfg.multi or cfg.score != "knn" else "kNN"
    bar = StudyProgress(cfg.trials, cfg.timeout, what=what, enabled=cfg.progress)
    bar.update(study)
    interrupted, stopped = False, "target"
    try:
        stopped = _run_workers(cfg, url, deadline, bar.write if echo is None else say, inputs, bar)
    except KeyboardInterrupt:
        interrupted, stopped = True, "interrupted"
        say(f"interrupted: writing the outputs of the finished trials to {out}; rerun the same command to resume "
            "(the interrupted trial runs again and does not count towards --trials)")
    finally:
        bar.close()
    study = optuna.load_study(study_name=cfg.study_name, storage=storage)
    verdict = None if interrupted else _verdict(cfg, study, inputs, say, confirm)
    dashboard = dashboard_command(url)
    summary, table = write_outputs(study, cfg, describe(url), time.time() - t0, stopped=stopped, dashboard=dashboard,
                                   premise=criterion_record(inputs.premise, cfg.escape), verdict=verdict,
                                   proxy=proxy_record(cfg, inputs, verdict, confirm))
    if interrupted:
        raise KeyboardInterrupt
    return SearchResult(out, cfg.study_name, describe(url), summary, table, dashboard)


def _verdict(cfg: SearchConfig, study: Any, inputs: Any, say: Callable[[str], None],
             confirm: tuple[dict[str, Any], int] | None = None) -> Any:
    """The pick against the published head at ``cfg.confirm_seeds`` fresh seeds
    (:mod:`geohead.search.verdict`), trained here on the prepared ``inputs`` (for
    ``cfg.confirm_epochs`` epochs of its images when set; on ``confirm``'s backbone, both heads
    rescaled to its d, when set: :func:`verdict_backbone`)."""
    from geohead.search.outputs import best_trial
    from geohead.search.verdict import run_verdict

    runner = TrialRunner(cfg, inputs, say)
    steps, words, measure, name = None, "", runner.measure_head, None
    if cfg.confirm_epochs is not None:
        steps = cfg.confirm_epochs * max(1, len(inputs.data) // cfg.batch_size)
        words = f"{cfg.confirm_epochs} epochs of {len(inputs.data):,} images"
    if confirm is not None:  # runs of their own: checkpointed, resumed, compared at the fresh seeds alone
        section, dim = confirm
        name, steps = section["name"], steps or int(cfg.max_steps)
        words = f"{words or f'{steps:,} steps'} on {name} (d={dim})"

        def on_backbone(spec: Any, seed: int, folder: Path, steps: int | None = None) -> dict[str, float]:
            return runner.measure_head(spec.rescale(dim), seed, folder, steps, backbone=section)

        measure = on_backbone

    return run_verdict(best_trial(study), reference_trial(study), cfg.confirm_seeds, cfg.seed, cfg.out_dir / "confirm",
                       measure, say, steps, words, name, heads=count_trials(study)["done"])


def _open_study(cfg: SearchConfig, url: str, out: Path) -> tuple[Any, Any]:
    """Create the output folder, open the storage and create (or resume) the study; a folder this
    call created is removed again when the storage or the study cannot be opened."""
    import shutil

    from geohead.io import outermost_new

    created = outermost_new(out)  # out itself or a parent made for it
    out.mkdir(parents=True, exist_ok=True)
    try:
        storage = open_storage(url, cfg.heartbeat)
        return storage, create_study(cfg, storage)
    except (SearchError, ValueError) as exc:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
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


def echo_stderr(text: str) -> None:
    """The default ``echo`` of the search: a line on stderr."""
    print(text, file=sys.stderr, flush=True)


def worker_device(device: str, worker: int, n_cuda: int) -> str:
    """The device of local worker ``worker``: with ``auto``/``cuda`` and several visible GPUs,
    worker i takes ``cuda:(i mod n_cuda)`` (one trial per GPU); an explicit ``cuda:K`` or
    ``cpu`` is kept as given.
    """
    if device in ("auto", "cuda") and n_cuda > 1:
        return f"cuda:{worker % n_cuda}"
    return device


def run_worker(cfg: SearchConfig, worker: int, url: str, deadline: float | None,
               echo: Callable[[str], None] | None = None, inputs: TrialInputs | None = None,
               on_trial: Callable[[Any], None] | None = None) -> str:
    """One worker: run trials until the study holds ``cfg.trials`` distinct measured heads, time
    is up (``deadline``, a ``time.time()``) or every head of the space is measured; ``inputs``
    (prepared here when None) are the data and initial features, ``on_trial(study)`` is called
    after every trial. Returns why it stopped: ``target``, ``timeout`` or ``space``."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    quiet_optuna()
    cfg, echo = _local_worker(cfg, worker, echo or echo_stderr)
    storage = open_storage(url, cfg.heartbeat)
    study = load_worker_study(cfg, storage, worker)
    heartbeat = has_heartbeat(storage)
    runner = _runner(cfg, echo, inputs)
    runner.deadline = deadline  # a hard limit: the trial in flight stops at its next epoch end
    size = runner.inputs.space.size()

    def finished(study: Any, t: Any) -> None:
        if "duplicate_of" not in t.user_attrs:
            echo(f"[{count_trials(study)['done']}/{cfg.trials}] {trial_line(t)}")
        if on_trial is not None:
            on_trial(study)

    while True:
        why = _wants_trial(study, cfg, deadline, heartbeat, size)
        if why:
            if why == "space":
                echo(f"every head of the space ({size}) is measured: the search ends")
            return why
        study.optimize(runner.objective, n_trials=1, catch=(TrialDiverged, TrialError), callbacks=[finished],
                       gc_after_trial=True)


def _local_worker(cfg: SearchConfig, worker: int, echo: Callable[[str], None]) -> tuple[SearchConfig, Callable[[str], None]]:
    """With several local workers: worker ``worker``'s share of the threads, its device, and its
    lines prefixed with ``[worker i]``; one worker keeps ``cfg`` and ``echo``."""
    if cfg.workers == 1:
        return cfg, echo
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // cfg.workers))
    cfg = dataclasses.replace(cfg, device=worker_device(cfg.device, worker, torch.cuda.device_count()))
    prefix = f"[worker {worker}] "
    return cfg, lambda s: echo(prefix + s)


def _wants_trial(study: Any, cfg: SearchConfig, deadline: float | None, heartbeat: bool, size: int) -> str | None:
    """None when this worker should start another trial (before the deadline, while the study
    holds fewer than ``cfg.trials`` measured and running heads or has trials waiting, and heads
    of the space are unmeasured), else why not: ``timeout``, ``space`` or ``target``. When the
    rest are running on other workers (RDB storages), wait for them: a dead worker's trial is
    failed and retried here."""
    while True:
        fail_stale(study)
        c = count_trials(study, watched=heartbeat)
        if deadline is not None and time.time() >= deadline:
            return "timeout"
        if len(measured_heads(study)) >= size:
            return "space"
        if c["done"] + c["running"] < cfg.trials or c["waiting"]:
            return None
        if not (c["running"] and heartbeat):
            return "target"
        time.sleep(min(2.0, cfg.heartbeat))


def _runner(cfg: SearchConfig, echo: Callable[[str], None], inputs: TrialInputs | None = None) -> TrialRunner:
    """The worker's trial runner, its inputs prepared unless given."""
    if inputs is None:
        inputs = prepare_trial_inputs(cfg, echo)
    return TrialRunner(cfg, inputs, echo)


def prepare_and_describe(cfg: SearchConfig, echo: Callable[[str], None]) -> TrialInputs:
    """:func:`prepare_trial_inputs`, with the space and the time it took printed."""
    t0 = time.perf_counter()
    inputs = prepare_trial_inputs(cfg, echo)
    if cfg.prune and not cfg.multi and cfg.rungs:
        budget = (f"{cfg.min_steps} to {cfg.max_steps} steps (successive halving: the best 1/{cfg.reduction_factor} "
                  f"go on at step{'s' if len(cfg.rungs) > 1 else ''} {', '.join(map(str, cfg.rungs))})")
    else:
        budget = f"{cfg.max_steps} steps (no successive halving)"
    premise = describe_criterion(inputs.premise, cfg.escape)
    echo(f"search space (d={inputs.in_dim}, {inputs.space.size()} heads):\n{inputs.space.describe()}\n"
         f"budget per trial: {budget}\n{premise}\n"
         f"prepared data, initial backbone features and tangents in {time.perf_counter() - t0:.1f} s")
    return inputs


def worker_main(cfg_dict: dict[str, Any], worker: int, url: str, deadline: float | None) -> None:
    """Entry point of a spawned worker process (``cfg_dict``: ``dataclasses.asdict`` of the config);
    a Ctrl-C ends it quietly (its trial is marked interrupted and retried by the next run)."""
    try:
        run_worker(SearchConfig(**cfg_dict), worker, url, deadline)
    except KeyboardInterrupt:
        sys.exit(130)


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


__all__ = ["SearchResult", "StudyProgress", "check_data", "echo_stderr", "prepare_and_describe", "run_search", "run_worker",
           "worker_device", "worker_main"]
