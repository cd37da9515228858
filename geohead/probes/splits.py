"""The one probe-split rule: which images a probe is fitted on and which it is scored on.

Every path that probes frozen features (the search's trained criteria, ``geohead train``'s
probes, ``geohead diagnose`` and :func:`geohead.diagnose_model`) takes its two sets from
:func:`probe_split`:

* a source with a test split of its own (:data:`SPLIT_SOURCES`: the built-in shapes, whose two
  splits come from disjoint seeds, and CIFAR) or a separate test source: the probe trains on the
  first ``n_train`` images of the training data and is scored on the test source, as given;
* one labelled file or folder and no separate test source (or the same file given twice): the
  file is split into disjoint parts by one seeded permutation, the first
  ``min(n_test, N // 3)`` images the probe-test part, the next ``n_train`` the probe-train part.

The images are duck-typed ``ImageData`` (``len()``, ``.subset(index)``); ``load(name, train,
n)`` loads a source (the caller binds the root, image size and seed).
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor

#: Sources whose test split is a different set of images (geohead.data's built-in names).
SPLIT_SOURCES: tuple[str, ...] = ("shapes", "cifar10", "cifar100")


@dataclasses.dataclass
class ProbeSplit:
    """The probe's two image sets and where they came from.

    Attributes:
        train, test: the probe-train and probe-test images (ImageData).
        held_out: True when both are parts of one source (``train_index``/``test_index`` are
            then their disjoint indices (n_train,), (n_test,) into it); False for a test source.
        source, test_source: the names of where they came from.
    """

    train: Any
    test: Any
    held_out: bool
    source: str
    test_source: str
    train_index: Tensor | None = None
    test_index: Tensor | None = None

    def note(self) -> str:
        """One line saying which images the probes fit and score."""
        if self.held_out:
            return (f"probes: {len(self.test)} images of {self.source} held out as the probe-test part, the probe trains "
                    f"on {len(self.train)} others of it (disjoint); pass a separate test source for a test split")
        return f"probes: trained on {len(self.train)} images of {self.source}, scored on {len(self.test)} of {self.test_source}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the sources, sizes and whether the test part was held out of the source."""
        return {"source": self.source, "test_source": self.test_source, "held_out": self.held_out,
                "n_train": len(self.train), "n_test": len(self.test)}


def has_test_split(source: str | os.PathLike) -> bool:
    """Whether ``source`` has a test split of its own (a built-in name, :data:`SPLIT_SOURCES`)."""
    return isinstance(source, str) and source.lower() in SPLIT_SOURCES


def same_source(a: str | os.PathLike, b: str | os.PathLike | None) -> bool:
    """Whether two sources name the same file or folder (a built-in name is never a file)."""
    if b is None or has_test_split(a) or has_test_split(b):
        return False
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


def held_out_indices(n: int, n_train: int | None, n_test: int | None, seed: int) -> tuple[Tensor, Tensor]:
    """Disjoint sorted indices (probe train (≤ n_train,), probe test (min(n_test, n // 3),)) of
    ``range(n)`` from ``torch.randperm(n)`` seeded with ``seed``: the test part first."""
    if n < 3:
        raise ValueError(f"a probe split needs at least 3 images, the source has {n}; give more images or a test source")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(int(seed)))
    n_te = min(n_test if n_test is not None else n, n // 3)
    end = n if n_train is None else n_te + n_train
    return perm[n_te:end].sort().values, perm[:n_te].sort().values


def probe_split(source: str | os.PathLike, test: str | os.PathLike | None, load: Callable[[Any, bool, int | None], Any], *,
                n_train: int | None, n_test: int | None, seed: int, data: Any = None) -> ProbeSplit:
    """The probe's train and test images under the module's rule.

    Args:
        source: the training data's name or path; test: a separate test source, or None.
        load: ``load(name, train, n)`` -> ImageData (n images, or all for None).
        n_train, n_test: the probe's sizes (None: all the images there are; a held-out test part
            is at most a third of the source).
        seed: the seed of the held-out permutation.
        data: the already loaded training images of ``source`` (else loaded here: ``n_train``
            images of a split source, ``n_train + n_test`` of a single file).
    """
    if test is not None and not same_source(source, test):
        return _with_test(source, test, load, n_train, n_test, data)
    if has_test_split(source):
        return _with_test(source, source, load, n_train, n_test, data)
    if data is None:
        data = load(source, True, None if n_train is None or n_test is None else n_train + n_test)
    tr, te = held_out_indices(len(data), n_train, n_test, seed)
    return ProbeSplit(data.subset(tr), data.subset(te), True, str(source), str(source), tr, te)


def _with_test(source: Any, test: Any, load: Callable[[Any, bool, int | None], Any], n_train: int | None,
               n_test: int | None, data: Any) -> ProbeSplit:
    """The probe trains on the first ``n_train`` training images and scores on ``test``."""
    if data is None:
        data = load(source, True, n_train)
    n = len(data) if n_train is None else min(len(data), n_train)
    train = data if n == len(data) else data.subset(torch.arange(n))
    return ProbeSplit(train, load(test, False, n_test), False, str(source), str(test))


__all__ = ["SPLIT_SOURCES", "ProbeSplit", "has_test_split", "held_out_indices", "probe_split", "same_source"]
