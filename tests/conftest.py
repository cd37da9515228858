"""Shared pytest fixtures."""
from __future__ import annotations

from pathlib import Path

import pytest

#: Real CIFAR-10 arrays shipped beside the project (never copied into it): ../shared/data/
ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def tiny_cifar_files(folder: Path, n_train: int, n_test: int) -> Path:
    """``folder`` with random CIFAR-layout cifar10_train_10k.npz (``n_train`` images) and
    cifar10_test.npz (``n_test``), seeded: what the benchmarks read from ../shared/data."""
    import numpy as np

    rng = np.random.default_rng(0)
    for name, n in (("cifar10_train_10k.npz", n_train), ("cifar10_test.npz", n_test)):
        np.savez(folder / name, images=rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8),
                 labels=np.arange(n) % 10, classes=np.array([str(i) for i in range(10)]))
    return folder


def benchmark_module(name: str):
    """The module benchmarks/``name``.py, imported with benchmarks/ on the path only while it loads
    (its sibling imports, e.g. search_scale's ``import search_transfer``, resolve then)."""
    import importlib
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The folder ../shared/data (relative to the repo root); skips the test when it is absent."""
    if not (SHARED_DATA / "cifar10_test.npz").is_file():
        pytest.skip(
            f"real CIFAR-10 arrays not found at {SHARED_DATA} (expected cifar10_test.npz and "
            "cifar10_train_10k.npz, see ../shared/data/README.md); these tests need that folder"
        )
    return SHARED_DATA


@pytest.fixture(scope="module")
def one_thread():
    """Run a module's tiny problems (<= 4000 x 64) on one intra-op thread.

    A second thread buys nothing at that size, and when other processes share the 2 cores,
    OpenMP's spinning threads made them 40x slower. Use with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``.
    """
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture()
def tiny_whitening():
    """Expect whiten_'s notices that a tiny search whitens from fewer samples than dimensions
    (so the features' rank is below the width)."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"whiten_: .* samples for", category=UserWarning)
        warnings.filterwarnings("ignore", message=r"whiten_: features have numerical rank", category=UserWarning)
        yield

