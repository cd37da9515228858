"""Shared pieces of the paper-reproduction scripts in ``benchmarks/paper/``.

Every script reproduces one claim of Chaudhry (2026) and prints a table with three columns:

* **paper**: the published number (read from the released code's logs and result arrays,
  github.com/farischaudhry/projection-head-geometry, commit 117231d);
* **paper's formula**: geohead computing the same quantity the way the released code does
  (its formula and, where it matters, its pipeline), on our model;
* **corrected**: geohead's measurement with the flaw listed in docs/theory.md, "Measurement pitfalls", fixed.

Scales (``--scale``):

* ``smoke``: seconds; checks that the script runs end to end (tests/test_paper_scripts.py).
* ``cpu`` (default): ../shared/data CIFAR-10 (10,000 training images, the 10,000 test images)
  with the cuts each script's docstring lists, sized for a 2-core CPU (≤ 15 minutes per script).
* ``paper``: the published settings (torchvision CIFAR-10, 50,000 images, ResNet-18 with the
  CIFAR stem, the paper's epochs); a GPU job, not run on the CPU machine.

Runs are cached under ``runs/paper/<scale>/``: a second script that needs the same pretrained
model (Table 1 and the guillotine probes share one) resumes the finished run instantly.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"
SCALES = ("smoke", "cpu", "paper")

#: The released code's SimCLR views (experiments.py, run_guillotine_experiment):
#: RandomResizedCrop(32) (area 0.08-1), flip, RandomRotation(45),
#: ColorJitter(0.4, 0.4, 0.4, 0.1) with p = 0.8, no grayscale, no blur.
PAPER_SIMCLR_VIEWS = {"crop_scale": [0.08, 1.0], "rotation": 45.0, "jitter_p": 0.8, "brightness": 0.4,
                      "contrast": 0.4, "saturation": 0.4, "hue": 0.1, "gray_p": 0.0}
#: The released code's SimSiam views (hessian_tracker.py): RandomResizedCrop(32, scale 0.2-1) and flip only.
PAPER_SIMSIAM_VIEWS = {"crop_scale": [0.2, 1.0], "jitter_p": 0.0, "gray_p": 0.0}
#: CIFAR-10 classes of the orbit study (np.linspace(0, 9, 5, dtype=int)): airplane, bird, deer, frog, truck.
ORBIT_CLASSES = (0, 2, 4, 6, 9)


# ---------------------------------------------------------------------- command line
def parser(doc: str, name: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="See the module docstring for what each scale runs.")
    p.add_argument("--scale", choices=SCALES, default="cpu",
                   help="smoke: seconds; cpu (default): ../shared/data CIFAR-10 on 2 cores; paper: published settings (GPU)")
    p.add_argument("--out", type=Path, default=None, help=f"output folder (default runs/paper/<scale>/{name})")
    p.add_argument("--runs", type=Path, default=None, help="cache of training runs (default runs/paper/<scale>/runs)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--overwrite", action="store_true", help="retrain cached runs instead of reusing them")
    p.add_argument("--data-dir", type=Path, default=SHARED, help="folder with cifar10_train_10k.npz / cifar10_test.npz")
    p.set_defaults(name=name)
    return p


def finish_args(args: argparse.Namespace) -> argparse.Namespace:
    base = ROOT / "runs" / "paper" / args.scale
    args.out = args.out or base / args.name
    args.runs = args.runs or base / "runs"
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    return args


# ---------------------------------------------------------------------- data
def train_source(args: argparse.Namespace) -> dict[str, Any]:
    """DataConfig fields of the pretraining set at this scale."""
    if args.scale == "paper":
        return {"name": "cifar10", "download": True}
    n = 512 if args.scale == "smoke" else None
    return {"name": str(args.data_dir / "cifar10_train_10k.npz"), "n_train": n}


def load_split(args: argparse.Namespace, train: bool, n: int | None = None):
    """CIFAR-10 as geohead ImageData: ../shared/data at smoke/cpu scale, torchvision at paper scale."""
    from geohead.data import load_dataset

    if args.scale == "paper":
        return load_dataset("cifar10", train=train, download=True, n=n, seed=args.seed)
    path = args.data_dir / ("cifar10_train_10k.npz" if train else "cifar10_test.npz")
    if not path.is_file():
        raise SystemExit(f"{path} not found: pass --data-dir (the folder of ../shared/data/README.md)")
    return load_dataset(str(path), n=n, seed=args.seed)


def per_class(data, classes: Sequence[int], k: int, seed: int) -> Tensor:
    """Indices of ``k`` random images of each class (seeded), class by class."""
    g = torch.Generator().manual_seed(seed)
    idx = []
    for c in classes:
        pool = torch.nonzero(data.labels == c).flatten()
        idx.append(pool[torch.randperm(len(pool), generator=g)[:k]])
    return torch.cat(idx)


def to_unit(images: Tensor) -> Tensor:
    """uint8 (N, 3, H, W) → float32 in [0, 1]."""
    return images.float() / 255.0


def rotate_zero_fill(images: Tensor, degrees: float) -> Tensor:
    """torchvision's ``rotate(img, degrees)`` on a tensor, as the released code calls it:
    nearest-neighbour resampling (torchvision's default), corners filled with 0 (black)."""
    import torchvision.transforms.functional as TF

    return TF.rotate(images, float(degrees))


def rotate_reflect(images: Tensor, degrees: float) -> Tensor:
    """geohead's orbit rotation (bilinear, reflection padding: no angle-dependent black corners)."""
    from geohead.data.orbits import rotate

    return rotate(images, float(degrees))


def rot90_split(data, seed: int) -> tuple[Tensor, Tensor]:
    """The released code's rotation-prediction set: every image turned by k·90°, k uniform in
    {0, 1, 2, 3} with a fixed seed; returns (uint8 images, k)."""
    g = torch.Generator().manual_seed(seed)
    k = torch.randint(0, 4, (len(data),), generator=g)
    out = data.images.clone()
    for r in range(1, 4):
        m = k == r
        out[m] = torch.rot90(data.images[m], r, dims=(2, 3))
    return out, k


# ---------------------------------------------------------------------- models
def simclr_config(args: argparse.Namespace, tag: str, head: dict[str, Any], *, epochs: float, batch_size: int = 256,
                  lr: float = 1e-3, backbone: str | None = None, width_cut: int | None = None,
                  data: dict[str, Any] | None = None, view_args: dict[str, Any] | None = None):
    """The released code's SimCLR pretraining as a geohead TrainConfig.

    Released settings (experiments.py / head_depth_ablations.py): NT-Xent with τ = 0.1, Adam at
    lr 1e-3 (constant, no weight decay), batch 256 (Table 1) or 512 (depth ablation), 50 epochs.
    geohead's NT-Xent is SimCLR's symmetric loss over 2B − 1 candidates; the released code uses
    the one-directional cross-view form (CE of z1·z2ᵀ/τ), a difference in the constant only.
    ``width_cut`` narrows hidden/out widths (smoke scale only); ``data`` replaces the CIFAR-10
    DataConfig fields (e.g. the built-in shapes), ``view_args`` the released views.
    """
    from geohead.training.config import config_from_dict

    spec = dict(head)
    if width_cut is not None:
        spec["hidden_dim"] = min(spec.get("hidden_dim", 2048), width_cut)
        spec["out_dim"] = min(spec.get("out_dim", 2048), width_cut)
    d = {
        "objective": "simclr",
        "objective_args": {"temperature": 0.1},
        "seed": args.seed,
        "data": {**(data or train_source(args)), "views": "simclr", "view_args": view_args or PAPER_SIMCLR_VIEWS},
        "backbone": {"name": backbone or ("resnet18_cifar" if args.scale == "paper" else "resnet18_w16")},
        "head": {"preset": "simclr", "spec": spec},
        "optim": {"name": "adamw", "lr": lr * 256 / batch_size, "weight_decay": 0.0, "batch_size": batch_size,
                  "epochs": epochs, "warmup_epochs": 0, "final_lr_ratio": 1.0},
        "track": {"progress": False, "monitor_every": 0, "log_every": 10},
        "probe": {"enabled": False},
        "out": str(args.runs / tag),
    }
    if args.scale == "smoke":
        d["optim"]["batch_size"] = 128
        d["optim"]["lr"] = lr * 256 / 128
    return config_from_dict(d)


def train_or_load(cfg, overwrite: bool = False):
    """Train ``cfg`` (or resume its finished run) and return the model in eval mode (CPU), the
    run folder and the pretraining data's (mean, std)."""
    from geohead.training.checkpoint import load_checkpoint
    from geohead.training.model import build_models
    from geohead.training.loop import train

    t = time.perf_counter()
    train(cfg, overwrite=overwrite)
    dt = time.perf_counter() - t
    ck = load_checkpoint(cfg.out_dir)  # the run folder's checkpoint
    model, *_ = build_models(cfg)
    model.load_state_dict(ck.section("model"))
    model.eval()
    data = ck.meta["data"]
    return model, cfg.out_dir, (tuple(data["mean"]), tuple(data["std"])), dt


def encoder(backbone: nn.Module, mean: Sequence[float], std: Sequence[float]):
    """images in [0, 1] (N, 3, H, W) → backbone features (N, d), no grad (the backbone's mode as left)."""
    from geohead.features import image_encoder

    return image_encoder(backbone, mean, std)


@torch.no_grad()
def features(model: nn.Module, images_u8: Tensor, mean, std, batch: int = 500) -> tuple[Tensor, Tensor]:
    """(backbone, head) features of uint8 images, eval mode, on the GPU when there is one (results on the CPU)."""
    import copy

    from geohead.features import extract

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    m = model if dev == "cpu" else copy.deepcopy(model).to(dev)
    return extract(m.backbone, m.head, images_u8, mean, std, dev, batch_size=batch)


# ---------------------------------------------------------------------- the released code's measurements
def paper_probe(x_tr: Tensor, y_tr: Tensor, x_te: Tensor, y_te: Tensor, hidden: int | None, *, epochs: int = 5,
                batch: int = 256, lr: float = 1e-3, seed: int = 0) -> float:
    """The released code's rotation probe: nn.Linear (``hidden=None``) or Linear-ReLU-Linear on the
    raw (unstandardised) frozen features, Adam lr 1e-3, batch 256, 5 epochs, shuffled; test accuracy."""
    g = torch.Generator().manual_seed(seed)
    n_cls = int(max(y_tr.max(), y_te.max())) + 1
    torch.manual_seed(seed)
    d = x_tr.shape[1]
    probe = nn.Linear(d, n_cls) if hidden is None else nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, n_cls))
    opt = torch.optim.Adam(probe.parameters(), lr=lr)
    for _ in range(epochs):
        order = torch.randperm(len(x_tr), generator=g)
        for i in range(0, len(order), batch):
            j = order[i:i + batch]
            loss = F.cross_entropy(probe(x_tr[j]), y_tr[j])
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        return float((probe(x_te).argmax(1) == y_te).double().mean())


def paper_orbit_metrics(points: Tensor, labels: Tensor) -> dict[str, float]:
    """plot_results.py's ``_calculate_geometric_metrics`` on (N, P, D) orbits (N orbits of P views):
    spread = mean over orbits of the mean squared distance to the orbit centroid; D_intra = mean
    over orbits of the mean pairwise distance inside an orbit; D_inter = mean pairwise distance
    between class centroids (of all the class's points); ratio = D_inter / D_intra."""
    from geohead.geometry.orbits import orbit_spread

    x = points.to(torch.float64)
    n, P, D = x.shape
    iu = torch.triu_indices(P, P, 1)
    intra = torch.stack([torch.cdist(o, o)[iu[0], iu[1]].mean() for o in x]).mean()
    cls = labels.unique()
    cents = torch.stack([x[labels == c].reshape(-1, D).mean(0) for c in cls])
    ic = torch.triu_indices(len(cls), len(cls), 1)
    inter = torch.cdist(cents, cents)[ic[0], ic[1]].mean()
    all_pts = x.reshape(-1, D)
    ia = torch.triu_indices(n * P, n * P, 1)
    d_all = torch.cdist(all_pts, all_pts)[ia[0], ia[1]].mean()
    return {"spread": orbit_spread(x), "d_intra": float(intra), "d_inter": float(inter),
            "ratio": float(inter / intra), "d_all": float(d_all)}


def clamped_condition(x: Tensor) -> float:
    """The released tracker's "condition number": covariance of the L2-normalised rows, λ_max over
    λ_min clamped at 1e-7 (float32 eigvalsh, as released)."""
    z = F.normalize(x.float(), dim=1)
    zc = z - z.mean(0, keepdim=True)
    lam = torch.linalg.eigvalsh(zc.T @ zc / (z.shape[0] - 1))
    return float(lam[-1] / lam[0].clamp_min(1e-7))


# ---------------------------------------------------------------------- tables
@dataclass
class Table:
    """Rows of (quantity, paper, paper's formula, corrected, note); prints aligned text and markdown."""

    title: str
    rows: list[tuple[str, str, str, str, str]] = field(default_factory=list)

    def add(self, quantity: str, paper: Any, formula: Any, corrected: Any, note: str = "") -> None:
        self.rows.append((quantity, fmt(paper), fmt(formula), fmt(corrected), note))

    def text(self) -> str:
        head = ("quantity", "paper", "geohead, paper's formula", "geohead, corrected", "")
        widths = [max(len(r[i]) for r in [head, *self.rows]) for i in range(4)]
        lines = [self.title, "  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip(),
                 "  ".join("-" * w for w in widths)]
        for r in self.rows:
            lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)) + (f"  {r[4]}" if r[4] else ""))
        return "\n".join(lines)

    def markdown(self) -> str:
        lines = [f"**{self.title}**", "", "| quantity | paper | geohead, paper's formula | geohead, corrected | note |",
                 "|---|---|---|---|---|"]
        lines += [f"| {' | '.join(r)} |" for r in self.rows]
        return "\n".join(lines)


def fmt(x: Any) -> str:
    if x is None:
        return "—"
    if isinstance(x, str):
        return x
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf"
        a = abs(x)
        if a != 0 and (a < 1e-3 or a >= 1e5):
            return f"{x:.3g}"
        return f"{x:.3g}" if a < 1 else f"{x:.4g}"
    return str(x)


def report(args: argparse.Namespace, tables: list[Table], results: dict[str, Any], t0: float) -> None:
    """Print the tables, write results.json and tables.md into ``args.out``."""
    wall = time.perf_counter() - t0
    for t in tables:
        print()
        print(t.text())
    results = {"scale": args.scale, "seed": args.seed, "wall_s": round(wall, 1), **results}
    (args.out / "results.json").write_text(json.dumps(results, indent=2, default=_json) + "\n")
    (args.out / "tables.md").write_text("\n\n".join(t.markdown() for t in tables) + "\n")
    print(f"\nwall time {wall:.0f} s; wrote {args.out / 'results.json'}, {args.out / 'tables.md'}")


def _json(x: Any) -> Any:
    if isinstance(x, Tensor):
        return x.tolist()
    if isinstance(x, Path):
        return str(x)
    return str(x)


def figure(path: Path, fig) -> None:
    fig.savefig(path, dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    print(f"wrote {path}")


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
