"""The SSL training loop: one readable loop for SimCLR, BYOL, SimSiam, Barlow Twins, VICReg, DINO.

    data (uint8, on device) -> views -> backbone -> head (-> predictor) -> objective
                                       EMA teacher (BYOL, DINO) -> target branch

It reads top to bottom: :func:`setup` builds the run (data, schedule, models from
:mod:`geohead.training.model`, optimiser), :func:`restore` resumes it from its checkpoint, :func:`ssl_step`
is the method's loss on one batch, :func:`train_step` one update, :func:`finish` the probes and
summary. :func:`train` returns the trained model, teacher and objective in its result.

Everything a step needs is random only through a generator seeded from (seed, step), so a
resumed run replays exactly the batches and views the killed run would have seen, and N
processes under torchrun (each applying its slice of the global batch's view parameters) see
exactly the views of one process. The run folder holds ``config.json``, ``head.json``,
``metrics.jsonl`` (what ``geohead report`` plots; the same records in ``metrics.csv``, and as
TensorBoard events with ``track.tensorboard``), ``last.safetensors`` (the checkpoint, atomic;
``last.ckpt`` in runs written before, still resumed) and, at the end, ``probes.json`` and
``summary.json``.
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor, nn

from geohead import distributed
from geohead._version import __version__
from geohead.data.loaders import fold_seed
from geohead.training.checkpoint import (
    LAST, LEGACY_LAST, RUN_CHECKPOINTS, CheckpointError, load_checkpoint, load_optimizer, optimizer_tensors, run_checkpoint, save_checkpoint,
)
from geohead.training.config import ConfigError, TrainConfig
from geohead.heads import HeadSpec
from geohead.io import atomic_write_text
from geohead.training.model import (
    SSLModel, build_teacher, load_section, resolve_device, seeded_models, sync_batchnorm, training_data,
)
from geohead.objectives import Objective, ema_update_
from geohead.training.run_folder import check_run_folder, run_identity


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


@dataclass
class EpochEnd:
    """What ``train(cfg, callback=fn)`` passes to ``fn``: once before the first update of a fresh
    run (``epoch == 0``) and after every completed epoch (main process only).

    ``model`` is the live student (train mode; a callback that changes the mode or the weights
    must restore them), ``views`` the normalised views of the step's batch (B, 3, H, W) each.
    """

    epoch: int
    step: int
    model: SSLModel
    objective: Objective
    teacher: SSLModel | None
    views: list[Tensor]
    out_dir: Path


@dataclass
class RunResult:
    """What :func:`train` returns: the run folder, its length and last loss, the probes and
    summary (main process), and the trained student ``model``, EMA ``teacher`` (or None) and
    ``objective`` (with its buffers, e.g. DINO's centre), in train mode on the run's device."""

    out_dir: Path
    steps: int
    final_loss: float
    model: SSLModel
    teacher: SSLModel | None
    objective: Objective
    probes: dict[str, Any] | None = None
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass
class Run:
    """Everything the loop needs, built once by :func:`setup`."""

    cfg: TrainConfig
    device: torch.device
    rank: int
    world: int
    data: Any
    steps_per_epoch: int
    total_steps: int
    run_steps: int
    warmup_steps: int
    model: SSLModel
    objective: Objective
    teacher: SSLModel | None
    head_spec: HeadSpec
    pred_spec: HeadSpec | None
    view_fn: Callable[..., list[Tensor]]
    images: Tensor
    optimizer: torch.optim.Optimizer
    base_lr: float
    train_model: nn.Module
    autocast: torch.autocast
    resumed_loss: float = float("nan")  # the checkpoint's last loss: a finished run rerun has no new step

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def out(self) -> Path:
        return self.cfg.out_dir

    @property
    def ckpt_path(self) -> Path:
        """Where this run writes its checkpoint."""
        return self.cfg.out_dir / LAST

    def saved_checkpoint(self) -> Path:
        """The checkpoint the folder holds now (``last.ckpt`` of an older run until the first save)."""
        return run_checkpoint(self.cfg.out_dir, ConfigError)


# ---------------------------------------------------------------------- setup
def train(cfg: TrainConfig, resume: bool = True, overwrite: bool = False,
          callback: Callable[[EpochEnd], None] | None = None, data: Any = None) -> RunResult:
    """Train ``cfg`` end to end; resume from ``<out>/last.safetensors``
    (or an older run's ``last.ckpt``) when it holds the same run.

    ``callback`` (optional) receives an :class:`EpochEnd` before the first update and after
    every epoch, e.g. for per-epoch measurements that the tracker does not make. ``data``
    (optional): ``cfg``'s training set, :func:`~geohead.training.model.training_data`, when the caller
    holds it already (the search loads it once for all its trials).

    Raises :class:`TrainingDiverged` on a NaN/inf loss (the last good checkpoint stays), and
    ``ValueError`` when the run folder holds a different run (use ``overwrite=True`` or another
    ``out``).
    """
    cfg.validate()
    check_run_folder(cfg, overwrite)
    dist_on = distributed.join_from_env()
    try:
        run = setup(cfg, distributed.rank(), distributed.world_size(), data)
        start = restore(run, resume, overwrite)
        last_loss = _loop(run, start, callback)
        result = finish(run, last_loss)
        if dist_on:  # no rank tears gloo down while another still talks to it (an abort at exit, seen in CI)
            torch.distributed.barrier()
        return result
    finally:
        if dist_on:
            torch.distributed.destroy_process_group()


def setup(cfg: TrainConfig, rank: int, world: int, data: Any = None) -> Run:
    """Data on the device (``data``, or :func:`~geohead.training.model.training_data`), the schedule, the
    models (:func:`~geohead.training.model.seeded_models`), the optimiser and the wrappers (DDP, compile,
    bf16 autocast) of one process."""
    from geohead.data import make_view_fn
    from geohead.training.optim import build_optimizer, scaled_lr

    device = resolve_device(cfg.device)
    if device.type == "cuda" and world > 1:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    if cfg.optim.batch_size % world:
        raise ValueError(f"optim.batch_size={cfg.optim.batch_size} is not divisible by the {world} processes")
    data = training_data(cfg) if data is None else data
    n = len(data)
    if n < cfg.optim.batch_size:
        raise ValueError(f"the training set has {n} images, fewer than optim.batch_size={cfg.optim.batch_size}")
    steps_per_epoch = n // cfg.optim.batch_size
    total_steps = max(1, math.ceil(cfg.optim.epochs * steps_per_epoch))

    model, objective, head_spec, pred_spec = seeded_models(cfg)
    view_fn = make_view_fn(cfg.data.views or cfg.objective, img_size=cfg.data.img_size, mean=data.mean,
                           std=data.std, **cfg.data.view_args)
    images = data.images.to(device)
    model.to(device)
    objective.to(device)
    model = sync_batchnorm(model, cfg, device, world)
    teacher = build_teacher(model) if objective.uses_teacher else None
    optimizer = build_optimizer(cfg.optim, [model], device.type)

    train_model: nn.Module = model
    if world > 1:
        train_model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if cfg.compile:
        train_model = torch.compile(train_model)
    use_bf16 = cfg.precision == "bf16" or (cfg.precision == "auto" and device.type == "cuda")
    return Run(
        cfg=cfg, device=device, rank=rank, world=world, data=data, steps_per_epoch=steps_per_epoch,
        total_steps=total_steps, run_steps=min(total_steps, cfg.optim.max_steps or total_steps),
        warmup_steps=int(round(cfg.optim.warmup_epochs * steps_per_epoch)), model=model, objective=objective,
        teacher=teacher, head_spec=head_spec, pred_spec=pred_spec, view_fn=view_fn, images=images,
        optimizer=optimizer, base_lr=scaled_lr(cfg.optim), train_model=train_model,
        autocast=torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16),
    )


# ---------------------------------------------------------------------- resume and save
def restore(run: Run, resume: bool, overwrite: bool) -> int:
    """Load the folder's checkpoint when it holds this run (returns its step), or clear the folder's run
    files for a fresh run (``overwrite``, or this run's folder without a checkpoint: killed before its
    first); writes ``config.json`` and ``head.json``. Returns the first step."""
    cfg, out, start_step = run.cfg, run.out, 0
    if run.is_main:
        out.mkdir(parents=True, exist_ok=True)
    saved = run.saved_checkpoint()
    if saved.exists() and not overwrite:
        ck = load_checkpoint(saved)
        if not resume:
            raise ValueError(f"{out} already holds a run; pass overwrite=True (--overwrite) or choose another out")
        if run_identity(ck.meta.get("config", {})) != run_identity(cfg.to_dict()):
            raise ValueError(
                f"{out} holds a different run (its config differs from this one); "
                "use --overwrite to replace it or --out to choose another folder"
            )
        load_section(run.model, ck, "model")
        if run.teacher is not None:
            load_section(run.teacher, ck, "teacher")
        load_section(run.objective, ck, "objective")
        try:
            load_optimizer(run.optimizer, ck.tensors, ck.meta["optimizer"])
            start_step = int(ck.meta["step"])
            if not 0 <= start_step <= run.total_steps:  # a step this run cannot have reached
                raise ValueError(f"step {start_step} is outside 0 to the run's {run.total_steps} steps")
            resumed_loss = float(ck.meta.get("last_loss", float("nan")))
        except (KeyError, TypeError, ValueError, OverflowError, AttributeError) as exc:  # a header geohead did not write
            raise CheckpointError(f"checkpoint {str(saved)!r}: its optimiser state or step cannot be read ({type(exc).__name__}: "
                                  f"{str(exc)[:80]}); start the run again with --overwrite") from None
        if run.is_main:
            from geohead.training.tracker import truncate_metrics

            truncate_metrics(out / "metrics.jsonl", start_step)
        run.resumed_loss = resumed_loss
    elif run.is_main and (overwrite or (out / "config.json").is_file()):  # or this run, killed before its first checkpoint
        for path in [*(out / n for n in (*RUN_CHECKPOINTS, "metrics.jsonl", "metrics.csv", "probes.json", "summary.json")),
                     *out.glob("events.out.tfevents.*")]:  # the run's own TensorBoard events too
            path.unlink(missing_ok=True)
    if run.is_main:
        atomic_write_text(out / "config.json", cfg.to_json() + "\n")
        run.head_spec.to_json(out / "head.json")
    return start_step


def save(run: Run, step: int, last_loss: float) -> None:
    """Write ``last.safetensors`` (main process): model, teacher, objective and optimiser state with the
    run's metadata (what :func:`geohead.training.model.load_trained` and ``geohead export`` read)."""
    if not run.is_main:
        return
    tensors = {f"model.{k}": v for k, v in run.model.state_dict().items()}
    if run.teacher is not None:
        tensors.update({f"teacher.{k}": v for k, v in run.teacher.state_dict().items()})
    tensors.update({f"objective.{k}": v for k, v in run.objective.state_dict().items()})
    opt_tensors, opt_meta = optimizer_tensors(run.optimizer)
    tensors.update(opt_tensors)
    meta = {
        "geohead_version": __version__,
        "config": run.cfg.to_dict(),
        "head_spec": run.head_spec.to_dict(),
        "predictor_spec": run.pred_spec.to_dict() if run.pred_spec is not None else None,
        "backbone": getattr(run.model.backbone, "geohead_config", None),
        "objective": run.objective.name,
        "objective_hparams": run.objective.hparams(),
        "data": {"name": run.data.name, "n": len(run.data), "mean": list(run.data.mean), "std": list(run.data.std),
                 "img_size": run.cfg.data.img_size},
        "steps_per_epoch": run.steps_per_epoch,
        "total_steps": run.total_steps,
        "step": step, "epoch": step / run.steps_per_epoch, "optimizer": opt_meta, "last_loss": last_loss,
    }
    save_checkpoint(run.ckpt_path, tensors, meta)
    (run.out / LEGACY_LAST).unlink(missing_ok=True)  # an older run's checkpoint, resumed from: superseded now


# ---------------------------------------------------------------------- one step
def batch_views(run: Run, step: int, perm: Tensor) -> list[Tensor]:
    """This rank's views of the global batch of ``step`` (``perm``: the epoch's permutation)."""
    bs, local_bs = run.cfg.optim.batch_size, run.cfg.optim.batch_size // run.world
    b = step % run.steps_per_epoch
    idx = perm[b * bs + run.rank * local_bs: b * bs + (run.rank + 1) * local_bs]
    # one generator per step, the same on every rank: each rank applies its slice of the
    # global batch's view parameters, so N processes see exactly one process's views
    gen = torch.Generator(device=run.device).manual_seed(fold_seed(run.cfg.seed * 1_000_003 + step))
    views = run.view_fn(run.images[idx], gen, shard=(run.rank, run.world))
    if run.model.channels_last:
        views = [v.contiguous(memory_format=torch.channels_last) for v in views]
    return views


def whiten_head(run: Run, views: list[Tensor]) -> None:
    """The head's data-driven whitening init on the first batch's backbone features (all ranks')."""
    with torch.no_grad():
        feats = run.model.backbone(views[0]).float()
    run.model.head.whiten_(distributed.gather(feats), mode=run.head_spec.whiten)
    if run.teacher is not None:  # the teacher starts as an exact copy of the student
        run.teacher.head.load_state_dict(run.model.head.state_dict())


def ssl_step(objective: Objective, model: nn.Module, teacher: nn.Module | None, views: list[Tensor],
             autocast: torch.autocast | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """The method's loss on one batch of views; returns (loss, features of view 0, embeddings of view 0).

    The forward passes run under ``autocast``; the objective always sees float32 embeddings.
    """
    ctx = autocast if autocast is not None else torch.autocast("cpu", enabled=False)
    with ctx:
        feats, embs, preds = model(views)
        target = None
        if teacher is not None:
            with torch.no_grad():
                _, target, _ = teacher(views[:objective.target_views])
    target = [t.float() for t in target] if target is not None else None
    loss = objective.batch_loss([e.float() for e in embs], [p.float() for p in preds], target)
    return loss, feats[0], embs[0]


def train_step(run: Run, step: int, views: list[Tensor], lr: float) -> tuple[Tensor, Tensor, Tensor]:
    """One update at learning rate ``lr``: loss, NaN check, backward, clip, optimiser, EMA.
    Returns (loss, features of view 0, embeddings of view 0)."""
    from geohead.training.optim import set_lr

    cfg = run.cfg
    if hasattr(run.objective, "set_epoch"):
        run.objective.set_epoch(step / run.steps_per_epoch)
    set_lr(run.optimizer, lr)
    loss, feats0, embs0 = ssl_step(run.objective, run.train_model, run.teacher, views, run.autocast)
    value = loss.item()
    if not math.isfinite(value):
        path = run.saved_checkpoint()
        saved = load_checkpoint(path).meta["step"] if path.exists() else None
        where = f"the last good checkpoint is {path} (step {saved})" if saved is not None else "no checkpoint was written yet"
        raise TrainingDiverged(
            f"loss became {value} at step {step} (epoch {step / run.steps_per_epoch:.2f}); {where}. "
            f"Lower optim.lr (now {cfg.optim.lr}) or add optim.grad_clip, then rerun."
        )
    run.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if cfg.optim.grad_clip:
        nn.utils.clip_grad_norm_(run.model.parameters(), cfg.optim.grad_clip)
    run.optimizer.step()
    if run.teacher is not None:
        m = run.objective.momentum(step, run.total_steps)
        ema_update_(run.teacher.backbone, run.model.backbone, m)
        ema_update_(run.teacher.head, run.model.head, m)
    return loss, feats0, embs0


# ---------------------------------------------------------------------- the loop
def _loop(run: Run, start_step: int, callback: Callable[[EpochEnd], None] | None) -> float:
    """Steps ``start_step .. run_steps``: views, update, logging, monitors, checkpoints, callbacks.
    Returns the last loss (of the global batch where it was logged)."""
    from geohead.training.optim import lr_at
    from geohead.training.tracker import Tracker

    cfg, spe = run.cfg, run.steps_per_epoch
    tracker = Tracker(cfg, run.objective, run.out / "metrics.jsonl", run.is_main)
    bar = _progress(cfg, run.is_main, start_step, run.run_steps)
    ckpt_every = cfg.track.ckpt_every or spe
    whiten_pending = run.head_spec.whiten is not None and start_step == 0
    last_loss, perm, perm_epoch = run.resumed_loss, torch.empty(0), -1
    t_last, n_last = time.perf_counter(), 0
    run.model.train()
    for step in range(start_step, run.run_steps):
        if step // spe != perm_epoch:
            perm_epoch = step // spe
            perm = torch.randperm(len(run.data), generator=torch.Generator().manual_seed(fold_seed(cfg.seed * 100_003 + perm_epoch))).to(run.device)
        views = batch_views(run, step, perm)
        if whiten_pending:
            whiten_head(run, views)
            whiten_pending = False
        if callback is not None and run.is_main and step == 0:
            _call(callback, EpochEnd(0, 0, run.model, run.objective, run.teacher, views, run.out), run.model)
        lr = lr_at(step, run.total_steps, run.warmup_steps, run.base_lr, cfg.optim.final_lr_ratio)
        loss, feats0, embs0 = train_step(run, step, views, lr)
        last_loss = loss.item()
        n_last += cfg.optim.batch_size
        done = step + 1
        if done % cfg.track.log_every == 0 or done == run.run_steps:
            if run.world > 1:  # the loss of the global batch: the mean of the ranks' losses
                last_loss = float(distributed.all_reduce_mean(loss.detach()))
            now = time.perf_counter()
            ips = n_last / max(now - t_last, 1e-9)
            t_last, n_last = now, 0
            tracker.log({"step": done, "epoch": done / spe, "loss": last_loss, "lr": lr, "img_per_s": ips})
            if bar is not None:
                bar.set_postfix(loss=f"{last_loss:.4f}", img_s=f"{ips:.0f}", **tracker.postfix())
        t_pause = time.perf_counter()  # monitors and checkpoints do not count against throughput
        if cfg.track.monitor_every and (done % cfg.track.monitor_every == 0 or done == run.run_steps):
            tracker.monitor(done, run.model, feats0, embs0, views, run.teacher)
        if bar is not None:
            bar.update(1)
        if done % ckpt_every == 0 or done == run.run_steps:
            save(run, done, last_loss)
        if callback is not None and run.is_main and done % spe == 0:
            _call(callback, EpochEnd(done // spe, done, run.model, run.objective, run.teacher, views, run.out), run.model)
        t_last += time.perf_counter() - t_pause
    if bar is not None:
        bar.close()
    tracker.close()
    return last_loss


# ---------------------------------------------------------------------- finish
def finish(run: Run, last_loss: float) -> RunResult:
    """Probes (``probes.json``) and ``summary.json`` on the main process; the result."""
    from geohead.data import load_dataset
    from geohead.training.evaluate import run_probes

    result = RunResult(run.out, run.run_steps, last_loss, run.model, run.teacher, run.objective)
    if not run.is_main:
        return result
    probes = None
    if run.cfg.probe.enabled:
        probes = run_probes(run.cfg, run.model, run.data, run.device, load_dataset)
        atomic_write_text(run.out / "probes.json", json.dumps(probes, indent=2) + "\n")
    summary = {"steps": run.run_steps, "total_steps": run.total_steps,
               "final_loss": last_loss if math.isfinite(last_loss) else None,  # strict JSON: no NaN
               "complete": run.run_steps == run.total_steps, "probes": probes}
    atomic_write_text(run.out / "summary.json", json.dumps(summary, indent=2) + "\n")
    result.probes, result.summary = probes, summary
    return result


def _call(callback: Callable[[EpochEnd], None], info: EpochEnd, model: nn.Module) -> None:
    """Run a user callback; the student goes back to train mode afterwards."""
    callback(info)
    model.train()


def _progress(cfg: TrainConfig, is_main: bool, start: int, total: int):
    if not (is_main and cfg.track.progress):
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=start, desc=f"{cfg.objective}", unit="step", dynamic_ncols=True)
