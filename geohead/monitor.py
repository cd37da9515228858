"""Collapse monitors for any training loop: forward hooks on a backbone and a head.

geohead's own loop records RankMe and the std of normalised embeddings (see
:mod:`geohead.training.tracker`); :class:`GeometryMonitor` records those numbers, and α-ReQ, in a loop
geohead did not write (plain PyTorch, lightly, solo-learn; Lightning through
:class:`geohead.integrations.lightning.GeometryCallback`)::

    from geohead.monitor import GeometryMonitor

    with GeometryMonitor(backbone, head, every=20, log_file="geometry.jsonl") as monitor:
        for x0, x1 in loader:
            z0, z1 = head(backbone(x0).flatten(1)), head(backbone(x1).flatten(1))
            ...
    print(monitor.history[-1]["rankme_head"])

Nothing in the loop changes: the hooks only read the outputs of training-mode forwards
(``head.training``); evaluation forwards are neither counted nor recorded.
"""
from __future__ import annotations

import json
import numbers
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor, nn

from geohead import distributed
from geohead.errors import NonFiniteError
from geohead.logs import CsvLog, TensorBoardLog

#: The keys of every record (``hessian_*`` and ``m_over_h`` only on records that measured H_eff).
MONITOR_KEYS = (
    "step", "batch", "rankme_backbone", "rankme_head", "std_backbone", "std_head", "std_healthy_backbone",
    "std_healthy_head", "std_ratio_backbone", "std_ratio_head", "alpha_req_backbone", "alpha_req_head", "monitor_seconds",
)
HESSIAN_KEYS = ("hessian_lambda_min", "hessian_lambda_max", "hessian_num_negative", "m_over_h", "hessian_seconds")


def _first_tensor(x: Any) -> Tensor | None:
    """The tensor a module returned (the first one of a tuple/list/dict output)."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (tuple, list)):
        return next((t for t in (_first_tensor(v) for v in x) if t is not None), None)
    if isinstance(x, dict):
        return next((t for t in (_first_tensor(v) for v in x.values()) if t is not None), None)
    return None


class _LossAsObjective(nn.Module):
    """A loss function ``loss_fn(a, b) -> scalar`` (lightly's ``BarlowTwinsLoss``, any module or
    callable) seen as an objective with the ``.loss(a, b)`` that :class:`EffectiveHessian` uses."""

    def __init__(self, loss_fn: Callable[[Tensor, Tensor], Tensor]) -> None:
        super().__init__()
        self.loss_fn = loss_fn
        self.name = type(loss_fn).__name__

    def loss(self, a: Tensor, b: Tensor) -> Tensor:
        return self.loss_fn(a, b)


class GeometryMonitor:
    """Records RankMe, α-ReQ and the std of L2-normalised embeddings of a backbone's and a head's
    outputs every ``every`` training steps, from forward hooks.

    Each record (a dict appended to :attr:`history`, which keeps the latest ``max_history``) holds
    ``step``, ``batch`` (rows measured), ``rankme_backbone``, ``rankme_head``, ``std_backbone``,
    ``std_head`` (with the healthy value 1/√k as ``std_healthy_*``), ``alpha_req_backbone`` and
    ``alpha_req_head``, computed by
    :func:`geohead.geometry.rankme`, :func:`~geohead.geometry.alpha_req` and
    :func:`~geohead.geometry.normalized_std` on the batch of that forward (gathered over ranks
    under ``torch.distributed``), ``monitor_seconds``, the time these measurements took, and,
    where the loop gives its losses to :meth:`log_loss`, ``loss``: their mean since the record before.
    Non-finite embeddings (a diverged run) give NaN, never an error.

    Steps: a step is ``calls_per_step`` training-mode forwards of ``head``: 1 for a loop that
    concatenates the views into one batch (geohead's own), 2 for lightly's style
    ``z0 = model(x0); z1 = model(x1)``. Steps count from 1; step s is recorded when
    ``s % every == 0``, on the first head forward of that step. :meth:`arm` replaces the count
    with the caller's own step numbers (what the Lightning callback does).

    Backbone features: the backbone's output, flattened to (B, d) (``features`` replaces this,
    e.g. for a ViT that returns tokens). The output the head consumed is found by identity (the
    head's input shares its storage), else the oldest backbone output of the step with the head
    input's batch size, else the head's input itself.

    Effective Hessian (optional, with ``objective``): every ``hessian_every``-th record (the K-th,
    2K-th, ... counted from 1 as steps are) also holds
    λ_min/λ_max and the number of negative Ritz values of H_eff, and ‖M‖_F/‖H_eff‖_F, at the
    current backbone features of ``hessian_samples`` rows of the two views (the two head calls of
    the step; with ``calls_per_step=1``, the two halves of the batch), with
    :func:`~geohead.geometry.spectrum_summary` in ``"fast"`` mode (at most ``hessian_iters``
    Lanczos steps, 4 Frobenius probes, float64, BatchNorm in eval mode). ``objective`` is a
    geohead objective or any loss ``loss(a, b) -> scalar`` (lightly's losses).

    Cost, measured with ``benchmarks/monitor_overhead.py`` on the shapes recipe's setting
    (resnet18_w16, the recipe's 512-512 SiLU head, batch 256, one thread of a shared 2-core CPU,
    0.42 s a step): a plain record takes 80 ms, 1 % of a step at ``every=20`` (steps with/without
    the monitor: 1.01, median of 10 block pairs); a Hessian record (32 rows, d = 128) 0.19 s,
    about half a step, once every ``hessian_every`` records.

    Outputs: ``log_file`` (``.jsonl``: one JSON line per record; ``.csv``: a header of all keys,
    empty cells for keys a record lacks), ``tensorboard`` (a log directory or a
    ``SummaryWriter``; scalars under ``geometry/<key>``; torch.utils.tensorboard is imported only
    then), ``on_record`` (called with each finished record). Files are written by rank 0 only.

    Args:
        backbone, head: the modules to hook (any ``nn.Module``; the head's training flag decides
            which forwards count).
        every: steps between records (≥ 1); None: record only the steps given to :meth:`arm`.
        calls_per_step: training-mode head forwards per step (see above).
        objective, predictor, teacher: for the Hessian records (``predictor`` is required for
            objectives with one, e.g. BYOL; ``teacher``: an EMA teacher's head).
        hessian_every: measure H_eff on every K-th record (0: never).
        hessian_samples, hessian_iters: rows of each view and Lanczos steps for H_eff.
        max_samples: measure at most this many rows of each batch (default: all).
        features: maps the backbone's output to (B, d) features.
        max_history: records :attr:`history` keeps, the oldest dropped first (None: all; the
            log file and :attr:`records` still count every record).
        gather: gather the batch over ranks under ``torch.distributed`` (every rank must then run
            the same forwards, as DDP does).

    ``detach()`` removes the hooks (and closes the files it opened); the monitor is also a
    context manager that detaches on exit.
    """

    def __init__(
        self,
        backbone: nn.Module,
        head: nn.Module,
        every: int | None = 50,
        *,
        calls_per_step: int = 1,
        objective: Any = None,
        predictor: nn.Module | None = None,
        teacher: nn.Module | None = None,
        hessian_every: int = 0,
        hessian_samples: int = 32,
        hessian_iters: int = 10,
        max_samples: int | None = None,
        features: Callable[[Any], Tensor] | None = None,
        log_file: str | Path | None = None,
        tensorboard: Any = None,
        on_record: Callable[[dict[str, Any]], None] | None = None,
        gather: bool = True,
        max_history: int | None = 10_000,
    ) -> None:
        if not isinstance(backbone, nn.Module) or not isinstance(head, nn.Module):
            raise TypeError("GeometryMonitor(backbone, head, ...) needs two nn.Module objects")
        counts = {"every": (every, 1), "calls_per_step": (calls_per_step, 1), "hessian_every": (hessian_every, 0),
                  "hessian_samples": (hessian_samples, 1), "hessian_iters": (hessian_iters, 1), "max_samples": (max_samples, 1),
                  "max_history": (max_history, 1)}
        for name, (value, least) in counts.items():  # whole numbers: every=2.5 would silently record every 2nd step
            if (value is not None or name not in ("every", "max_samples", "max_history")) and (
                    isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least):
                raise ValueError(f"GeometryMonitor {name} must be a whole number >= {least}, got {value!r}")
        from geohead.geometry.summary import hessian_size_problem

        problem = hessian_size_problem({"hessian_samples": hessian_samples}, {"hessian_iters": hessian_iters})
        if problem:  # H_eff is (hessian_samples x d)-dimensional; its Lanczos basis grows with hessian_iters
            raise ValueError(f"GeometryMonitor {problem}")
        if hessian_every and objective is None:
            raise ValueError("hessian_every needs the loss: pass objective=<geohead objective or loss(a, b) module>")
        if log_file is not None and Path(log_file).suffix not in (".jsonl", ".csv"):
            raise ValueError(f"log_file must end in .jsonl or .csv, got {str(log_file)!r}")
        self.backbone, self.head = backbone, head
        self.every = int(every) if every is not None else None
        self.calls_per_step = int(calls_per_step)
        if objective is not None and not callable(getattr(objective, "loss", None)):
            objective = _LossAsObjective(objective)
        self.objective, self.predictor, self.teacher = objective, predictor, teacher
        self.hessian_every, self.hessian_samples, self.hessian_iters = int(hessian_every), hessian_samples, hessian_iters
        self.max_samples, self.features, self.gather = max_samples, features, gather
        self.log_file = Path(log_file) if log_file is not None else None
        self.on_record = on_record
        self.history: list[dict[str, Any]] = []
        self.max_history = max_history
        self.records = 0  # records finished, those dropped from history included
        self._csv = CsvLog(self.log_file, self._csv_keys()) if self.log_file is not None and self.log_file.suffix == ".csv" else None
        self._tb = TensorBoardLog(tensorboard) if tensorboard is not None else None
        self._loss_sum: Tensor | float = 0.0  # losses given by log_loss since the last record
        self._loss_n = 0
        self._calls = 0  # training-mode head forwards seen
        self._armed: int | None = None  # a step given by arm(), recorded on the next head forward
        self._manual = every is None
        self._pending_bb: deque[Tensor] = deque(maxlen=8)
        self._rec: dict[str, Any] | None = None  # the record waiting for the second view (Hessian)
        self._z_first: Tensor | None = None
        self._handles = [
            backbone.register_forward_hook(self._backbone_hook),
            head.register_forward_hook(self._head_hook),
        ]

    # ------------------------------------------------------------------ public
    @property
    def attached(self) -> bool:
        return bool(self._handles)

    @property
    def latest(self) -> dict[str, Any]:
        """The last finished record ({} before the first)."""
        return self.history[-1] if self.history else {}

    def arm(self, step: int) -> None:
        """Record the next training-mode head forward (and, for a Hessian record with
        ``calls_per_step`` ≥ 2, the one after it) as step ``step``; from the first call on, the
        monitor no longer counts steps itself."""
        self._manual = True
        self.flush()
        self._armed = int(step)

    def log_loss(self, loss: Tensor | float) -> None:
        """Give the monitor a training step's loss (a scalar tensor, detached here, or a float):
        the next record holds ``loss``, the mean of the losses given since the record before it
        (a tensor is summed on its device: no host sync per step)."""
        value = loss.detach().float().sum() if isinstance(loss, Tensor) else float(loss)
        self._loss_sum, self._loss_n = self._loss_sum + value, self._loss_n + 1

    def flush(self) -> None:
        """Finish a record still waiting for its second view (without the Hessian part)."""
        if self._rec is not None:
            rec, self._rec, self._z_first = self._rec, None, None
            self._finish(rec)

    def detach(self) -> None:
        """Remove the hooks, finish a pending record and close the TensorBoard writer it opened."""
        for h in self._handles:
            h.remove()
        self._handles = []
        self.flush()
        self._pending_bb.clear()
        if self._tb is not None:
            self._tb.close()

    def __enter__(self) -> "GeometryMonitor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()

    def __del__(self) -> None:  # hooks must not outlive the monitor that owns their state
        try:
            for h in self._handles:
                h.remove()
        except Exception:
            pass

    # ------------------------------------------------------------------ hooks
    def _position(self) -> tuple[int, int]:
        """(step, call within the step) of the next training-mode head forward."""
        return self._calls // self.calls_per_step + 1, self._calls % self.calls_per_step

    def _due(self) -> bool:
        if self._rec is not None:
            return True
        if self._manual:
            return self._armed is not None
        step, call = self._position()
        return call == 0 and step % self.every == 0

    def _backbone_hook(self, module: nn.Module, args: Any, output: Any) -> None:
        if self.head.training and self._due():
            t = self.features(output) if self.features is not None else _first_tensor(output)
            if isinstance(t, Tensor) and t.dim() >= 1:
                self._pending_bb.append(t.detach())

    def _head_hook(self, module: nn.Module, args: Any, output: Any) -> None:
        if not module.training:
            return
        due = self._due()
        if self._manual:
            step = self._armed if self._armed is not None else -1
        else:
            step = self._position()[0]
            self._calls += 1
        if not due:
            self._pending_bb.clear()
            return
        emb, x_in = _first_tensor(output), _first_tensor(args)
        if emb is None or x_in is None:
            return
        z = self._match_features(x_in)
        self._pending_bb.clear()
        with torch.no_grad():
            if self._rec is not None:  # second view of a Hessian record
                rec, z1, self._rec, self._z_first = self._rec, self._z_first, None, None
                rec.update(self._hessian(z1, z))
                self._finish(rec)
                return
            self._armed = None
            t0 = time.perf_counter()
            rec = self._measure(step, z, emb)
            rec["monitor_seconds"] = time.perf_counter() - t0
            if self._hessian_due():
                if self.calls_per_step == 1:  # one batch of concatenated views: its two halves
                    half = z.shape[0] // 2
                    rec.update(self._hessian(z[:half], z[half: 2 * half]))
                else:  # the other view comes with the step's next head forward
                    self._rec, self._z_first = rec, z.detach()
                    return
            self._finish(rec)

    def _match_features(self, x_in: Tensor) -> Tensor:
        pending = list(self._pending_bb)
        for t in pending:  # the output the head consumed (same storage after a flatten/view)
            if t.numel() == x_in.numel() and t.data_ptr() == x_in.data_ptr():
                return t.reshape(t.shape[0], -1)
        for t in pending:
            if t.shape[0] == x_in.shape[0]:
                return t.reshape(t.shape[0], -1)
        return x_in.detach().reshape(x_in.shape[0], -1)

    # ------------------------------------------------------------------ measurements
    def _hessian_due(self) -> bool:
        """Whether the record being made is a K-th one (K = hessian_every), records counted from 1 as steps are."""
        return bool(self.hessian_every) and (self.records + 1) % self.hessian_every == 0

    def _measure(self, step: int, feats: Tensor, embs: Tensor) -> dict[str, Any]:
        from geohead.geometry import collapse_record

        rec: dict[str, Any] = {"step": int(step)}
        parts = {}
        for name, x in (("backbone", feats), ("head", embs)):
            x = x.detach().reshape(x.shape[0], -1)
            if self.max_samples is not None:
                x = x[: self.max_samples]
            parts[name] = distributed.gather(x.float().contiguous()) if self.gather else x.float()
        rec["batch"] = int(parts["head"].shape[0])
        if self._loss_n:
            rec["loss"], self._loss_sum, self._loss_n = float(self._loss_sum) / self._loss_n, 0.0, 0
        rec.update(collapse_record(parts["backbone"], parts["head"]))
        return rec

    def _hessian(self, z1: Tensor, z2: Tensor) -> dict[str, Any]:
        """H_eff extremes and ‖M‖/‖H‖ at (z1, z2) — the same measurement as the Tracker's."""
        from geohead.geometry import EffectiveHessian, spectrum_summary

        n = min(self.hessian_samples, z1.shape[0], z2.shape[0])
        t0 = time.perf_counter()
        try:
            with torch.enable_grad():
                eh = EffectiveHessian(self.head, self.objective, z1[:n].float(), z2[:n].float(),
                                      predictor=self.predictor, teacher=self.teacher, bn_mode="eval")
                s = spectrum_summary(eh, mode="fast", max_iter=self.hessian_iters)
        except NonFiniteError:
            nan = float("nan")
            return {"hessian_lambda_min": nan, "hessian_lambda_max": nan, "hessian_num_negative": -1,
                    "m_over_h": nan, "hessian_seconds": time.perf_counter() - t0}
        return {"hessian_lambda_min": s.lambda_min, "hessian_lambda_max": s.lambda_max,
                "hessian_num_negative": s.num_negative, "m_over_h": s.m_over_h,
                "hessian_seconds": time.perf_counter() - t0}

    # ------------------------------------------------------------------ outputs
    def _finish(self, rec: dict[str, Any]) -> None:
        self.history.append(rec)
        self.records += 1
        if self.max_history is not None and len(self.history) > self.max_history:
            del self.history[: len(self.history) - self.max_history]
        if distributed.rank() == 0:
            if self.log_file is not None:
                self._write_file(rec)
            if self._tb is not None:
                self._tb.write(rec)
        if self.on_record is not None:
            self.on_record(rec)

    def _write_file(self, rec: dict[str, Any]) -> None:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        if self._csv is not None:
            self._csv.write(rec)
            return
        with open(self.log_file, "a") as f:
            f.write(json.dumps(rec) + "\n")

    def _csv_keys(self) -> list[str]:
        """The CSV header: every record's keys, the Hessian's when it is measured."""
        return list(MONITOR_KEYS) + ["loss"] + (list(HESSIAN_KEYS) if self.hessian_every else [])
