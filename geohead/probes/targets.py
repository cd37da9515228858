"""Nuisance factors as classification targets, and the majority-class chance level."""
from __future__ import annotations

import warnings
from typing import Literal

import torch
from torch import Tensor

from geohead.probes.checks import accuracy


def factor_targets(
    values: Tensor,
    kind: Literal["categorical", "continuous"] = "categorical",
    bins: int = 4,
    edges: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Turn a nuisance factor into class ids, so it is probed by classification (no regression).

    - ``kind="categorical"``: each distinct value is a class; ids follow the sorted distinct
      values. ``edges`` here is that sorted vocabulary: call once on the train split
      (``edges=None``) and pass the returned vocabulary for the test split, whose values must
      all occur in it.
    - ``kind="continuous"``: values are cut into ``bins`` quantile bins of the train split.
      ``edges`` are the ``bins - 1`` interior cut points (the train quantiles at ``i / bins``);
      bin ``i`` holds ``edges[i-1] <= v < edges[i]``. Pass the train edges for the test split so
      both splits share the bins. The train bins are (near) equally full, so the chance level
      is ``1 / bins``. Heavily tied values can make quantiles coincide; duplicated edges are
      merged with a warning (fewer bins; for a factor with a few values use "categorical").

    Args:
        values: (N,) factor values (any real dtype for "continuous", any for "categorical").
        kind: "categorical" or "continuous".
        bins: number of quantile bins, >= 2 (continuous only).
        edges: None on the train split; the returned edges on the test split.

    Returns:
        ``(labels (N,) int64, edges)``: edges is (bins - 1,) float64 cut points (continuous)
        or the (C,) sorted category values (categorical).
    """
    values = torch.as_tensor(values)
    if values.ndim != 1:
        raise ValueError(f"values must be 1-D (N,), got shape {tuple(values.shape)}")
    if kind == "categorical":
        if edges is None:
            edges = torch.unique(values)  # sorted
        edges = torch.as_tensor(edges, device=values.device)
        v = values.to(edges.dtype).contiguous()
        labels = torch.searchsorted(edges, v).clamp_max(edges.numel() - 1)
        found = edges[labels] == v
        if not bool(found.all()):
            unseen = torch.unique(values[~found])[:5].tolist()
            raise ValueError(
                f"values {unseen} do not occur in the train categories {edges[:10].tolist()}; "
                "pass the edges returned for the train split, or use kind='continuous'"
            )
        return labels.long(), edges
    if kind != "continuous":
        raise ValueError(f"kind must be 'categorical' or 'continuous', got {kind!r}")
    if values.is_complex() or values.dtype == torch.bool:
        raise ValueError(f"continuous values must be real numbers, got dtype {values.dtype}")
    v = values.double()
    if not bool(torch.isfinite(v).all()):
        raise ValueError("continuous factor values contain NaN/inf; drop or impute those rows")
    if edges is None:
        if bins < 2:
            raise ValueError(f"bins must be >= 2, got {bins}")
        if v.numel() < bins:
            raise ValueError(f"need at least bins={bins} values to compute quantiles, got {v.numel()}")
        q = torch.arange(1, bins, dtype=torch.float64, device=v.device) / bins
        edges = torch.quantile(v, q)
        unique = torch.unique(edges)
        if unique.numel() < edges.numel():
            warnings.warn(
                f"{edges.numel() - unique.numel()} quantile edge(s) coincide (tied values); "
                f"using {unique.numel() + 1} bins instead of {bins}. For a factor with few "
                "distinct values use kind='categorical'",
                stacklevel=2,
            )
        edges = unique
    edges = torch.as_tensor(edges, dtype=torch.float64, device=v.device)
    return torch.bucketize(v, edges, right=True), edges


def chance_level(train_labels: Tensor, test_labels: Tensor) -> float:
    """Accuracy of always predicting the train split's most frequent class, on test labels (M,).

    ``train_labels`` are (N,) class ids. ≈ 1/C for balanced classes and ≈ 1/bins for
    :func:`factor_targets` quantile bins; the honest baseline when classes are unbalanced.
    """
    train_labels = torch.as_tensor(train_labels).long()
    majority = torch.bincount(train_labels).argmax()
    return accuracy(majority.expand(len(test_labels)), torch.as_tensor(test_labels).long())
