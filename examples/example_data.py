"""What both pipeline examples share: their data choice (the built-in shapes, or an .npz the user
names) and the matching data flags of ``geohead diagnose``. Imported from the examples' folder
(``python examples/NAME.py`` puts it on the path)."""
from __future__ import annotations

from pathlib import Path

from geohead.data import ImageData, load_dataset


def load_images(data: str, data_test: Path | None, n: int, seed: int) -> ImageData:
    """The training images: geohead's built-in shapes (``data == "shapes"``), or the .npz at ``data``."""
    if data != "shapes" and not (Path(data).is_file() and data.lower().endswith(".npz")):
        raise SystemExit(f"--data {data}: give 'shapes' or an existing .npz file (images uint8 (N, H, W, 3), labels)")
    if data_test is not None and (data == "shapes" or not data_test.is_file()):
        raise SystemExit(f"--data-test {data_test}: give an existing .npz file, with --data PATH.npz")
    return load_dataset(data, n=n, img_size=32, seed=seed)


def diagnose_data(data: str, data_test: Path | None) -> list[str]:
    """``geohead diagnose``'s data flags: the data the run trained on (and its test split when given)."""
    return ["--data", data] + (["--data-test", str(data_test)] if data_test is not None else [])
