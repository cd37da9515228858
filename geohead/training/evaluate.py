"""The guillotine probes of a trained model: kNN and linear probes on backbone features vs head
embeddings, for the class and the data's recorded nuisance factors."""
from __future__ import annotations

from typing import Any, Callable

import torch

from geohead.training.config import TrainConfig
from geohead.training.model import SSLModel


def run_probes(cfg: TrainConfig, model: SSLModel, train_data: Any, device: torch.device,
               load_dataset: Callable[..., Any]) -> dict[str, Any]:
    """kNN and linear probes on backbone vs head outputs, for the class and the data's factors.

    The probe's images follow the one rule (:func:`geohead.probes.splits.probe_split`): a single
    file without ``data.test`` is split into disjoint parts; ``split`` in the result says which."""
    from geohead.features import extract
    from geohead.probes import guillotine_report
    from geohead.probes.splits import probe_split

    def load(name: Any, train: bool, n: int | None) -> Any:
        return load_dataset(name, root=cfg.data.root, train=train, download=cfg.data.download, n=n,
                            img_size=cfg.data.img_size, seed=cfg.seed)

    split = probe_split(cfg.data.name, cfg.data.test, load, n_train=cfg.probe.n_train,
                        n_test=cfg.probe.n_test or cfg.data.n_test, seed=cfg.seed, data=train_data)
    tr, test = split.train, split.test
    cl = model.channels_last
    fb_tr, fh_tr = extract(model.backbone, model.head, tr.images, train_data.mean, train_data.std, device, channels_last=cl)
    fb_te, fh_te = extract(model.backbone, model.head, test.images, train_data.mean, train_data.std, device, channels_last=cl)
    targets = probe_targets(tr, test, cfg.probe.factors, cfg.probe.factor_bins)
    probes = ("knn", "linear") if cfg.probe.linear else ("knn",)
    report = guillotine_report(fb_tr, fh_tr, fb_te, fh_te, targets, probes=probes,
                               knn_kwargs={"k": cfg.probe.knn_k, "temperature": cfg.probe.knn_t})
    return {**report.to_dict(), "split": split.to_dict()}


def probe_targets(train: Any, test: Any, factors: bool = True, bins: int = 4) -> dict[str, tuple[Any, Any]]:
    """The probes' targets: ``class``, and each nuisance factor both splits record (the shapes
    data's), binned into ``bins`` classes on the training split's quantiles when continuous.
    Values: (train labels (N,), test labels (M,))."""
    from geohead.probes import factor_targets

    targets = {"class": (train.labels, test.labels)}
    if factors and train.factors and test.factors:
        for name, values in train.factors.items():
            if name not in test.factors:
                continue
            kind = "categorical" if train.factor_kinds.get(name) == "categorical" else "continuous"
            y_tr, edges = factor_targets(values, kind=kind, bins=bins)
            y_te, _ = factor_targets(test.factors[name], kind=kind, bins=bins, edges=edges)
            targets[name] = (y_tr, y_te)
    return targets
