"""The guillotine report: probe backbone and head features for the class and nuisance factors.

Chaudhry 2026, Sec. 5 ("the head must be discarded after pretraining"): a factor the backbone
keeps but the head's outputs no longer predict is information the head destroyed to become
invariant to it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from torch import Tensor

from geohead.probes.knn import knn_accuracy
from geohead.probes.linear import linear_probe, mlp_probe
from geohead.probes.targets import chance_level

PROBES: tuple[str, ...] = ("knn", "linear", "mlp")
SPACES: tuple[str, ...] = ("backbone", "head")


@dataclass
class GuillotineReport:
    """Probe accuracies per target (class label, nuisance factors) in backbone and head spaces.

    ``accuracy[target][space][probe]`` is the test accuracy in [0, 1] with space in
    ("backbone", "head") and probe in :attr:`probes`; ``chance[target]`` the majority-class
    baseline (:func:`chance_level`). A factor the backbone predicts well above chance but the
    head predicts at chance is information the head destroyed (the paper's guillotine argument).
    """

    accuracy: dict[str, dict[str, dict[str, float]]]
    chance: dict[str, float]
    probes: tuple[str, ...] = ("knn", "linear")
    num_classes: dict[str, int] = field(default_factory=dict)

    def destroyed(self, target: str, probe: str = "knn") -> float:
        """Backbone minus head accuracy: what the head lost about ``target`` (by ``probe``)."""
        acc = self.accuracy[target]
        return acc["backbone"][probe] - acc["head"][probe]

    def to_dict(self) -> dict:
        """JSON-ready: ``{"probes": [...], "targets": {t: {"chance", "num_classes",
        "backbone": {probe: acc}, "head": {probe: acc}}}}``."""
        return {
            "probes": list(self.probes),
            "targets": {
                t: {
                    "chance": self.chance[t],
                    "num_classes": self.num_classes.get(t),
                    **{s: dict(self.accuracy[t][s]) for s in SPACES},
                }
                for t in self.accuracy
            },
        }

    @classmethod
    def from_dict(cls, d: dict) -> "GuillotineReport":
        """Inverse of :meth:`to_dict` (e.g. a run's probes.json)."""
        targets = d["targets"]
        return cls(
            accuracy={t: {s: dict(v[s]) for s in SPACES} for t, v in targets.items()},
            chance={t: v["chance"] for t, v in targets.items()},
            probes=tuple(d["probes"]),
            num_classes={t: v["num_classes"] for t, v in targets.items() if v.get("num_classes") is not None},
        )

    def table(self) -> str:
        """Plain-text table: one row per target; columns backbone/head per probe, then chance."""
        cols = [f"{s} {p}" for p in self.probes for s in SPACES] + ["chance"]
        width = max(len(t) for t in [*self.accuracy, "target"])
        cw = max(8, *(len(c) for c in cols))
        lines = ["  ".join([f"{'target':<{width}}", *(f"{c:>{cw}}" for c in cols)])]
        for t, acc in self.accuracy.items():
            vals = [acc[s][p] for p in self.probes for s in SPACES] + [self.chance[t]]
            lines.append("  ".join([f"{t:<{width}}", *(f"{v:>{cw}.3f}" for v in vals)]))
        return "\n".join(lines)


def guillotine_report(
    backbone_train: Tensor,
    head_train: Tensor,
    backbone_test: Tensor,
    head_test: Tensor,
    targets: dict[str, tuple[Tensor, Tensor]],
    probes: Sequence[str] = ("knn", "linear"),
    *,
    knn_kwargs: dict | None = None,
    linear_kwargs: dict | None = None,
    mlp_kwargs: dict | None = None,
) -> GuillotineReport:
    """Probe backbone and head features for every target: the guillotine comparison.

    Args:
        backbone_train: (N, d) backbone features ``z`` of the train split;
        head_train: (N, k) head outputs ``h(z)`` of the same samples;
        backbone_test: (M, d) and head_test: (M, k) the same for the test split.
        targets: name -> (train_labels (N,), test_labels (M,)) integer class ids, e.g.
            ``{"class": ..., "hue": factor_targets(...)...}``; see :func:`factor_targets`.
        probes: any of "knn", "linear", "mlp".
        knn_kwargs / linear_kwargs / mlp_kwargs: passed to :func:`knn_accuracy`,
            :func:`linear_probe`, :func:`mlp_probe`.

    Returns:
        A :class:`GuillotineReport`.
    """
    probes = tuple(probes)
    bad = [p for p in probes if p not in PROBES]
    if bad or not probes:
        raise ValueError(f"unknown probes {bad or list(probes)}; choose from {list(PROBES)}")
    if not targets:
        raise ValueError("targets is empty; pass e.g. {'class': (train_labels, test_labels)}")
    for name, backbone, head in (("train", backbone_train, head_train), ("test", backbone_test, head_test)):
        n_backbone, n_head = torch.as_tensor(backbone).shape[0], torch.as_tensor(head).shape[0]
        if n_backbone != n_head:
            raise ValueError(
                f"backbone_{name} has {n_backbone} rows but head_{name} has "
                f"{n_head}; they must be features of the same samples"
            )
    fns: dict[str, tuple[Callable[..., float], dict | None]] = {
        "knn": (knn_accuracy, knn_kwargs),
        "linear": (linear_probe, linear_kwargs),
        "mlp": (mlp_probe, mlp_kwargs),
    }
    spaces = {"backbone": (backbone_train, backbone_test), "head": (head_train, head_test)}
    accuracy: dict[str, dict[str, dict[str, float]]] = {}
    chance: dict[str, float] = {}
    num_classes: dict[str, int] = {}
    for target, pair in targets.items():
        if len(pair) != 2:
            raise ValueError(f"targets[{target!r}] must be a (train_labels, test_labels) pair")
        y_train, y_test = (torch.as_tensor(y) for y in pair)
        accuracy[target] = {
            s: {p: fns[p][0](tr, y_train, te, y_test, **(fns[p][1] or {})) for p in probes}
            for s, (tr, te) in spaces.items()
        }
        chance[target] = chance_level(y_train, y_test)
        num_classes[target] = int(torch.unique(torch.cat([y_train, y_test])).numel())
    return GuillotineReport(accuracy, chance, probes, num_classes)
