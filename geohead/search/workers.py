"""Search workers: each runs trials of the shared study until it holds enough or time is up.

One worker runs in the calling process; with ``workers > 1`` each is a spawned process
(:func:`worker_main`) with its share of the CPU threads and, on several GPUs, its own device.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Any, Callable

import torch

from geohead.search.config import SearchConfig
from geohead.search.criteria import TrialDiverged
from geohead.search.escape import describe_criterion
from geohead.search.inputs import TrialInputs, prepare_trial_inputs
from geohead.search.study import load_worker_study, quiet_optuna
from geohead.search.trial import TrialError, TrialRunner, trial_line


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

    from geohead.search.storage import count_trials, has_heartbeat, open_storage

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
    from geohead.search.seen import measured_heads
    from geohead.search.storage import count_trials, fail_stale

    while True:
        fail_stale(study)
        c = count_trials(study)
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
    echo(f"search space (d={inputs.in_dim}, {inputs.space.size()} heads):\n{inputs.space.describe()}\n"
         f"budget per trial: {budget}\n{describe_criterion(inputs.premise)}\n"
         f"prepared data, initial backbone features and tangents in {time.perf_counter() - t0:.1f} s")
    return inputs


def worker_main(cfg_dict: dict[str, Any], worker: int, url: str, deadline: float | None) -> None:
    """Entry point of a spawned worker process (``cfg_dict``: ``dataclasses.asdict`` of the config)."""
    run_worker(SearchConfig(**cfg_dict), worker, url, deadline)


__all__ = ["echo_stderr", "prepare_and_describe", "run_worker", "worker_device", "worker_main"]
