"""The SSL pipeline: one readable training loop for SimCLR, BYOL, SimSiam, Barlow Twins, VICReg, DINO.

    data (uint8, on device) -> views -> backbone -> head (-> predictor) -> objective
                                       EMA teacher (BYOL, DINO) -> target branch

Everything a step needs is random only through a generator seeded from (seed, step), so a
resumed run replays exactly the batches and views the killed run would have seen, and N
processes under torchrun (each applying its slice of the global batch's view parameters) see
exactly the views of one process. The run
folder holds ``config.json``, ``head.json``, ``metrics.jsonl`` (what ``geohead report`` plots),
``last.ckpt`` (safetensors, atomic) and, at the end, ``probes.json`` and ``summary.json``.
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
from geohead.checkpoint import CheckpointError, load_checkpoint, load_optimizer, optimizer_tensors, save_checkpoint
from geohead.config import TrainConfig
from geohead.heads import GeometricHead, HeadSpec
from geohead.objectives import Objective, ema_update_, get_objective, make_teacher


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


class SSLModel(nn.Module):
    """Backbone -> head (-> predictor), applied to a list of views in one call (one DDP forward).

    ``forward(views)`` takes a list of normalised image batches (B, 3, H, W) and returns
    ``(features, embeddings, predictions)``, three lists with one (B, ·) tensor per view;
    ``predictions`` is ``embeddings`` when there is no predictor. Views of equal resolution are
    passed through the backbone separately (each view's BatchNorm statistics are its own, as in
    the methods' official code) unless ``concat=True`` (DINO's multi-crop wrapper concatenates).
    """

    def __init__(self, backbone: nn.Module, head: nn.Module, predictor: nn.Module | None = None, concat: bool = False) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = head
        self.predictor = predictor if predictor is not None else nn.Identity()
        self.concat = concat

    def forward(self, views: list[Tensor]) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
        if self.concat:
            feats: list[Tensor] = []
            i = 0
            while i < len(views):  # consecutive views of one resolution go through together
                j = i
                while j < len(views) and views[j].shape[-2:] == views[i].shape[-2:]:
                    j += 1
                out = self.backbone(torch.cat(views[i:j]))
                feats.extend(out.chunk(j - i))
                i = j
        else:
            feats = [self.backbone(v) for v in views]
        embs = [self.head(f) for f in feats]
        preds = [self.predictor(e) for e in embs]
        return feats, embs, preds


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
    out_dir: Path
    steps: int
    final_loss: float
    probes: dict[str, Any] | None = None
    summary: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------- building blocks
def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} requested but CUDA is not available; use device='cpu' or 'auto'")
    return dev


def build_objective(cfg: TrainConfig, head_spec: HeadSpec) -> Objective:
    args = dict(cfg.objective_args)
    if cfg.objective == "dino":
        args.setdefault("out_dim", head_spec.output_dim)
        if args["out_dim"] != head_spec.output_dim:
            raise ValueError(
                f"objective_args.out_dim={args['out_dim']} but the head has {head_spec.output_dim} prototypes; "
                "make them equal (head.spec.prototypes)"
            )
    return get_objective(cfg.objective, **args)


def build_models(cfg: TrainConfig):
    """Student model (backbone, head, predictor), objective and head specs for ``cfg`` (on the CPU)."""
    from geohead.backbones import create_backbone

    kwargs = dict(cfg.backbone.args)
    if cfg.backbone.name is not None:
        kwargs["name"] = cfg.backbone.name
    backbone = create_backbone(img_size=cfg.data.img_size, channels_last=cfg.backbone.channels_last, **kwargs)
    head_spec = cfg.head.resolve(cfg.objective, backbone.num_features)
    head = GeometricHead.from_spec(head_spec)
    if cfg.head.init_scale != 1.0:  # e.g. the paper's pseudo-collapsed start (Fig. 3): weights x 0.1
        with torch.no_grad():
            for m in head.mlp.modules():
                if isinstance(m, nn.Linear):
                    m.weight.mul_(cfg.head.init_scale)
    pred_spec = cfg.head.resolve_predictor(cfg.objective, head_spec.output_dim)
    predictor = GeometricHead.from_spec(pred_spec) if pred_spec is not None else None
    objective = build_objective(cfg, head_spec)
    model = SSLModel(backbone, head, predictor, concat=cfg.objective == "dino")
    return model, objective, head_spec, pred_spec


def build_teacher(model: SSLModel) -> SSLModel:
    """The EMA teacher: a frozen copy of the student's backbone and head (no predictor)."""
    return make_teacher(SSLModel(model.backbone, model.head, None, concat=model.concat))


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
                n_target = 2 if objective.name == "dino" else len(views)
                _, target, _ = teacher(views[:n_target])
    embs = [e.float() for e in embs]
    preds = [p.float() for p in preds]
    if objective.needs_predictor:
        loss = objective(preds, [t.float() for t in target] if target is not None else embs)
    elif target is not None:
        loss = objective(embs, [t.float() for t in target])
    else:
        loss = objective(embs)
    return loss, feats[0], embs[0]


def _flat_params(module: nn.Module) -> Tensor:
    return torch.cat([p.detach().flatten().float() for p in module.parameters() if p.requires_grad]).cpu()


# ---------------------------------------------------------------------- the loop
def train(cfg: TrainConfig, resume: bool = True, overwrite: bool = False,
          callback: Callable[[EpochEnd], None] | None = None) -> RunResult:
    """Train ``cfg`` end to end; resume from ``<out>/last.ckpt`` when it holds the same run.

    ``callback`` (optional) receives an :class:`EpochEnd` before the first update and after
    every epoch, e.g. for per-epoch measurements that the tracker does not make.

    Raises :class:`TrainingDiverged` on a NaN/inf loss (the last good checkpoint stays), and
    ``ValueError`` when the run folder holds a different run (use ``overwrite=True`` or another
    ``out``).
    """
    from geohead.data import load_dataset, make_view_fn

    cfg.validate()
    dist_on = _init_distributed()
    rank, world = distributed.rank(), distributed.world_size()
    try:
        return _train(cfg, resume, overwrite, rank, world, load_dataset, make_view_fn, callback)
    finally:
        if dist_on:
            torch.distributed.destroy_process_group()


def _init_distributed() -> bool:
    """Join the process group that torchrun describes (WORLD_SIZE > 1); gloo on CPU, NCCL on GPU."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or torch.distributed.is_initialized():
        return False
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    torch.distributed.init_process_group(backend)
    return True


def _train(cfg: TrainConfig, resume: bool, overwrite: bool, rank: int, world: int, load_dataset, make_view_fn,
           callback: Callable[[EpochEnd], None] | None = None) -> RunResult:
    from geohead.optim import build_optimizer, lr_at, scaled_lr, set_lr

    device = resolve_device(cfg.device)
    if device.type == "cuda" and world > 1:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    out = cfg.out_dir
    is_main = rank == 0
    if cfg.optim.batch_size % world:
        raise ValueError(f"optim.batch_size={cfg.optim.batch_size} is not divisible by the {world} processes")
    local_bs = cfg.optim.batch_size // world

    data = load_dataset(cfg.data.name, root=cfg.data.root, train=True, download=cfg.data.download,
                        n=cfg.data.n_train, img_size=cfg.data.img_size, seed=cfg.seed)
    n = len(data)
    if n < cfg.optim.batch_size:
        raise ValueError(f"the training set has {n} images, fewer than optim.batch_size={cfg.optim.batch_size}")
    steps_per_epoch = n // cfg.optim.batch_size
    total_steps = max(1, math.ceil(cfg.optim.epochs * steps_per_epoch))
    run_steps = min(total_steps, cfg.optim.max_steps or total_steps)
    warmup_steps = int(round(cfg.optim.warmup_epochs * steps_per_epoch))

    torch.manual_seed(cfg.seed)
    model, objective, head_spec, pred_spec = build_models(cfg)
    recipe = cfg.data.views or cfg.objective
    view_fn = make_view_fn(recipe, img_size=cfg.data.img_size, mean=data.mean, std=data.std, **cfg.data.view_args)
    images = data.images.to(device)

    model.to(device)
    channels_last = bool(model.backbone.geohead_config.get("channels_last"))
    objective.to(device)
    if world > 1 and cfg.backbone.sync_batchnorm:
        if device.type != "cuda":
            raise ValueError(
                "backbone.sync_batchnorm needs CUDA (PyTorch's SyncBatchNorm has no CPU kernel); on CPU set "
                "backbone.sync_batchnorm=false (per-process BatchNorm statistics) or use a LayerNorm backbone (ViT)"
            )
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    teacher = build_teacher(model) if objective.uses_teacher else None
    optimizer = build_optimizer(cfg.optim, [model], device.type)
    base_lr = scaled_lr(cfg.optim)

    # ---------------------------------------------------------------- resume
    start_step = 0
    ckpt_path = out / "last.ckpt"
    if is_main:
        out.mkdir(parents=True, exist_ok=True)
    if ckpt_path.exists() and not overwrite:
        ck = load_checkpoint(ckpt_path)
        if not resume:
            raise ValueError(f"{out} already holds a run; pass overwrite=True (--overwrite) or choose another out")
        if _run_identity(ck.meta.get("config", {})) != _run_identity(cfg.to_dict()):
            raise ValueError(
                f"{out} holds a different run (its config differs from this one); "
                "use --overwrite to replace it or --out to choose another folder"
            )
        model.load_state_dict(ck.section("model"))
        if teacher is not None:
            teacher.load_state_dict(ck.section("teacher"))
        objective.load_state_dict(ck.section("objective"))
        load_optimizer(optimizer, ck.tensors, ck.meta["optimizer"])
        start_step = int(ck.meta["step"])
        if is_main:
            _truncate_metrics(out / "metrics.jsonl", start_step)
    elif is_main and overwrite:
        for name in ("last.ckpt", "metrics.jsonl", "probes.json", "summary.json"):
            (out / name).unlink(missing_ok=True)

    if is_main:
        (out / "config.json").write_text(cfg.to_json() + "\n")
        head_spec.to_json(out / "head.json")

    train_model: nn.Module = model
    if world > 1:
        train_model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if cfg.compile:
        train_model = torch.compile(train_model)
    use_bf16 = cfg.precision == "bf16" or (cfg.precision == "auto" and device.type == "cuda")
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16)

    whiten_pending = head_spec.whiten is not None and start_step == 0
    meta_static = {
        "geohead_version": __version__,
        "config": cfg.to_dict(),
        "head_spec": head_spec.to_dict(),
        "predictor_spec": pred_spec.to_dict() if pred_spec is not None else None,
        "backbone": getattr(model.backbone, "geohead_config", None),
        "objective": objective.name,
        "objective_hparams": objective.hparams(),
        "data": {"name": data.name, "n": n, "mean": list(data.mean), "std": list(data.std),
                 "img_size": cfg.data.img_size},
        "steps_per_epoch": steps_per_epoch,
        "total_steps": total_steps,
    }

    def save(step: int) -> None:
        if not is_main:
            return
        tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
        if teacher is not None:
            tensors.update({f"teacher.{k}": v for k, v in teacher.state_dict().items()})
        tensors.update({f"objective.{k}": v for k, v in objective.state_dict().items()})
        opt_tensors, opt_meta = optimizer_tensors(optimizer)
        tensors.update(opt_tensors)
        save_checkpoint(ckpt_path, tensors, {**meta_static, "step": step, "epoch": step / steps_per_epoch,
                                             "optimizer": opt_meta, "last_loss": last_loss})

    tracker = Tracker(cfg, objective, out / "metrics.jsonl", is_main)
    bar = _progress(cfg, is_main, start_step, run_steps)
    ckpt_every = cfg.track.ckpt_every or steps_per_epoch
    last_loss = float("nan")
    perm, perm_epoch = None, -1
    t_last, n_last = time.perf_counter(), 0
    model.train()
    for step in range(start_step, run_steps):
        epoch = step // steps_per_epoch
        if epoch != perm_epoch:
            perm = torch.randperm(n, generator=torch.Generator().manual_seed(cfg.seed * 100_003 + epoch)).to(device)
            perm_epoch = epoch
        b = step % steps_per_epoch
        idx = perm[b * cfg.optim.batch_size + rank * local_bs: b * cfg.optim.batch_size + (rank + 1) * local_bs]
        # one generator per step, the same on every rank: each rank applies its slice of the
        # global batch's view parameters, so N processes see exactly one process's views
        gen = torch.Generator(device=device).manual_seed(cfg.seed * 1_000_003 + step)
        views = view_fn(images[idx], gen, shard=(rank, world))
        if channels_last:
            views = [v.contiguous(memory_format=torch.channels_last) for v in views]
        if whiten_pending:
            with torch.no_grad():
                feats = model.backbone(views[0]).float()
            model.head.whiten_(distributed.gather(feats), mode=head_spec.whiten)
            if teacher is not None:  # the teacher starts as an exact copy of the student
                teacher.head.load_state_dict(model.head.state_dict())
            whiten_pending = False
        if callback is not None and is_main and step == 0:
            _call(callback, EpochEnd(0, 0, model, objective, teacher, views, out), model)
        if hasattr(objective, "set_epoch"):
            objective.set_epoch(step / steps_per_epoch)
        lr = lr_at(step, total_steps, warmup_steps, base_lr, cfg.optim.final_lr_ratio)
        set_lr(optimizer, lr)

        loss, feats0, embs0 = ssl_step(objective, train_model, teacher, views, autocast)
        last_loss = loss.item()
        if not math.isfinite(last_loss):
            saved = load_checkpoint(ckpt_path).meta["step"] if ckpt_path.exists() else None
            where = f"the last good checkpoint is {ckpt_path} (step {saved})" if saved is not None else "no checkpoint was written yet"
            raise TrainingDiverged(
                f"loss became {last_loss} at step {step} (epoch {step / steps_per_epoch:.2f}); {where}. "
                f"Lower optim.lr (now {cfg.optim.lr}) or add optim.grad_clip, then rerun."
            )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.optim.grad_clip:
            nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
        optimizer.step()
        if teacher is not None:
            m = objective.momentum(step, total_steps)
            ema_update_(teacher.backbone, model.backbone, m)
            ema_update_(teacher.head, model.head, m)

        n_last += cfg.optim.batch_size
        done = step + 1
        if done % cfg.track.log_every == 0 or done == run_steps:
            if world > 1:  # the loss of the global batch: the mean of the ranks' losses
                last_loss = float(distributed.all_reduce_mean(loss.detach()))
            now = time.perf_counter()
            ips = n_last / max(now - t_last, 1e-9)
            t_last, n_last = now, 0
            tracker.log({"step": done, "epoch": done / steps_per_epoch, "loss": last_loss, "lr": lr, "img_per_s": ips})
            if bar is not None:
                bar.set_postfix(loss=f"{last_loss:.4f}", img_s=f"{ips:.0f}", **tracker.postfix())
        t_pause = time.perf_counter()  # monitors and checkpoints do not count against throughput
        if cfg.track.monitor_every and (done % cfg.track.monitor_every == 0 or done == run_steps):
            tracker.monitor(done, model, feats0, embs0, views, teacher)
        if bar is not None:
            bar.update(1)
        if done % ckpt_every == 0 or done == run_steps:
            save(done)
        if callback is not None and is_main and done % steps_per_epoch == 0:
            _call(callback, EpochEnd(done // steps_per_epoch, done, model, objective, teacher, views, out), model)
        t_last += time.perf_counter() - t_pause
    if bar is not None:
        bar.close()

    result = RunResult(out, run_steps, last_loss)
    if is_main:
        probes = None
        if cfg.probe.enabled:
            probes = run_probes(cfg, model, data, device, load_dataset)
            (out / "probes.json").write_text(json.dumps(probes, indent=2) + "\n")
        summary = {"steps": run_steps, "total_steps": total_steps, "final_loss": last_loss,
                   "complete": run_steps == total_steps, "probes": probes}
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        result.probes, result.summary = probes, summary
    return result


def _call(callback: Callable[[EpochEnd], None], info: EpochEnd, model: nn.Module) -> None:
    """Run a user callback; the student goes back to train mode afterwards."""
    callback(info)
    model.train()


def _run_identity(cfg: dict) -> dict:
    """The parts of a config that must match for a resume (not max_steps, tracking, probes, device)."""
    d = json.loads(json.dumps(cfg))  # as stored in a checkpoint (tuples become lists)
    for key in ("track", "probe", "device", "compile", "out"):
        d.pop(key, None)
    d.get("optim", {}).pop("max_steps", None)
    return d


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop metric lines past ``step`` (written after the checkpoint a resumed run restarts from)."""
    if not path.exists():
        return
    keep = [line for line in path.read_text().splitlines() if line and json.loads(line).get("step", 0) <= step]
    path.write_text("".join(line + "\n" for line in keep))


def _progress(cfg: TrainConfig, is_main: bool, start: int, total: int):
    if not (is_main and cfg.track.progress):
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=start, desc=f"{cfg.objective}", unit="step", dynamic_ncols=True)


# ---------------------------------------------------------------------- tracking
class Tracker:
    """Writes metrics.jsonl: loss lines, collapse monitors, update ratios, Hessian extremes."""

    def __init__(self, cfg: TrainConfig, objective: Objective, path: Path, enabled: bool) -> None:
        self.cfg, self.objective, self.path, self.enabled = cfg, objective, path, enabled
        self.latest: dict[str, float] = {}
        self._prev: dict[str, Tensor] = {}

    def log(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")

    def postfix(self) -> dict[str, str]:
        return {"rankme": f"{self.latest['rankme_head']:.1f}"} if "rankme_head" in self.latest else {}

    def monitor(self, step: int, model: SSLModel, feats: Tensor, embs: Tensor, views: list[Tensor], teacher) -> None:
        from geohead.geometry.collapse import normalized_std, rankme

        with torch.no_grad():
            feats_g = distributed.gather(feats.detach().float())
            embs_g = distributed.gather(embs.detach().float())
        rec: dict[str, Any] = {
            "step": step, "kind": "monitor",
            "rankme_backbone": float(rankme(feats_g)), "rankme_head": float(rankme(embs_g)),
            "std_backbone": float(normalized_std(feats_g)), "std_head": float(normalized_std(embs_g)),
            "std_healthy_backbone": 1 / math.sqrt(feats_g.shape[1]), "std_healthy_head": 1 / math.sqrt(embs_g.shape[1]),
        }
        for name, module in (("head", model.head), ("backbone", model.backbone)):
            cur = _flat_params(module)
            if name in self._prev:
                prev = self._prev[name]
                rec[f"update_{name}"] = float((cur - prev).norm() / prev.norm().clamp_min(1e-12))
            self._prev[name] = cur
        if "update_head" in rec and "update_backbone" in rec:
            rec["update_ratio_head_over_backbone"] = rec["update_head"] / max(rec["update_backbone"], 1e-12)
        if self.enabled and self.cfg.track.hessian_every and step % self.cfg.track.hessian_every == 0:
            rec.update(self.hessian(model, views, teacher))
        self.latest.update({k: v for k, v in rec.items() if isinstance(v, float)})
        self.log(rec)

    def hessian(self, model: SSLModel, views: list[Tensor], teacher) -> dict[str, float]:
        """H_eff extremes and ‖M‖/‖H‖ at the current backbone features (the paper's Hessian tracking)."""
        from geohead.geometry.hessian import EffectiveHessian, spectrum_summary

        n = self.cfg.track.hessian_samples
        with torch.no_grad():
            z1 = model.backbone(views[0][:n]).detach().float()
            z2 = model.backbone(views[1][:n]).detach().float()
        predictor = None if isinstance(model.predictor, nn.Identity) else model.predictor
        eh = EffectiveHessian(model.head, self.objective, z1, z2, predictor=predictor,
                              teacher=teacher.head if teacher is not None else None, bn_mode="eval")
        s = spectrum_summary(eh, mode="fast", max_iter=self.cfg.track.hessian_iters)
        return {"hessian_lambda_min": s.lambda_min, "hessian_lambda_max": s.lambda_max,
                "hessian_num_negative": s.num_negative, "m_over_h": s.m_over_h,
                "hessian_matvecs": s.n_matvec, "hessian_bn_mode": "eval"}


# ---------------------------------------------------------------------- probes
def run_probes(cfg: TrainConfig, model: SSLModel, train_data, device: torch.device, load_dataset) -> dict[str, Any]:
    """kNN and linear probes on backbone vs head outputs, for the class and the data's factors."""
    from geohead.features import extract
    from geohead.probes import factor_targets, guillotine_report

    test_name = cfg.data.test or cfg.data.name
    test = load_dataset(test_name, root=cfg.data.root, train=False, download=cfg.data.download,
                        n=cfg.probe.n_test or cfg.data.n_test, img_size=cfg.data.img_size, seed=cfg.seed)
    tr = train_data if cfg.probe.n_train is None else train_data.subset(torch.arange(min(len(train_data), cfg.probe.n_train)))
    cl = bool(model.backbone.geohead_config.get("channels_last"))
    fb_tr, fh_tr = extract(model.backbone, model.head, tr.images, train_data.mean, train_data.std, device, channels_last=cl)
    fb_te, fh_te = extract(model.backbone, model.head, test.images, train_data.mean, train_data.std, device, channels_last=cl)
    targets = {"class": (tr.labels, test.labels)}
    if cfg.probe.factors and tr.factors and test.factors:
        for name, values in tr.factors.items():
            if name not in test.factors:
                continue
            kind = "categorical" if tr.factor_kinds.get(name) == "categorical" else "continuous"
            y_tr, edges = factor_targets(values, kind=kind, bins=cfg.probe.factor_bins)
            y_te, _ = factor_targets(test.factors[name], kind=kind, bins=cfg.probe.factor_bins, edges=edges)
            targets[name] = (y_tr, y_te)
    probes = ("knn", "linear") if cfg.probe.linear else ("knn",)
    report = guillotine_report(fb_tr, fh_tr, fb_te, fh_te, targets, probes=probes,
                               knn_kwargs={"k": cfg.probe.knn_k, "temperature": cfg.probe.knn_t})
    return report.to_dict()
