"""The published numbers recomputed from the authors' own result arrays, with geohead's formulas.

The released repository (github.com/farischaudhry/projection-head-geometry) ships the arrays its
tables were computed from: the rotation orbits of Table 1 (ResNet-18) and Table 5 (ViT-Tiny),
the depth-ablation orbits and probe accuracies, and the per-epoch Hessian-tracker values of
Fig. 3. This script reads them (no training, seconds) and prints, for each published number:

* paper: the number as published (logs / notebook output);
* paper's formula: geohead's implementation of the released formula applied to the released
  arrays (it must, and does, give the published number: a check of geohead's "paper_l2"
  compression, D_intra, D_inter and the epoch counts);
* corrected: geohead's corrected measurement on the same arrays where the arrays allow it
  (relative compression; what the tracker's λ_min values are), else "—".

The released ``orbit_visualization.npy`` files are pickled dicts; they are read with an
unpickler that only admits numpy's array reconstruction (no other code can run). The .npz
files are read with ``allow_pickle=False``.

Usage (a checkout, or the bare git directory of a clone):

    python benchmarks/paper/published.py --paper-repo path/to/projection-head-geometry
"""
from __future__ import annotations

import argparse
import io
import pickle
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

R18 = "results/cifar10/resnet18"
PUBLISHED_T1 = {"compression": 21.85, "d_intra": 4.77, "d_inter": 3.89, "ratio_z": 2.04, "ratio_h": 2.50}
PUBLISHED_T5 = {"compression": 4015.0}
PUBLISHED_DEPTH = {1: (47.5, 47.4, 49.0), 2: (52.8, 39.7, 57.0), 3: (52.4, 35.6, 79.0)}
PUBLISHED_FIG3 = {"collapsed_swish": 72, "collapsed_relu": 1, "normal_swish": None}


class Repo:
    """Files of the released repository: a work tree, or a (bare) git directory read at HEAD."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tree = (path / "results").is_dir()
        if not self.tree and not (path / "HEAD").is_file() and not (path / ".git").exists():
            raise SystemExit(f"{path} is neither a checkout of projection-head-geometry nor its git directory")

    def read(self, rel: str) -> bytes:
        if self.tree:
            return (self.path / rel).read_bytes()
        return subprocess.run(["git", f"--git-dir={self.path}", "show", f"HEAD:{rel}"], check=True,
                              capture_output=True).stdout


class _ArraysOnly(pickle.Unpickler):
    """Unpickles dicts/lists of numpy arrays and scalars only."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
               ("numpy._core.multiarray", "scalar")}

    def find_class(self, module: str, name: str):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a result file")


def load_object_npy(data: bytes) -> dict:
    f = io.BytesIO(data)
    version = np.lib.format.read_magic(f)
    (np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0)(f)
    obj = _ArraysOnly(f).load()
    return obj.flat[0] if isinstance(obj, np.ndarray) else obj


def load_npz(data: bytes) -> dict:
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def orbit_numbers(zs: np.ndarray, hs: np.ndarray, ids: np.ndarray, labels: np.ndarray) -> dict:
    """The released orbit metrics (paper's formula) and geohead's relative compression on the arrays."""
    from geohead.geometry.orbits import compression, space_geometry, total_spread

    n = len(np.unique(ids))
    order = np.argsort(ids, kind="stable")
    z = torch.from_numpy(zs[order]).reshape(n, -1, zs.shape[1])
    h = torch.from_numpy(hs[order]).reshape(n, -1, hs.shape[1])
    lab = torch.from_numpy(labels[order].reshape(n, -1)[:, 0])
    pz, ph = C.paper_orbit_metrics(z, lab), C.paper_orbit_metrics(h, lab)
    comp = compression(space_geometry(z, lab), space_geometry(h, lab))
    return {"paper_z": pz, "paper_h": ph, "compression": comp, "total_z": total_spread(z), "total_h": total_spread(h),
            "d_intra_norm": (pz["d_intra"] / pz["d_all"]) / (ph["d_intra"] / ph["d_all"]),
            "d_inter_norm": (pz["d_inter"] / pz["d_all"]) / (ph["d_inter"] / ph["d_all"])}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--paper-repo", type=Path, required=True,
                   help="checkout (or git directory) of github.com/farischaudhry/projection-head-geometry")
    p.add_argument("--out", type=Path, default=C.ROOT / "runs" / "paper" / "published")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    args.scale, args.seed = "published", 0
    t0 = time.perf_counter()
    repo = Repo(args.paper_repo)
    results: dict = {}

    t1 = C.Table("Table 1 / Table 5 from the released orbit arrays (5 classes × 3 images × 12 rotations)")
    for arch, pub in (("resnet18", PUBLISHED_T1), ("vit_tiny", PUBLISHED_T5)):
        d = load_object_npy(repo.read(f"results/cifar10/{arch}/orbit_visualization.npy"))
        r = orbit_numbers(d["orbits_z"], d["orbits_h"], d["orbit_ids"], d["orbit_labels"])
        results[arch] = r
        pz, ph, comp = r["paper_z"], r["paper_h"], r["compression"]
        t1.add(f"{arch}: total spread of all views, backbone → head", None,
               f"{r['total_z']:.3g} → {r['total_h']:.3g} (÷{r['total_z'] / r['total_h']:.3g})", None,
               "the head space shrinks as a whole")
        t1.add(f"{arch}: orbit compression (×)", pub["compression"], comp["paper_l2"], comp["relative"],
               "corrected: relative (orbit/total spread); arrays hold head(normalize(z))")
        if "d_intra" in pub:
            t1.add(f"{arch}: D_intra shrink (×)", pub["d_intra"], pz["d_intra"] / ph["d_intra"], r["d_intra_norm"],
                   "corrected: relative to the mean pairwise distance")
            t1.add(f"{arch}: D_inter shrink (×)", pub["d_inter"], pz["d_inter"] / ph["d_inter"], r["d_inter_norm"])
            t1.add(f"{arch}: class/orbit ratio z → h", f"{pub['ratio_z']} → {pub['ratio_h']}",
                   f"{pz['ratio']:.3g} → {ph['ratio']:.3g}", None)
        t1.add(f"{arch}: paper_var (per-dimension variance) on the same arrays", None, comp["paper_var"], None,
               f"×{d['orbits_h'].shape[1] / d['orbits_z'].shape[1]:.0f} = k/d over paper_l2")

    t2 = C.Table("Depth ablation from the released arrays (geometric_ablation_depth_{1,2,3}.npz)")
    for depth, (pb, ph_, pc) in PUBLISHED_DEPTH.items():
        d = load_npz(repo.read(f"{R18}/head_depth_ablations/geometric_ablation_depth_{depth}.npz"))
        r = orbit_numbers(d["orbits_z"], d["orbits_h"], d["orbit_ids"], d["orbit_labels"])
        results[f"depth{depth}"] = {**r, "acc_z": float(d["acc_z_linear"]), "acc_h": float(d["acc_h_linear"])}
        t2.add(f"depth {depth}: backbone / head rotation accuracy (%)", f"{pb} / {ph_}",
               f"{100 * float(d['acc_z_linear']):.1f} / {100 * float(d['acc_h_linear']):.1f}", None, "stored in the arrays")
        t2.add(f"depth {depth}: orbit compression (×)", pc, r["compression"]["paper_l2"], r["compression"]["relative"])

    t3 = C.Table("Fig. 3 from the released Hessian-tracker arrays (100 epochs each)")
    for run, pub in PUBLISHED_FIG3.items():
        d = load_npz(repo.read(f"{R18}/hessian_tracker/raw_data_{run}.npz"))
        lam, var = d["min_eigenvalues"], d["variances"]
        neg, zero = int((lam < 0).sum()), int((lam == 0).sum())
        results[run] = {"negative": neg, "exactly_zero": zero, "median_abs": float(np.median(np.abs(lam))),
                        "max_abs": float(np.abs(lam).max()), "std_z_first": float(var[0]), "std_z_last": float(var[-1]),
                        "std_z_range": float(var.max() - var.min())}
        t3.add(f"{run}: epochs with λ_min < 0", None if pub is None else f"{pub}/100", f"{neg}/{len(lam)}",
               f"{zero}/{len(lam)} epochs exactly 0.0", "λ_min = 0.0 exactly: the Hessian is zero (no gradient)")
        t3.add(f"{run}: median |λ_min| (max)", None, f"{np.median(np.abs(lam)):.2g} ({np.abs(lam).max():.2g})", None,
               "float32 shifted power iteration, 5 batches/epoch")
        t3.add(f"{run}: std of normalised z, epoch 1 → 100 (range)", None,
               f"{var[0]:.5f} → {var[-1]:.5f} ({var.max() - var.min():.1e})", None)
    C.report(args, [t1, t2, t3], results, t0)


if __name__ == "__main__":
    main()
