"""The SSL model: backbone + head (+ predictor, + EMA teacher) and the objective, built from a
:class:`~geohead.training.config.TrainConfig` or rebuilt from a checkpoint.

    views -> backbone -> features z (B, d) -> head -> embeddings e (B, k) (-> predictor)

:func:`build_models` is what ``geohead train`` and the search build (on the CPU, under the seed
the caller set); :func:`load_trained` is what ``geohead diagnose`` and ``geohead export`` read
back. Whatever differs between methods (views concatenated, the teacher, the predictor, DINO's
prototypes) is an attribute of the objective class, never a branch on its name here.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch import Tensor, nn

from geohead.io import shape_mismatch
from geohead.training.checkpoint import Checkpoint, CheckpointError, load_checkpoint
from geohead.heads import GeometricHead, HeadSpec
from geohead.objectives import Objective, make_teacher, objective_for_head

if TYPE_CHECKING:
    from geohead.training.config import TrainConfig


class SSLModel(nn.Module):
    """Backbone -> head (-> predictor), applied to a list of views in one call (one DDP forward).

    ``forward(views)`` takes a list of normalised image batches (B, 3, H, W) and returns
    ``(features, embeddings, predictions)``, three lists with one (B, ·) tensor per view;
    ``predictions`` is ``embeddings`` when there is no predictor. Views of equal resolution are
    passed through the backbone separately (each view's BatchNorm statistics are its own, as in
    the methods' official code) unless ``concat=True`` (DINO's multi-crop wrapper concatenates;
    :attr:`Objective.concat_views`).
    """

    def __init__(self, backbone: nn.Module, head: nn.Module, predictor: nn.Module | None = None, concat: bool = False) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = head
        self.predictor = predictor if predictor is not None else nn.Identity()
        self.concat = concat

    @property
    def channels_last(self) -> bool:
        """Whether the backbone wants channels-last inputs (recorded when it was created)."""
        return bool(getattr(self.backbone, "geohead_config", {}).get("channels_last"))

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


def resolve_device(name: str) -> torch.device:
    """``auto`` (CUDA when there is one), ``cpu``, ``cuda`` or ``cuda:K``; ``ValueError`` for any
    other name (``tpu``, ``mps``) and for a CUDA device on a machine without CUDA."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not isinstance(name, str) or name.split(":")[0] not in ("cpu", "cuda"):
        raise ValueError(f"device {str(name)[:40]!r} is not one geohead runs on; use auto, cpu, cuda or cuda:K")
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError):
        raise ValueError(f"device {name[:40]!r} is not a device name; use auto, cpu, cuda or cuda:K") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} requested but CUDA is not available; use device='cpu' or 'auto'")
    return dev


def build_objective(cfg: TrainConfig, head_spec: HeadSpec) -> Objective:
    """The objective of ``cfg`` with its arguments completed for the head (``args_for_head``);
    ``ValueError`` for a head output its loss cannot take (``check_out_dim``)."""
    return objective_for_head(cfg.objective, cfg.objective_args, head_spec.output_dim)


def build_backbone(cfg: TrainConfig) -> nn.Module:
    """The backbone of ``cfg`` (``backbone.name`` with ``backbone.args``), on the CPU."""
    from geohead.backbones import create_backbone

    kwargs = dict(cfg.backbone.args)
    if cfg.backbone.name is not None:
        kwargs["name"] = cfg.backbone.name
    return create_backbone(img_size=cfg.data.img_size, channels_last=cfg.backbone.channels_last, **kwargs)


def build_models(cfg: TrainConfig) -> tuple[SSLModel, Objective, HeadSpec, HeadSpec | None]:
    """Student model (backbone, head, predictor), objective and the head and predictor specs of
    ``cfg``, on the CPU. Parameters are drawn from torch's global generator (seed it first)."""
    backbone = build_backbone(cfg)
    head_spec = cfg.head.resolve(cfg.objective, backbone.num_features)
    objective = build_objective(cfg, head_spec)  # first: it refuses a head its loss cannot take
    head = GeometricHead.from_spec(head_spec)
    if cfg.head.init_scale != 1.0:  # e.g. the paper's pseudo-collapsed start (Fig. 3): weights x 0.1
        with torch.no_grad():
            for m in head.mlp.modules():
                if isinstance(m, nn.Linear):
                    m.weight.mul_(cfg.head.init_scale)
    pred_spec = cfg.head.resolve_predictor(cfg.objective, head_spec.output_dim)
    predictor = GeometricHead.from_spec(pred_spec) if pred_spec is not None else None
    model = SSLModel(backbone, head, predictor, concat=objective.concat_views)
    return model, objective, head_spec, pred_spec


def training_data(cfg: TrainConfig) -> Any:
    """The training set of ``cfg`` (``data.name`` … with ``cfg.seed``): what :func:`geohead.training.loop.train`
    trains on and what the search loads once for all its trials."""
    from geohead.data import load_dataset

    return load_dataset(cfg.data.name, root=cfg.data.root, train=True, download=cfg.data.download,
                        n=cfg.data.n_train, img_size=cfg.data.img_size, seed=cfg.seed)


def seeded_models(cfg: TrainConfig) -> tuple[SSLModel, Objective, HeadSpec, HeadSpec | None]:
    """:func:`build_models` after seeding torch's global generator with ``cfg.seed``: the initial
    models of a run (the backbone is drawn first), as :func:`geohead.training.loop.train` and the search
    (which measures the initial backbone) both build them."""
    torch.manual_seed(cfg.seed)
    return build_models(cfg)


def build_teacher(model: SSLModel) -> SSLModel:
    """The EMA teacher: a frozen copy of the student's backbone and head (no predictor)."""
    return make_teacher(SSLModel(model.backbone, model.head, None, concat=model.concat))


@dataclass
class TrainedModels:
    """The models of a checkpoint, in eval mode, on one device.

    ``model`` is the student :class:`SSLModel` (backbone, head, predictor or Identity),
    ``teacher`` the EMA teacher's SSLModel (BYOL, DINO) or None, ``objective`` with its buffers
    (DINO's centre) and temperature schedule at the checkpoint's epoch, ``meta`` the
    checkpoint's metadata.
    """

    model: SSLModel
    teacher: SSLModel | None
    objective: Objective
    meta: dict[str, Any]

    @property
    def predictor(self) -> nn.Module | None:
        p = self.model.predictor
        return None if isinstance(p, nn.Identity) else p

    @property
    def teacher_head(self) -> nn.Module | None:
        return self.teacher.head if self.teacher is not None else None

    @property
    def channels_last(self) -> bool:
        return self.model.channels_last


def load_section(module: nn.Module, ck: Checkpoint, prefix: str) -> None:
    """``module.load_state_dict(ck.section(prefix), strict=True)``; tensors that do not fit (another
    shape, a missing or extra name, under a checksum that holds) raise :class:`CheckpointError`
    naming the file and the first mismatch, not a traceback."""
    try:
        module.load_state_dict(ck.section(prefix), strict=True)
    except RuntimeError as exc:
        lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
        raise _misfit(ck, prefix, " ".join(lines[1:2] or lines[:1])) from None


def _misfit(ck: Checkpoint, prefix: str, detail: str) -> CheckpointError:
    return CheckpointError(
        f"checkpoint {str(ck.path)!r}: its {prefix!r} tensors do not fit the model its header describes "
        f"({detail[:200]}); it was edited or written by another program: use the checkpoint its run wrote, or "
        "start the run again with --overwrite"
    )


def _check_shapes(ck: Checkpoint, build: Callable[[], nn.Module], prefix: str) -> None:
    """The model ``build`` makes, built on the meta device (no memory), must hold exactly the
    names and shapes of ``ck``'s ``prefix`` tensors: a header can describe a model of any size,
    the tensors bound what is built for real."""
    with torch.device("meta"):
        shell = build()
    problem = shape_mismatch(shell.state_dict(), ck.section(prefix))
    if problem:
        raise _misfit(ck, prefix, problem)


def load_trained(source: str | os.PathLike | Checkpoint, device: str | torch.device = "cpu") -> TrainedModels:
    """Rebuild backbone, head, predictor, teacher and objective from a checkpoint (eval mode).

    The architecture comes from the checkpoint's metadata (``backbone``, ``head_spec``,
    ``predictor_spec``, ``objective`` + ``objective_hparams``), the weights from its tensors.
    """
    from geohead.backbones import rebuild_backbone

    ck = source if isinstance(source, Checkpoint) else load_checkpoint(source)
    meta = ck.meta
    missing = [k for k in ("backbone", "head_spec", "objective", "objective_hparams") if meta.get(k) is None]
    if missing:
        raise ValueError(f"checkpoint {str(ck.path)!r} lacks metadata {missing}; it was not written by geohead train")
    if not isinstance(meta["objective_hparams"], dict):
        raise ValueError(f"checkpoint {str(ck.path)!r}: objective_hparams is not a table of hyper-parameters; it was not "
                         "written by geohead train")
    spec = _header_spec(ck, "head_spec")
    try:  # the loss sized from the header before any module is built
        objective = objective_for_head(meta["objective"], meta["objective_hparams"], spec.output_dim)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"checkpoint {str(ck.path)!r}: its objective and objective_hparams do not fit its head "
                         f"({exc}); it was not written by geohead train") from None
    pred_spec = _header_spec(ck, "predictor_spec") if meta.get("predictor_spec") else None

    def build() -> SSLModel:
        predictor = GeometricHead.from_spec(pred_spec) if pred_spec is not None else None
        return SSLModel(rebuild_backbone(meta["backbone"]), GeometricHead.from_spec(spec), predictor,
                        concat=objective.concat_views)

    _check_shapes(ck, build, "model")
    model = build()
    load_section(model, ck, "model")
    load_section(objective, ck, "objective")
    if hasattr(objective, "set_epoch") and meta.get("epoch") is not None:
        objective.set_epoch(float(meta["epoch"]))
    teacher = None
    if ck.section("teacher"):
        teacher = build_teacher(model)
        load_section(teacher, ck, "teacher")
        teacher.to(device).eval()
    model.to(device).eval()
    objective.to(device).eval()
    return TrainedModels(model, teacher, objective, meta)


def _header_spec(ck: Checkpoint, key: str) -> HeadSpec:
    """The HeadSpec stored under ``key`` in ``ck``'s header. Only a spec's own table is read: a
    string there is not taken as a file to open (a header names no other file)."""
    value = ck.meta[key]
    if not isinstance(value, dict):
        raise ValueError(f"checkpoint {str(ck.path)!r}: {key} is a {type(value).__name__}, not a head spec's table; "
                         "it was not written by geohead train")
    return HeadSpec.from_dict(value)


def sync_batchnorm(model: SSLModel, cfg: TrainConfig, device: torch.device, world: int) -> SSLModel:
    """``model`` with SyncBatchNorm under torch.distributed when ``backbone.sync_batchnorm`` asks for it."""
    if not (world > 1 and cfg.backbone.sync_batchnorm):
        return model
    if device.type != "cuda":
        raise ValueError(
            "backbone.sync_batchnorm needs CUDA (PyTorch's SyncBatchNorm has no CPU kernel); on CPU set "
            "backbone.sync_batchnorm=false (per-process BatchNorm statistics) or use a LayerNorm backbone (ViT)"
        )
    return nn.SyncBatchNorm.convert_sync_batchnorm(model)
