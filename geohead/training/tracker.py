"""What a training run records besides the loss: collapse monitors, update ratios and the
effective Hessian's extremes, written as lines of ``metrics.jsonl`` (what ``geohead report`` plots),
the same records as rows of ``metrics.csv``, and with ``track.tensorboard`` as TensorBoard scalars
in the run folder (``train/<key>`` for loss lines, ``geometry/<key>`` for monitor records, the
tags of :class:`geohead.monitor.GeometryMonitor`, whose writers these are).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import Tensor, nn

from geohead import distributed
from geohead.training.config import TrainConfig
from geohead.io import append_text, atomic_write, json_lines
from geohead.logs import CsvLog, TensorBoardLog
from geohead.training.model import SSLModel
from geohead.objectives import Objective


def _flat_params(module: nn.Module) -> Tensor:
    return torch.cat([p.detach().flatten().float() for p in module.parameters() if p.requires_grad]).cpu()


class Tracker:
    """Writes metrics.jsonl (loss lines, collapse monitors, update ratios, Hessian extremes), the
    same records to metrics.csv beside it and, with ``track.tensorboard``, to TensorBoard events."""

    def __init__(self, cfg: TrainConfig, objective: Objective, path: Path, enabled: bool) -> None:
        self.cfg, self.objective, self.path, self.enabled = cfg, objective, path, enabled
        self.latest: dict[str, float] = {}
        self._prev: dict[str, Tensor] = {}
        self._csv = CsvLog(path.with_suffix(".csv"), grow=True)  # the keys of monitor records vary: the header grows
        self._tb = TensorBoardLog(path.parent, "train") if enabled and cfg.track.tensorboard else None
        if enabled:  # a resumed run keeps the lines of metrics.jsonl up to its checkpoint: the CSV holds the same
            self._csv.rewrite(lambda: records(path))

    def log(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        append_text(self.path, json.dumps(record) + "\n")  # never through a link planted in the run folder
        self._csv.write(record)
        if self._tb is not None:
            self._tb.write(record, "geometry" if record.get("kind") == "monitor" else "train")

    def close(self) -> None:
        """Close the TensorBoard writer (every record is on disk already)."""
        if self._tb is not None:
            self._tb.close()

    def postfix(self) -> dict[str, str]:
        return {"rankme": f"{self.latest['rankme_head']:.1f}"} if "rankme_head" in self.latest else {}

    def monitor(self, step: int, model: SSLModel, feats: Tensor, embs: Tensor, views: list[Tensor], teacher) -> None:
        from geohead.geometry.monitors import collapse_record

        with torch.no_grad():
            feats_g = distributed.gather(feats.detach().float())
            embs_g = distributed.gather(embs.detach().float())
        rec: dict[str, Any] = {"step": step, "kind": "monitor", "batch": int(embs_g.shape[0]),
                               **collapse_record(feats_g, embs_g, alpha=False)}
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
        from geohead.geometry import EffectiveHessian, spectrum_summary

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


#: what to do with a metrics.jsonl above the bound (a run of millions of records, or not a run's)
METRICS_HINT = "start the run in a new folder, or with --overwrite"


def records(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of ``metrics.jsonl`` (none when it is missing), other lines left out;
    streamed, never held whole."""
    if path.exists():
        yield from (rec for _, rec in json_lines(path, "metrics file", METRICS_HINT) if isinstance(rec, dict))


def truncate_metrics(path: Path, step: int) -> int:
    """Keep the lines of ``metrics.jsonl`` up to ``step`` (a resumed run restarts from its
    checkpoint at ``step``); a line that is not a JSON object (the torn last line of a killed
    write) is dropped, and said so on stderr. Returns the number of lines dropped as torn."""
    if not path.exists():
        return 0
    torn = 0

    def write(tmp: Path) -> None:  # line by line: the log is never held whole
        nonlocal torn
        with open(tmp, "w", encoding="utf-8") as out:
            for line, record in json_lines(path, "metrics file", METRICS_HINT):
                if not isinstance(record, dict) or isinstance(record.get("step", 0), bool) \
                        or not isinstance(record.get("step", 0), (int, float)):
                    torn += 1
                elif record.get("step", 0) <= step:
                    out.write(line + "\n")

    atomic_write(path, write)
    if torn:
        print(f"geohead: dropped {torn} torn line(s) of {path} (a run killed while writing it); "
              f"resuming from step {step}", file=sys.stderr, flush=True)
    return torn
