"""load_dataset and ImageData: real CIFAR-10 arrays, .npz files, image folders, errors."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from geohead.data import ImageData, channel_stats, load_dataset

pytestmark = pytest.mark.usefixtures("one_thread")

CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def test_cifar10_npz_shapes_balance_and_pixels(shared_data: Path) -> None:
    path = shared_data / "cifar10_test.npz"
    d = load_dataset(path)
    assert d.images.shape == (10_000, 3, 32, 32) and d.images.dtype == torch.uint8
    assert d.labels.shape == (10_000,) and d.labels.dtype == torch.int64
    assert d.class_names == CIFAR10_CLASSES
    assert d.class_counts().tolist() == [1000] * 10
    assert d.factors is None
    with np.load(path) as z:  # channels-first copy of exactly the stored pixels
        raw, labels = z["images"], z["labels"]
    assert torch.equal(d.images[123], torch.from_numpy(raw[123]).permute(2, 0, 1))
    assert torch.equal(d.labels, torch.from_numpy(labels))
    # statistics quoted in ../shared/data/README.md
    assert np.allclose(d.mean, (0.494, 0.485, 0.450), atol=2e-3)
    assert np.allclose(d.std, (0.245, 0.242, 0.261), atol=2e-3)
    tr = load_dataset(str(shared_data / "cifar10_train_10k.npz"), n=2000, seed=1)
    assert len(tr) == 2000 and tr.class_counts().min() > 150  # random subset, roughly balanced
    again = load_dataset(str(shared_data / "cifar10_train_10k.npz"), n=2000, seed=1)
    assert torch.equal(tr.images, again.images)
    small = load_dataset(path, n=50, img_size=16)
    assert small.images.shape == (50, 3, 16, 16)


def test_channel_stats_matches_float64_reference() -> None:
    x = torch.randint(0, 256, (20, 3, 9, 7), dtype=torch.uint8)
    mean, std = channel_stats(x)
    ref = x.double() / 255
    assert np.allclose(mean, ref.mean(dim=(0, 2, 3)).numpy(), atol=1e-12)
    assert np.allclose(std, ref.std(dim=(0, 2, 3), unbiased=False).numpy(), atol=1e-12)


def _save_npz(path: Path, **arrays) -> Path:
    np.savez(path, **arrays)
    return path


def test_npz_variants_and_errors(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, (6, 8, 8, 3), dtype=np.uint8)
    labels = np.array([0, 1, 2, 0, 1, 2])
    d = load_dataset(_save_npz(tmp_path / "ok.npz", images=imgs, labels=labels), img_size=None)
    assert d.images.shape == (6, 3, 8, 8) and d.class_names == ["0", "1", "2"]
    gray = load_dataset(_save_npz(tmp_path / "g.npz", images=imgs[..., 0], labels=labels), img_size=None)
    assert torch.equal(gray.images[:, 0], gray.images[:, 2])
    named = load_dataset(
        _save_npz(tmp_path / "n.npz", images=imgs, labels=labels, classes=np.array(["a", "b", "c"])), img_size=None
    )
    assert named.class_names == ["a", "b", "c"]
    with pytest.raises(ValueError, match=r"lacks the key\(s\) \['labels'\]"):
        load_dataset(_save_npz(tmp_path / "k.npz", images=imgs, targets=labels))
    with pytest.raises(ValueError, match="must be uint8"):
        load_dataset(_save_npz(tmp_path / "f.npz", images=imgs / 255.0, labels=labels))
    with pytest.raises(ValueError, match="channels-first"):
        load_dataset(_save_npz(tmp_path / "c.npz", images=imgs.transpose(0, 3, 1, 2).copy(), labels=labels))
    with pytest.raises(ValueError, match="must be integers"):
        load_dataset(_save_npz(tmp_path / "l.npz", images=imgs, labels=labels.astype(np.float32)))
    with pytest.raises(ValueError, match=r"shape \(6,\)"):
        load_dataset(_save_npz(tmp_path / "m.npz", images=imgs, labels=labels[:4]))
    with pytest.raises(ValueError, match="labels go up to"):
        load_dataset(_save_npz(tmp_path / "x.npz", images=imgs, labels=labels, classes=np.array(["a"])))
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a readable .npz"):
        load_dataset(tmp_path / "junk.npz")
    (tmp_path / "data.csv").write_text("1,2\n")
    with pytest.raises(ValueError, match="expected an .npz"):
        load_dataset(tmp_path / "data.csv")


def test_image_folder_listing_stops_past_the_image_bound(tmp_path: Path, monkeypatch) -> None:
    """Listing stops at the first image past MAX_IMAGES (a folder of millions is not listed whole),
    and nested folders are found in sorted order as before."""
    from PIL import Image

    import geohead.data.loaders as loaders

    for i, rel in enumerate(["a/x/2.png", "a/1.png", "a/x/0.png", "b/0.png", "b/y/z/1.png", "a/x-y.png"]):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((4, 4, 3), 10 * i, np.uint8)).save(tmp_path / rel)
    d = load_dataset(tmp_path, img_size=4)
    assert d.labels.tolist() == [0, 0, 0, 0, 1, 1]
    # path order (a/x/... before a/x-y.png, which a string sort would put first), as rglob's sorted list was
    assert [int(v) for v in d.images[:, 0, 0, 0]] == [10, 20, 0, 50, 30, 40]  # a/1, a/x/0, a/x/2, a/x-y, b/0, b/y/z/1
    monkeypatch.setattr(loaders, "MAX_IMAGES", 5)
    with pytest.raises(ValueError, match="more than 5 images"):
        load_dataset(tmp_path, img_size=4)


def test_a_class_folder_linking_to_its_image_folder_is_refused(tmp_path: Path) -> None:
    """``c -> .`` would list every image again under another label."""
    import os

    from PIL import Image

    (tmp_path / "a").mkdir()
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(tmp_path / "a" / "0.png")
    os.symlink(tmp_path, tmp_path / "c")
    with pytest.raises(ValueError, match="class folder .* not a folder inside the image folder"):
        load_dataset(tmp_path, img_size=4)


def test_image_folder(tmp_path: Path) -> None:
    from PIL import Image

    rng = np.random.default_rng(1)
    root = tmp_path / "ds"
    root.mkdir()
    exact = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
    (root / "cats").mkdir()
    (root / "dogs").mkdir()
    Image.fromarray(exact).save(root / "cats" / "a.png")
    Image.fromarray(rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)).save(root / "cats" / "b.png")
    Image.fromarray(rng.integers(0, 256, (20, 20), dtype=np.uint8)).save(root / "dogs" / "c.png")  # grayscale
    d = load_dataset(root)
    assert d.class_names == ["cats", "dogs"]
    assert d.labels.tolist() == [0, 0, 1]
    assert d.images.shape == (3, 3, 32, 32)
    assert torch.equal(d.images[0], torch.from_numpy(exact).permute(2, 0, 1))  # lossless, same size
    with pytest.raises(ValueError, match="different sizes"):
        load_dataset(root, img_size=None)

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no class subfolders"):
        load_dataset(empty)
    (empty / "cls").mkdir()
    (empty / "cls" / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="contains no images"):
        load_dataset(empty)
    flat = tmp_path / "flat"
    flat.mkdir()
    Image.fromarray(exact).save(flat / "a.png")
    with pytest.raises(ValueError, match="move them into class subfolders"):
        load_dataset(flat)
    (root / "birds").mkdir()
    with pytest.raises(ValueError, match=r"class folder\(s\) \['birds'\]"):
        load_dataset(root)


def test_names_paths_and_cifar_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"did you mean 'cifar10'.*valid names are \['shapes', 'cifar10', 'cifar100'\]"):
        load_dataset("cifar")
    with pytest.raises(ValueError, match="unknown dataset 'imagenet'"):
        load_dataset("imagenet")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_dataset(tmp_path / "missing.npz")
    with pytest.raises(FileNotFoundError, match="download=True"):
        load_dataset("cifar10", root=tmp_path)  # no files, no download
    with pytest.raises(FileNotFoundError, match="cifar-100-python"):
        load_dataset("CIFAR100", root=tmp_path, train=False)
    with pytest.raises(ValueError, match="only understood by the 'shapes'"):
        load_dataset("cifar10", root=tmp_path, ranges={})
    with pytest.raises(ValueError, match="n must be"):
        load_dataset("shapes", n=0)
    d = load_dataset("shapes", n=30, img_size=24, ranges={"noise": (0.0, 0.0)})
    assert d.images.shape == (30, 3, 24, 24) and float(d.factors["noise"].max()) == 0.0


def test_cifar_through_torchvision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The torchvision path (download=False on an existing root) gives the ImageData layout."""
    from torchvision import datasets

    class FakeCIFAR10:
        base_folder = "cifar-10-batches-py"

        def __init__(self, root: str, train: bool, download: bool) -> None:
            assert root == str(tmp_path) and train is False and download is False
            self.data = np.zeros((4, 32, 32, 3), dtype=np.uint8)
            self.data[1] = 255
            self.targets = [0, 1, 2, 3]
            self.classes = ["a", "b", "c", "d"]

    monkeypatch.setattr(datasets, "CIFAR10", FakeCIFAR10)
    d = load_dataset("cifar10", root=tmp_path, train=False)
    assert d.images.shape == (4, 3, 32, 32) and int(d.images[1].min()) == 255
    assert d.class_names == ["a", "b", "c", "d"] and d.name == "cifar10-test"
    assert d.mean == pytest.approx((0.4914, 0.4822, 0.4465))  # the standard constants


def test_image_data_validation_and_subset() -> None:
    x = torch.zeros(4, 3, 5, 5, dtype=torch.uint8)
    y = torch.tensor([0, 1, 1, 0])
    with pytest.raises(ValueError, match="uint8 tensor"):
        ImageData(x.float(), y, ["a", "b"])
    with pytest.raises(ValueError, match="uint8 tensor"):
        ImageData(x.permute(0, 2, 3, 1), y, ["a", "b"])
    with pytest.raises(ValueError, match="labels span"):
        ImageData(x, y + 1, ["a", "b"])
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        ImageData(x, y[:3], ["a", "b"])
    with pytest.raises(ValueError, match="factor 'hue'"):
        ImageData(x, y, ["a", "b"], factors={"hue": torch.zeros(3)})
    d = ImageData(x, y.int(), ["a", "b"], factors={"hue": torch.rand(4), "kind": torch.tensor([0, 1, 0, 1])})
    assert d.labels.dtype == torch.int64
    assert d.factor_kinds == {"hue": "continuous", "kind": "categorical"}
    s = d.subset(torch.tensor([True, False, True, False]))
    assert len(s) == 2 and torch.equal(s.factors["hue"], d.factors["hue"][[0, 2]]) and s.mean == d.mean
    assert len(d.subset([3])) == 1 and len(d.subset(slice(0, 3))) == 3
    with pytest.raises(ValueError, match="integers"):
        d.subset(torch.tensor([0.5]))


def test_the_docs_npz_recipe_writes_files_the_loader_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/search.md's "Your images" block, run with torchvision's CIFAR10 stood in for (no
    download): the .npz files it writes load with their images, labels and class names."""
    import re

    from torchvision import datasets

    class FakeCIFAR10:  # torchvision's attributes: data (N, 32, 32, 3) uint8, targets, classes
        def __init__(self, root: str, train: bool, download: bool) -> None:
            n = 6 if train else 4
            self.data = np.arange(n * 32 * 32 * 3, dtype=np.int64).reshape(n, 32, 32, 3).astype(np.uint8)
            self.targets, self.classes = [i % 3 for i in range(n)], ["airplane", "automobile", "bird"]

    text = (Path(__file__).resolve().parents[1] / "docs" / "search.md").read_text()
    (block,) = re.findall(r"\*\*Your images\.\*\*.*?```python\n(.*?)```", text, re.S)
    monkeypatch.setattr(datasets, "CIFAR10", FakeCIFAR10)
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "docs/search.md", "exec"), {})
    for split, n in (("train", 6), ("test", 4)):
        d = load_dataset(f"cifar10_{split}.npz")
        ref = FakeCIFAR10("data", split == "train", True)
        assert d.images.shape == (n, 3, 32, 32) and torch.equal(d.images, torch.from_numpy(ref.data).permute(0, 3, 1, 2))
        assert d.labels.tolist() == ref.targets and d.class_names == ref.classes


def test_an_image_is_decoded_only_as_the_formats_its_extensions_name(tmp_path: Path) -> None:
    """A PCX file named .png opens in PIL by its bytes; the loader refuses it (an EPS so named
    would reach Ghostscript), while the same pixels saved as PNG load."""
    from PIL import Image

    pixels = np.full((8, 8, 3), 90, np.uint8)
    for name, fmt in (("ok", "PNG"), ("bad", "PCX")):
        (tmp_path / name / "a").mkdir(parents=True)
        Image.fromarray(pixels).save(tmp_path / name / "a" / "x.png", format=fmt)
    assert Image.open(tmp_path / "bad" / "a" / "x.png").format == "PCX"
    assert torch.equal(load_dataset(tmp_path / "ok", img_size=8).images[0], torch.from_numpy(pixels).permute(2, 0, 1))
    with pytest.raises(ValueError, match=r"x.png' cannot be decoded \(UnidentifiedImageError"):
        load_dataset(tmp_path / "bad", img_size=8)
