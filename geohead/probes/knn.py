"""Cosine-similarity weighted kNN on frozen (N, D) features (Wu et al. 2018; solo-learn's eval)."""
from __future__ import annotations

import warnings

import torch
from torch import Tensor
from torch.nn import functional as F

from geohead.probes.checks import accuracy, check_labels, check_split, resolve_num_classes

#: Elements of the (chunk, N) similarity matrix kNN holds at once when ``chunk`` is None (32 MiB
#: in float32).
_KNN_BUDGET = 1 << 23


@torch.no_grad()
def knn_classify(
    train_feats: Tensor,
    train_labels: Tensor,
    test_feats: Tensor,
    k: int = 20,
    temperature: float = 0.07,
    num_classes: int | None = None,
    chunk: int | None = None,
) -> Tensor:
    """Cosine-similarity weighted kNN (Wu et al. 2018, InstDisc; solo-learn's evaluation).

    Features are L2-normalised; for each test sample the ``k`` train samples of highest cosine
    similarity ``s_j`` vote with weight ``exp(s_j / T)``, and the class with the largest summed
    weight wins: ``score_c = Σ_{j ∈ topk} exp(s_j / T) · [y_j = c]``. Weights are computed as
    ``exp((s_j - s_max) / T)``, the same scores times a per-row constant, so the prediction is
    unchanged and small temperatures cannot overflow. Ties go to the lowest class id.

    Args:
        train_feats: (N, D) train features.
        train_labels: (N,) integer class ids of the train features.
        test_feats: (M, D) features to classify.
        k: neighbours. If ``k > N`` it is clipped to ``N`` with a warning (solo-learn clips
            silently to ``min(k, N)``).
        temperature: ``T`` of the vote weights, > 0.
        num_classes: number of classes; inferred as ``max(train_labels) + 1`` when None.
        chunk: test samples per block; the (chunk, N) similarity block bounds memory. None
            picks ``max(1, 2**23 // N)`` (32 MiB of float32 similarities).

    Returns:
        (M,) int64 predicted class ids, on the features' device.
    """
    train_feats, train_labels, test_feats, _ = check_split(
        train_feats, train_labels, test_feats, None
    )
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    n = train_feats.shape[0]
    if k > n:
        warnings.warn(
            f"k={k} is larger than the train set ({n} samples); using k={n}", stacklevel=2
        )
        k = n
    n_cls = resolve_num_classes(num_classes, train_labels)
    if chunk is None:
        chunk = max(1, _KNN_BUDGET // n)
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1 test samples, got {chunk}")

    train = F.normalize(train_feats, dim=1)
    labels = train_labels.to(train.device)
    preds = []
    for start in range(0, test_feats.shape[0], chunk):
        query = F.normalize(test_feats[start : start + chunk].to(train.device), dim=1)
        sims, idx = (query @ train.T).topk(k, dim=1)  # (b, k), sorted descending
        weights = ((sims - sims[:, :1]) / temperature).exp()
        scores = torch.zeros(query.shape[0], n_cls, dtype=weights.dtype, device=weights.device)
        scores.scatter_add_(1, labels[idx], weights)
        preds.append(scores.argmax(dim=1))
    return torch.cat(preds)


def knn_accuracy(
    train_feats: Tensor,
    train_labels: Tensor,
    test_feats: Tensor,
    test_labels: Tensor,
    k: int = 20,
    temperature: float = 0.07,
    num_classes: int | None = None,
    chunk: int | None = None,
) -> float:
    """Top-1 accuracy in [0, 1] of :func:`knn_classify` on ``(test_feats (M, D), test_labels (M,))``."""
    test_labels = check_labels(test_labels, torch.as_tensor(test_feats).shape[0], "test_labels",
                               "test_feats")
    pred = knn_classify(train_feats, train_labels, test_feats, k, temperature, num_classes, chunk)
    return accuracy(pred, test_labels)
