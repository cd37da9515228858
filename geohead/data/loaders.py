"""``load_dataset``: one entry point for the built-in shapes, CIFAR-10/100, .npz files and image folders."""
from __future__ import annotations

import difflib
import math
import os
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.nn import functional as F

from geohead.data.dataset import ImageData

#: Names ``load_dataset`` understands besides paths.
DATASET_NAMES: tuple[str, ...] = ("shapes", "cifar10", "cifar100")
#: Default sizes of the built-in shapes splits.
SHAPES_TRAIN_N = 10_000
SHAPES_TEST_N = 2_000
IMAGE_EXTENSIONS: tuple[str, ...] = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm")
#: The PIL decoders those extensions name; a file is decoded only as one of them, whatever its
#: bytes say (PIL would otherwise open an EPS named .png through Ghostscript).
IMAGE_FORMATS: tuple[str, ...] = ("PNG", "JPEG", "BMP", "GIF", "WEBP", "TIFF", "PPM")
NPZ_LAYOUT = (
    "an .npz with 'images' uint8 (N, H, W, 3) (or (N, H, W) grayscale), 'labels' integer (N,) and "
    "optionally 'classes' str (C,)"
)
#: Bounds on what a caller may ask for, checked before anything is allocated: images in a subset
#: or a generated split, the image side, the bytes of their uint8 pixels, and one image file's pixels.
MAX_IMAGES = 2_000_000
MAX_IMG_SIZE = 1024
MAX_PIXEL_BYTES = 1 << 32
MAX_FILE_PIXELS = 1 << 24
MAX_SEED = 1 << 62


def fold_seed(value: int, bits: int = 64) -> int:
    """``value`` reduced modulo 2^bits: a seed that mixes a user's seed (≤ 2^62) with steps,
    epochs or workers stays a valid seed for torch (64 bits) or numpy and Optuna (``bits=32``).
    A value already below 2^bits is returned unchanged, so every draw it made stays the same."""
    return int(value) % (1 << bits)

#: Standard CIFAR normalisation constants (training sets, images / 255).
CIFAR_STATS: dict[str, tuple[tuple[float, float, float], tuple[float, float, float]]] = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
}


def default_root() -> Path:
    """Where torchvision datasets live by default: ``$GEOHEAD_DATA`` or ``~/.cache/geohead/data``."""
    return Path(os.environ.get("GEOHEAD_DATA", Path.home() / ".cache" / "geohead" / "data")).expanduser()


def shapes_seed(seed: int, train: bool) -> int:
    """Generator seed of a shapes split: ``2·seed`` (train) and ``2·seed + 1`` (test), disjoint for all seeds."""
    return 2 * int(seed) + (0 if train else 1)


def load_dataset(
    name_or_path: str | os.PathLike,
    root: str | os.PathLike | None = None,
    train: bool = True,
    download: bool = False,
    n: int | None = None,
    img_size: int | None = 32,
    seed: int = 0,
    **kw: Any,
) -> ImageData:
    """Load a dataset as :class:`ImageData` (uint8 (N, 3, H, W) images, int64 labels).

    Args:
        name_or_path: "shapes" (built in, generated), "cifar10" / "cifar100" (torchvision's
            datasets under ``root``), a path to an .npz file (layout of ../shared/data/README.md:
            ``images`` uint8 (N, H, W, C), ``labels`` (N,), optional ``classes``), or a folder with
            one subfolder of images per class.
        root: directory of torchvision's CIFAR files (default :func:`default_root`).
        train: which split; for shapes the two splits come from disjoint seeds
            (:func:`shapes_seed`); ignored for a file or folder (the path is the split).
        download: let torchvision download CIFAR (needs internet).
        n: keep a random subset of ``n`` samples (seeded by ``seed``; for shapes: generate ``n``;
            default 10,000 train / 2,000 test).
        img_size: resize to img_size × img_size (bilinear, antialiased) when the stored size
            differs; ``None`` keeps the stored size (an image folder then needs equal sizes).
        seed: seed of the shapes generator and of the subset choice.
        **kw: passed to :func:`geohead.data.shapes.make_shapes` for "shapes" (e.g. ``ranges``).

    Raises:
        ValueError: unknown name, malformed .npz, folder without images, bad arguments.
        FileNotFoundError: a path or a CIFAR root that does not exist.
    """
    problem = size_problem(n, img_size)
    if problem:
        raise ValueError(problem)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be an integer from 0 to 2^62, got {seed!r}; give a smaller seed")
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise TypeError(f"load_dataset: give a dataset name ({', '.join(DATASET_NAMES)}) or the path of an .npz file or "
                        f"image folder (str or pathlib.Path), got {type(name_or_path).__name__} {str(name_or_path)[:60]!r}")
    key = str(name_or_path).lower() if isinstance(name_or_path, str) else None
    if key == "shapes":
        from geohead.data.shapes import make_shapes

        count = n if n is not None else (SHAPES_TRAIN_N if train else SHAPES_TEST_N)
        split = "train" if train else "test"
        return make_shapes(count, img_size=img_size or 32, seed=shapes_seed(seed, train), name=f"shapes-{split}", **kw)
    if kw:
        raise ValueError(f"extra keyword arguments {sorted(kw)} are only understood by the 'shapes' dataset")
    if key in ("cifar10", "cifar100"):
        data = _load_cifar(key, root, train, download)
    else:
        error = source_error(name_or_path)
        if error is not None:
            raise error
        path = Path(name_or_path).expanduser()
        data = _load_folder(path, img_size) if path.is_dir() else _load_npz(path)
    if n is not None and n < len(data):
        g = torch.Generator().manual_seed(int(seed))
        idx = torch.randperm(len(data), generator=g)[: int(n)].sort().values
        data = data.subset(idx)
    if img_size is not None and data.img_size != (img_size, img_size):
        problem = size_problem(len(data), img_size, f"the image count of {str(name_or_path)!r}", "img_size")
        if problem:  # resized, they would be allocated at once
            raise ValueError(f"{problem}; or give a smaller img_size")
        data = _resized(data, int(img_size))
    return data


def source_error(name_or_path: str | os.PathLike) -> Exception | None:
    """The error :func:`load_dataset` raises for a source that names no dataset, found without
    reading it (None when it names one): ``FileNotFoundError`` for a missing path, ``ValueError``
    for an unknown name or a file that is neither an .npz nor a folder. A built-in name passes
    (CIFAR's files are checked when loaded)."""
    if isinstance(name_or_path, str) and name_or_path.lower() in DATASET_NAMES:
        return None
    path = Path(name_or_path).expanduser()
    if path.is_dir() or (path.is_file() and path.suffix.lower() == ".npz"):
        return None
    if path.exists():
        return ValueError(f"cannot read {str(path)!r}: expected {NPZ_LAYOUT}, or a folder of images with one "
                          "subfolder per class")
    if isinstance(name_or_path, os.PathLike) or any(c in str(name_or_path) for c in "/\\."):
        return FileNotFoundError(f"dataset path {str(path)!r} does not exist; pass an existing .npz file or image "
                                 f"folder, or one of the built-in names {list(DATASET_NAMES)}")
    close = difflib.get_close_matches(str(name_or_path).lower(), DATASET_NAMES, n=2, cutoff=0.5)
    hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
    return ValueError(f"unknown dataset {str(name_or_path)!r}{hint}; valid names are {list(DATASET_NAMES)}, or "
                      "pass a path to an .npz file or to an image folder (one subfolder per class)")


def size_problem(n: Any, img_size: Any, n_name: str = "n", size_name: str = "img_size") -> str | None:
    """Why ``n`` images at ``img_size`` cannot be asked for (None when they can): each a positive
    integer (or None), ``n`` <= :data:`MAX_IMAGES`, ``img_size`` <= :data:`MAX_IMG_SIZE` and their
    uint8 pixels <= :data:`MAX_PIXEL_BYTES`; the sentence names the bound and the fix."""
    for name, value, top in ((n_name, n, MAX_IMAGES), (size_name, img_size, MAX_IMG_SIZE)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            return f"{name} must be a positive integer, got {value!r}"
        if value > top:
            return f"{name}={value} is above the bound of {top:,}; give at most {top:,}"
    if n is not None and img_size is not None and int(n) * 3 * int(img_size) ** 2 > MAX_PIXEL_BYTES:
        most = MAX_PIXEL_BYTES // (3 * int(img_size) ** 2)
        return (f"{n_name}={n} images of {img_size}x{img_size} pixels are above the bound of {MAX_PIXEL_BYTES >> 30} GiB "
                f"of pixels; give at most {most:,} images at this size")
    return None


# ---------------------------------------------------------------------------------------------


def _from_nhwc(images: np.ndarray) -> Tensor:
    """uint8 (N, H, W, C) or (N, H, W) numpy -> uint8 (N, 3, H, W) tensor (gray repeated)."""
    x = torch.from_numpy(np.ascontiguousarray(images))
    if x.ndim == 3:
        x = x.unsqueeze(-1)
    if x.shape[-1] == 1:
        x = x.expand(*x.shape[:-1], 3)
    return x.permute(0, 3, 1, 2).contiguous()


def _resized(data: ImageData, size: int) -> ImageData:
    """Bilinear antialiased resize of all images to size × size (uint8 in, uint8 out)."""
    out = torch.empty(len(data), 3, size, size, dtype=torch.uint8)
    for i in range(0, len(data), 2048):
        x = data.images[i : i + 2048].float()
        y = F.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
        out[i : i + 2048] = y.round_().clamp_(0, 255).to(torch.uint8)
    return ImageData(
        images=out, labels=data.labels, class_names=data.class_names, factors=data.factors,
        factor_kinds=data.factor_kinds, factor_periods=data.factor_periods, name=data.name,
    )


def _load_cifar(name: str, root: str | os.PathLike | None, train: bool, download: bool) -> ImageData:
    from torchvision import datasets

    cls = datasets.CIFAR10 if name == "cifar10" else datasets.CIFAR100
    base = Path(root).expanduser() if root is not None else default_root()
    try:
        ds = cls(str(base), train=train, download=download)
    except RuntimeError as e:  # torchvision: "Dataset not found or corrupted."
        raise FileNotFoundError(
            f"{name} not found under {str(base)!r} ({e}). Point at a folder holding torchvision's '{cls.base_folder}' "
            f"(--data-root DIR of geohead search and diagnose, data.root in a recipe, root= in Python; default "
            f"$GEOHEAD_DATA or ~/.cache/geohead/data), let torchvision download it there (needs internet: geohead search "
            f"--download, data.download = true in a recipe, download=True in Python), or give an .npz copy instead of "
            f"{name} (--data path/to/{name}.npz) with {NPZ_LAYOUT}."
        ) from e
    mean, std = CIFAR_STATS[name]
    return ImageData(
        images=_from_nhwc(ds.data),
        labels=torch.as_tensor(ds.targets, dtype=torch.int64),
        class_names=list(ds.classes),
        mean=mean,
        std=std,
        name=f"{name}-{'train' if train else 'test'}",
    )


#: The most classes an .npz may have (labels are indices 0..C-1; a huge label is a malformed file).
MAX_CLASSES = 100_000


def _num_classes(path: Path, labels: np.ndarray) -> int:
    """1 + the largest label; labels must be class indices 0..C-1 with C <= :data:`MAX_CLASSES`."""
    if labels.size and labels.min() < 0:
        raise ValueError(f"{str(path)!r}: 'labels' must be >= 0, found {int(labels.min())}")
    num = int(labels.max()) + 1 if labels.size else 0
    if num > MAX_CLASSES:
        raise ValueError(
            f"{str(path)!r}: 'labels' holds the value {num - 1}, but labels are class indices 0..C-1 with C at most "
            f"{MAX_CLASSES:,}; renumber them with np.unique(labels, return_inverse=True)[1]"
        )
    return num


def _check_npz_sizes(path: Path) -> None:
    """Each of an .npz's layout arrays at most :data:`MAX_PIXEL_BYTES`, read from its .npy header
    before numpy allocates and decompresses it (a few compressed bytes can declare terabytes)."""
    from numpy.lib import format as npy

    try:
        with zipfile.ZipFile(path) as zf:
            headers = {}
            for key in ("images", "labels", "classes"):
                if f"{key}.npy" not in zf.namelist():  # _load_npz names what is missing
                    continue
                with zf.open(f"{key}.npy") as fh:
                    version = npy.read_magic(fh)
                    read = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
                    headers[key] = read(fh)
    except (ValueError, OSError, zipfile.BadZipFile) as e:
        raise ValueError(f"{str(path)!r} is not a readable .npz file ({type(e).__name__}: {e})") from None
    for key, (shape, _, dtype) in headers.items():
        size = math.prod(shape) * dtype.itemsize
        if size > MAX_PIXEL_BYTES:
            raise ValueError(f"{str(path)!r}: '{key}' has shape {shape} ({size / 2**30:,.1f} GiB of {dtype}), above "
                             f"the bound of {MAX_PIXEL_BYTES >> 30} GiB; save fewer or smaller images")


def _load_npz(path: Path) -> ImageData:
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{str(path)!r} is not a readable .npz file (not a zip archive); expected {NPZ_LAYOUT}")
    _check_npz_sizes(path)
    try:
        with np.load(path, allow_pickle=False) as z:  # only the arrays of the layout, never the rest
            arrays, keys = {k: z[k] for k in ("images", "labels", "classes") if k in z.files}, z.files
    except ValueError as e:
        raise ValueError(
            f"{str(path)!r} holds object (pickled) arrays, which geohead does not load ({e}); "
            f"save {NPZ_LAYOUT} with plain dtypes"
        ) from e
    except Exception as e:  # zipfile.BadZipFile, OSError
        raise ValueError(f"{str(path)!r} is not a readable .npz file ({type(e).__name__}: {e})") from e
    missing = [k for k in ("images", "labels") if k not in arrays]
    if missing:
        raise ValueError(
            f"{str(path)!r} lacks the key(s) {missing} (it has {sorted(keys)}); expected {NPZ_LAYOUT}"
        )
    images, labels = arrays["images"], arrays["labels"]
    if images.dtype != np.uint8:
        raise ValueError(
            f"{str(path)!r}: 'images' must be uint8 (0..255), got {images.dtype}; convert float images "
            "in [0, 1] with (x * 255).round().astype(np.uint8)"
        )
    if images.ndim == 4 and images.shape[-1] not in (1, 3) and images.shape[1] in (1, 3):
        raise ValueError(
            f"{str(path)!r}: 'images' has shape {images.shape}, which looks channels-first; the layout is "
            "(N, H, W, C): save np.transpose(images, (0, 2, 3, 1))"
        )
    if not (images.ndim == 3 or (images.ndim == 4 and images.shape[-1] in (1, 3))):
        raise ValueError(f"{str(path)!r}: 'images' must have shape (N, H, W, 3) or (N, H, W), got {images.shape}")
    if images.shape[0] < 1 or not 1 <= images.shape[1] * images.shape[2] <= MAX_FILE_PIXELS or min(images.shape[1:3]) < 1:
        raise ValueError(f"{str(path)!r}: 'images' has shape {images.shape}: it needs at least one image of 1 to "
                         f"{MAX_FILE_PIXELS:,} pixels; save the images themselves")
    if labels.ndim != 1 or labels.shape[0] != images.shape[0]:
        raise ValueError(
            f"{str(path)!r}: 'labels' must have shape ({images.shape[0]},) to match the images, got {labels.shape}"
        )
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(
            f"{str(path)!r}: 'labels' must be integers, got {labels.dtype}; save labels.astype(np.int64)"
        )
    num = _num_classes(path, labels)
    if "classes" in arrays:
        if arrays["classes"].size > MAX_CLASSES:  # before tolist: a 4 GiB array would be billions of objects
            raise ValueError(f"{str(path)!r}: 'classes' holds {arrays['classes'].size:,} names, above the bound of "
                             f"{MAX_CLASSES:,} classes; save one name per class")
        classes = [str(c) for c in arrays["classes"].reshape(-1).tolist()]
        if len(classes) < num:
            raise ValueError(
                f"{str(path)!r}: 'classes' names {len(classes)} classes but labels go up to {num - 1}"
            )
    else:
        classes = [str(i) for i in range(num)]
    return ImageData(
        images=_from_nhwc(images),
        labels=torch.from_numpy(labels.astype(np.int64)),
        class_names=classes,
        name=str(path),
    )


def _load_folder(path: Path, img_size: int | None) -> ImageData:
    subdirs = sorted(d for d in path.iterdir() if d.is_dir() and not d.name.startswith("."))
    top_images = [f for f in path.iterdir() if f.is_file() and f.suffix.lower() in IMAGE_EXTENSIONS]
    if not subdirs:
        hint = f"; it holds {len(top_images)} images directly: move them into class subfolders" if top_images else ""
        raise ValueError(
            f"image folder {str(path)!r} has no class subfolders{hint} (expected {path}/<class>/<image>"
            f"{{{','.join(IMAGE_EXTENSIONS)}}})"
        )
    files: list[tuple[Path, int]] = []
    empty = []
    for c, d in enumerate(subdirs):
        found = _list_images(path, d, MAX_IMAGES - len(files))
        if not found:
            empty.append(d.name)
        files.extend((f, c) for f in found)
    if not files:
        raise ValueError(
            f"image folder {str(path)!r} contains no images (looked for {', '.join(IMAGE_EXTENSIONS)} in "
            f"its subfolders {[d.name for d in subdirs][:10]})"
        )
    if empty:
        raise ValueError(
            f"class folder(s) {empty} under {str(path)!r} contain no images; remove them or add images "
            f"({', '.join(IMAGE_EXTENSIONS)})"
        )
    problem = size_problem(len(files), img_size, f"the image count of {str(path)!r}", "img_size")
    if problem:  # before any image is decoded
        raise ValueError(problem)
    arrays = [_read_image(path, f, img_size) for f, _ in files]
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        raise ValueError(
            f"images under {str(path)!r} have different sizes {sorted(shapes)[:4]}; pass img_size=... to resize them"
        )
    return ImageData(
        images=_from_nhwc(np.stack(arrays)),
        labels=torch.tensor([c for _, c in files], dtype=torch.int64),
        class_names=[d.name for d in subdirs],
        name=str(path),
    )


def _list_images(folder: Path, d: Path, room: int) -> list[Path]:
    """The image files under class folder ``d`` of ``folder``, sorted; ``d`` linking out of
    ``folder`` (or to it) is refused before it is walked, folder links below it are not followed,
    and listing stops with a ValueError past ``room`` images (what :data:`MAX_IMAGES` leaves) or
    past ten entries an image of the bound, one entry at a time."""
    real, top = d.resolve(), folder.resolve()
    if top not in real.parents:
        raise ValueError(f"class folder {str(d)!r} is a symbolic link to {str(real)!r}, not a folder inside the image "
                         f"folder {str(folder)!r}; copy the images into it instead")
    found: list[Path] = []
    seen, stack = 0, [str(d)]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for e in entries:
                seen += 1
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                elif os.path.splitext(e.name)[1].lower() in IMAGE_EXTENSIONS and e.is_file():
                    found.append(Path(e.path))
                if len(found) > room or seen > 10 * MAX_IMAGES:
                    raise ValueError(f"image folder {str(folder)!r} holds more than {MAX_IMAGES:,} images (or "
                                     f"{10 * MAX_IMAGES:,} files), the most geohead reads; use a subset of it or an .npz")
    return sorted(found)


def _read_image(folder: Path, f: Path, img_size: int | None) -> np.ndarray:
    """One image of an image folder as uint8 (H, W, 3), resized to ``img_size``. Refused with a
    ValueError naming the file: a link out of the folder, more than :data:`MAX_FILE_PIXELS`
    pixels (checked from the header, before decoding), an empty image, a file PIL cannot decode."""
    from PIL import Image

    real = f.resolve()  # the same rule as geohead.io.path_in (a sibling module, so not imported)
    if real != folder.resolve() and folder.resolve() not in real.parents:
        raise ValueError(f"image {str(f)!r} is a symbolic link to {str(real)!r}, outside the image folder {str(folder)!r}; "
                         "geohead reads only inside the folder it was given: copy the image there")
    try:
        with warnings.catch_warnings(), Image.open(f, formats=IMAGE_FORMATS) as im:  # a size PIL only warns about is refused below
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            w, h = im.size
            if w * h > MAX_FILE_PIXELS or w < 1 or h < 1:
                raise ValueError(f"image {str(f)!r} is {w}x{h} pixels, outside 1 to {MAX_FILE_PIXELS:,} pixels; "
                                 "resize it or remove it from the folder")
            im = im.convert("RGB")
            if img_size is not None and im.size != (img_size, img_size):
                im = im.resize((img_size, img_size), Image.Resampling.BILINEAR, reducing_gap=None)
            return np.asarray(im, dtype=np.uint8)
    except ValueError:
        raise
    except Image.DecompressionBombError:
        raise ValueError(f"image {str(f)!r} has more than {MAX_FILE_PIXELS:,} pixels; resize it or remove it from the "
                         "folder") from None
    except Exception as exc:  # noqa: BLE001 - PIL raises many types for a corrupt or mislabelled file
        raise ValueError(f"image {str(f)!r} cannot be decoded ({type(exc).__name__}: {str(exc)[:100]}); "
                         "replace it or remove it from the folder") from None
