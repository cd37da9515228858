"""Input validation shared by the probes: features, labels, train/test splits, class counts.

Conventions: features are ``(N, D)`` floating tensors (computed in float32, or in float64 when
given float64), labels are ``(N,)`` non-negative integer class ids. Bad input raises a
``ValueError`` that names the bad value and the fix.
"""
from __future__ import annotations

import torch
from torch import Tensor


def compute_dtype(*xs: Tensor) -> torch.dtype:
    """float64 if any input is float64, else float32 (half/bfloat16 features are upcast)."""
    return torch.float64 if any(x.dtype == torch.float64 for x in xs) else torch.float32


def check_feats(x: Tensor, name: str) -> Tensor:
    """Validate an (N, D) finite floating feature tensor with N >= 1; return it as a tensor."""
    x = torch.as_tensor(x)
    if x.ndim != 2:
        raise ValueError(
            f"{name} must be a 2-D (N, D) feature tensor, got shape {tuple(x.shape)}; "
            "flatten or pool the features first"
        )
    if not (x.is_floating_point()):
        raise ValueError(f"{name} must be floating point, got dtype {x.dtype}; call .float()")
    if x.shape[0] == 0:
        raise ValueError(f"{name} is empty (0 samples); pass at least one sample")
    if not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).any(dim=1).sum())
        raise ValueError(
            f"{name} contains non-finite values (NaN/inf) in {bad} of {x.shape[0]} rows; "
            "check the model that produced them (a diverged run?) or drop those rows"
        )
    return x


def check_labels(y: Tensor, n: int, name: str, feats_name: str) -> Tensor:
    """Validate (n,) non-negative integer class ids matching ``feats_name``'s n rows; return int64."""
    y = torch.as_tensor(y)
    if y.ndim != 1:
        raise ValueError(f"{name} must be 1-D (N,), got shape {tuple(y.shape)}")
    if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise ValueError(
            f"{name} must be integer class ids, got dtype {y.dtype}; "
            "use factor_targets() to turn continuous values into classes"
        )
    if y.shape[0] != n:
        raise ValueError(
            f"{name} has {y.shape[0]} labels but {feats_name} has {n} rows; "
            "they must have the same length"
        )
    if y.numel() and int(y.min()) < 0:
        raise ValueError(f"{name} has negative class id {int(y.min())}; ids must be >= 0")
    return y.long()


def check_split(
    train_feats: Tensor, train_labels: Tensor, test_feats: Tensor, test_labels: Tensor | None
) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """Validate a train (N, D) / test (M, D) pair with labels (N,) and (M,) (test optional).

    Returns them with labels as int64 and both feature tensors on one dtype
    (:func:`compute_dtype`). The train labels must hold at least 2 distinct classes.
    """
    train_feats = check_feats(train_feats, "train_feats")
    test_feats = check_feats(test_feats, "test_feats")
    if train_feats.shape[1] != test_feats.shape[1]:
        raise ValueError(
            f"train_feats has dimension {train_feats.shape[1]} but test_feats has "
            f"{test_feats.shape[1]}; both splits must come from the same feature space"
        )
    train_labels = check_labels(train_labels, train_feats.shape[0], "train_labels", "train_feats")
    if test_labels is not None:
        test_labels = check_labels(test_labels, test_feats.shape[0], "test_labels", "test_feats")
    n_cls = int(torch.unique(train_labels).numel())
    if n_cls < 2:
        raise ValueError(
            f"train_labels contain {n_cls} distinct class(es); a probe needs at least 2 "
            "(a constant factor carries no information to probe)"
        )
    dtype = compute_dtype(train_feats, test_feats)
    return train_feats.to(dtype), train_labels, test_feats.to(dtype), test_labels


def resolve_num_classes(num_classes: int | None, *labels: Tensor | None) -> int:
    """``num_classes``, or ``max(labels) + 1`` over the given (N,) label tensors when None.

    Raises if ``num_classes`` is too small for the largest class id present.
    """
    needed = max(int(y.max()) + 1 for y in labels if y is not None and y.numel())
    if num_classes is None:
        return needed
    if num_classes < needed:
        raise ValueError(
            f"num_classes={num_classes} but the labels contain class id {needed - 1}; "
            f"pass num_classes >= {needed} or None to infer it"
        )
    return int(num_classes)


def accuracy(pred: Tensor, labels: Tensor) -> float:
    """Fraction in [0, 1] of (M,) predictions equal to the (M,) labels."""
    return float((pred == labels.to(pred.device)).double().mean())
