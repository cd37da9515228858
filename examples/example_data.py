"""What both pipeline examples share: their data choice (the built-in shapes, or an .npz the user
names) as a torch Dataset, and the matching flags of ``geohead diagnose``. Imported from the
examples' folder (``python examples/NAME.py`` puts it on the path)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from PIL import Image
from torch.utils.data import Dataset

from geohead.data import ImageData, load_dataset

#: ``geohead diagnose``'s sizes: ``--quick`` (seconds, for tests) or the default run's.
QUICK_DIAGNOSIS = ["--n-test", "32", "--n-train", "32", "--orbit-images", "4", "--hessian-samples", "4",
                   "--collapse-batch", "4", "--mode", "fast", "--families", "rotate,crop", "--no-linear"]
DIAGNOSIS = ["--n-test", "500", "--n-train", "1000"]


class ImageDataset(Dataset):
    """geohead's ``ImageData`` (uint8 (N, 3, H, W) tensors) as a torch Dataset of (transform(PIL image), label)."""

    def __init__(self, data: ImageData, transform: Callable[[Image.Image], Any]) -> None:
        self.images = data.images.permute(0, 2, 3, 1).numpy()  # (N, H, W, 3), the layout PIL reads
        self.labels = data.labels.tolist()
        self.transform = transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        return self.transform(Image.fromarray(self.images[i])), self.labels[i]


def load_images(data: str, data_test: Path | None, n: int, seed: int) -> ImageData:
    """The training images: geohead's built-in shapes (``data == "shapes"``), or the .npz at ``data``."""
    if data != "shapes" and not (Path(data).is_file() and data.lower().endswith(".npz")):
        raise SystemExit(f"--data {data}: give 'shapes' or an existing .npz file (images uint8 (N, H, W, 3), labels)")
    if data_test is not None and (data == "shapes" or not data_test.is_file()):
        raise SystemExit(f"--data-test {data_test}: give an existing .npz file, with --data PATH.npz")
    return load_dataset(data, n=n, img_size=32, seed=seed)


def diagnose_data(data: str, data_test: Path | None, quick: bool) -> list[str]:
    """``geohead diagnose``'s data flags: the data the run trained on (and its test split when
    given), at the quick or the default sizes."""
    flags = ["--data", data] + (["--data-test", str(data_test)] if data_test is not None else [])
    return flags + (QUICK_DIAGNOSIS if quick else DIAGNOSIS)
