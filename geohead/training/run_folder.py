"""A run folder: the files ``geohead train`` writes there, whether a folder may take this run, and
which parts of a config make a run the same one (what a resume must match).

:func:`check_run_folder` runs before anything is built: the folder can be written, no run file in
it links out, and a ``config.json`` without a checkpoint (a run killed before its first checkpoint,
or another program's folder) is this run's before it is replaced.
"""
from __future__ import annotations

import json

from geohead.io import MAX_SMALL_FILE, folder_problem, read_json, refuse_links_out
from geohead.training.checkpoint import RUN_CHECKPOINTS
from geohead.training.config import ConfigError, TrainConfig

#: The files of a run folder besides its checkpoint (geohead.training.checkpoint.RUN_CHECKPOINTS).
RUN_FILES = ("metrics.jsonl", "metrics.csv", "config.json", "head.json", "probes.json", "summary.json")


def run_identity(cfg: dict) -> dict:
    """The parts of a config that must match for a resume (not max_steps, tracking, probes and their
    test data, device): a finished run reruns with another test set to probe it, training nothing."""
    d = json.loads(json.dumps(cfg))  # as stored in a checkpoint (tuples become lists)
    if not isinstance(d, dict) or not all(isinstance(d.get(s, {}), dict) for s in ("optim", "data")):
        return {"not a run's config": d}  # equal to no TrainConfig's
    for key in ("track", "probe", "device", "compile", "out"):
        d.pop(key, None)
    for section, key in (("optim", "max_steps"), ("data", "test"), ("data", "n_test")):  # test data: probes alone
        d.get(section, {}).pop(key, None)
    return d


def check_run_folder(cfg: TrainConfig, overwrite: bool) -> None:
    """``ConfigError`` unless ``cfg.out_dir`` may take this run: writable, no run file a link out of
    it, and (without ``overwrite``) a ``config.json`` there without a checkpoint is this run's."""
    out = cfg.out_dir
    problem = folder_problem(out)
    if problem:
        raise ConfigError(f"run folder {str(out)!r} cannot be written: {problem}; choose another out")
    refuse_links_out(out, (*RUN_CHECKPOINTS, *RUN_FILES), "run file", ConfigError)
    if overwrite or any((out / n).exists() for n in RUN_CHECKPOINTS):
        return  # a checkpointed folder is checked against this run when it is restored
    if not (out / "config.json").is_file():
        stray = [n for n in RUN_FILES if (out / n).exists()]
        if stray:  # a run writes config.json before anything else: these are another program's, or a run's remains
            raise ConfigError(f"{str(out)!r} holds {', '.join(stray)} but no config.json or checkpoint: not a run this "
                              "one continues; pass --overwrite to replace them (overwrite=True) or choose another out")
        return
    try:
        same = run_identity(read_json(out / "config.json", "config", "", limit=MAX_SMALL_FILE)) == run_identity(cfg.to_dict())
    except (ValueError, TypeError, AttributeError, OSError):  # unreadable, or not a run's config
        same = False
    if not same:
        raise ConfigError(f"{str(out)!r} holds a config.json that is not this run's and no checkpoint; pass --overwrite "
                          "to replace it (overwrite=True) or choose another out")


__all__ = ["RUN_FILES", "check_run_folder", "run_identity"]
