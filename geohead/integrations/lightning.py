"""geohead's collapse monitors as a Lightning callback (``pip install lightning``).

::

    from geohead.integrations.lightning import GeometryCallback

    trainer = lightning.Trainer(callbacks=[GeometryCallback(every=20)])
    trainer.fit(module, loader)          # module has .backbone and .projection_head (or .head)

Steps are counted as :class:`~geohead.monitor.GeometryMonitor` counts them: from 1, step ``s``
being the ``s``-th optimiser step (``trainer.global_step + 1`` while its batch runs, since
Lightning's ``global_step`` counts the steps already taken). Step ``s`` is recorded when
``s % every == 0``, from its training forward (the model after ``s - 1`` updates), so the first
record never measures the untrained model; the record is logged at step ``s``.

Each record is kept in ``callback.monitor.history`` and logged as ``geometry/<key>``: through
``pl_module.log`` (on step; it lands in ``trainer.callback_metrics`` and can drive
``ModelCheckpoint``/``EarlyStopping``; ``prog_bar=True`` shows it in the progress bar) and to
each of ``trainer.loggers`` once, at the record's step (``logger.log_metrics``), because
Lightning re-sends a value that was logged with ``self.log`` on some steps only at every later
logging step of the epoch. Constants (``batch``, the healthy std ``1/√k``) and timings
(``*_seconds``) stay in the history but are not logged as scalars unless ``log_all=True``.
"""
from __future__ import annotations

import numbers
from typing import Any

from torch import Tensor, nn

try:
    from lightning.pytorch import Callback
except ImportError:  # pragma: no cover - the standalone package
    try:
        from pytorch_lightning import Callback
    except ImportError as exc:
        raise ImportError(
            'geohead.integrations.lightning needs Lightning: pip install lightning'
        ) from exc

from geohead.monitor import GeometryMonitor

#: Attribute names searched, in order, when the backbone or head is not given.
BACKBONE_NAMES = ("backbone", "encoder", "model_backbone", "net")
HEAD_NAMES = ("projection_head", "head", "projector", "projection")
#: Record keys not logged as scalars by default: constants of the run and timings.
NOT_LOGGED = ("step", "batch", "std_healthy_backbone", "std_healthy_head", "monitor_seconds", "hessian_seconds", "loss")


def _find(pl_module: nn.Module, given: nn.Module | str | None, names: tuple[str, ...], what: str) -> nn.Module:
    if isinstance(given, nn.Module):
        return given
    candidates = (given,) if isinstance(given, str) else names
    for name in candidates:
        mod = pl_module
        for part in name.split("."):
            mod = getattr(mod, part, None)
        if isinstance(mod, nn.Module):
            return mod
    children = ", ".join(n for n, _ in pl_module.named_children()) or "none"
    raise AttributeError(
        f"GeometryCallback found no {what} on {type(pl_module).__name__} (looked for "
        f"{', '.join(candidates)}; its submodules: {children}); pass {what}='<attribute name>' or the module"
    )


class GeometryCallback(Callback):
    """Collapse monitors (RankMe, α-ReQ, std of normalised embeddings; optionally H_eff) of a
    LightningModule's backbone and head, logged through ``pl_module.log``.

    Args:
        every: optimiser steps between records (steps every, 2·every, ..., counted from 1 as
            GeometryMonitor counts; see the module docstring).
        backbone, head: the modules, or attribute names (dotted paths allowed) of the
            LightningModule; default: the first of :data:`BACKBONE_NAMES` / :data:`HEAD_NAMES`.
        prefix: prefix of the logged names.
        prog_bar: show the logged values in Lightning's progress bar.
        log_all: also log the constants, timings and the loss (the module logs its own) of
            :data:`NOT_LOGGED` as scalars.
        objective, hessian_every, calls_per_step, **monitor_kwargs: passed to
            :class:`~geohead.monitor.GeometryMonitor` (``objective`` may be an attribute name of
            the module, e.g. ``"criterion"``). ``calls_per_step``: head forwards per training step
            (2 when ``training_step`` runs the head once per view); it decides where the Hessian
            record's second view comes from.
    """

    def __init__(
        self,
        every: int = 50,
        *,
        backbone: nn.Module | str | None = None,
        head: nn.Module | str | None = None,
        objective: Any = None,
        hessian_every: int = 0,
        calls_per_step: int = 1,
        prefix: str = "geometry/",
        prog_bar: bool = False,
        log_all: bool = False,
        **monitor_kwargs: Any,
    ) -> None:
        super().__init__()
        if isinstance(every, bool) or not isinstance(every, numbers.Integral) or every < 1:  # 2.5 is not every 2nd step
            raise ValueError(f"GeometryCallback every must be a whole number >= 1, got {every!r}")
        self.every, self.prefix, self.prog_bar, self.log_all = int(every), prefix, bool(prog_bar), bool(log_all)
        self._backbone, self._head, self._objective = backbone, head, objective
        self._kwargs = dict(monitor_kwargs, hessian_every=hessian_every, calls_per_step=calls_per_step)
        self.monitor: GeometryMonitor | None = None
        self._logged = 0
        self._last_armed: int | None = None

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit" or (self.monitor is not None and self.monitor.attached):
            return
        backbone = _find(pl_module, self._backbone, BACKBONE_NAMES, "backbone")
        head = _find(pl_module, self._head, HEAD_NAMES, "head")
        objective = getattr(pl_module, self._objective) if isinstance(self._objective, str) else self._objective
        history = self.monitor.history if self.monitor is not None else []  # a second fit continues it
        self.monitor = GeometryMonitor(backbone, head, every=None, objective=objective, **self._kwargs)
        self.monitor.history = history
        self._logged, self._last_armed = 0, None  # records of this monitor already logged

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        step = int(trainer.global_step) + 1  # the step this batch takes, counted from 1 (GeometryMonitor's count)
        if self.monitor is not None and step % self.every == 0 and step != self._last_armed:
            self.monitor.arm(step)
            self._last_armed = step

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.monitor is None:
            return
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, Tensor) and loss.numel() == 1:
            self.monitor.log_loss(loss)  # the next record holds the mean loss of the steps since the last
        self.monitor.flush()
        new = self.monitor.records - self._logged  # history may have dropped older records
        for rec in self.monitor.history[max(0, len(self.monitor.history) - new):] if new else []:
            values = {f"{self.prefix}{k}": float(v) for k, v in rec.items()
                      if k != "step" and isinstance(v, (int, float)) and (self.log_all or k not in NOT_LOGGED)}
            # callback_metrics and the progress bar (what ModelCheckpoint/EarlyStopping read)
            pl_module.log_dict(values, on_step=True, on_epoch=False, logger=False, prog_bar=self.prog_bar,
                               batch_size=rec.get("batch"))
            # the loggers get each record once, at its step: a value logged with self.log on some
            # steps only is re-sent by Lightning at every logging step until the epoch ends
            for logger in trainer.loggers:
                logger.log_metrics(values, step=rec["step"])
        self._logged = self.monitor.records

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.monitor is not None and stage == "fit":
            self.monitor.detach()


__all__ = ["BACKBONE_NAMES", "GeometryCallback", "HEAD_NAMES", "NOT_LOGGED"]
