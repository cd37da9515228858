"""The width artefact of the pretrained-model compression formula (pretrained.ipynb).

The released notebook measures orbit "collapse" of public checkpoints (DINO ViT-S/16 and
ResNet-50, VICReg and Barlow Twins ResNet-50) on CIFAR-10 test images: for each image an orbit
of 12 views (rotation 0-45°, hue −0.4…0.4, saturation 0…2, blur σ 0.1…3), then

    ratio = mean over images of  mean_dims var_orbit(z) / mean_dims var_orbit(h)

with z the backbone features (d wide) and h the head's outputs (k wide). A mean over
*dimensions* of per-dimension variances is the total orbit variance divided by the width, so
the ratio is (total variance ratio) × k/d: a head that is k/d times wider than its backbone
reports k/d times more "compression" without doing anything. For DINO ViT-S/16 the head's
output is 65,536 prototype logits and the backbone 384 features: k/d ≈ 171, so the published
1284× (rotation) is a 7.5× ratio of total variances (still scale-dependent: raw logits vs raw
features). Published numbers (pretrained.ipynb's saved output, seed 0): DINO ViT-S 1284 /
2499 / 2898 / 3728 (rotation / hue / saturation / blur), DINO ResNet-50 176 / 223 / 117 /
227, VICReg 1.43 / 2.15 / 1.13 / 0.85, Barlow Twins 2.63 / 2.52 / 2.49 / 1.42.

This script shows the factor on heads of *equal function and different width*: the Table 1
head h (orbit_compression.py's SimCLR model), the same head followed by an isometry Q
(e ↦ Q e, Q with orthonormal columns, width m·k: every distance, hence every geometric
property, is unchanged), and the identity "head" z ↦ Q z, which compresses nothing. Columns:
the notebook's formula (geohead re-implements it: per-image ratio of per-dimension variances,
averaged) and geohead's relative compression ((orbit/total spread) backbone over head: width-
and scale-invariant). For the published models (checkpoints not reachable offline) the
corrected column divides the published ratio by k/d, the exact width factor.

Scales: the model is the Table 1 run of orbit_compression.py (cpu: resnet18_w16, 30 epochs on
10,000 images; paper: ResNet-18 CIFAR, 50 epochs); orbits of 64 test images at 32 px (the
notebook: 64 images resized to 224 px; its blur σ are in 224-px pixels, here in 32-px pixels).

    flock /tmp/geohead-bench.lock python benchmarks/paper/width_artefact.py [--scale cpu]
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
from orbit_compression import table1_model  # noqa: E402

#: pretrained.ipynb, saved output (Summary Table, seed 0): rotation, hue, saturation, blur.
PUBLISHED = {
    "DINO ViT-S/16": {"d": 384, "k": 65536, "ratios": (1284.3635, 2498.6184, 2898.0669, 3727.7266)},
    "DINO ResNet-50": {"d": 2048, "k": 60000, "ratios": (176.1757, 223.0947, 116.9248, 227.1958)},
    "VICReg ResNet-50": {"d": 2048, "k": 8192, "ratios": (1.4256, 2.1492, 1.1331, 0.8514)},
    "Barlow Twins ResNet-50": {"d": 2048, "k": 8192, "ratios": (2.6268, 2.5214, 2.4919, 1.4193)},
}
FAMILIES = ("rotation", "hue", "saturation", "blur")


def sweep(family: str, steps: int = 12):
    from geohead.data import orbits as O

    if family == "rotation":
        return torch.linspace(0, 45, steps).tolist(), C.rotate_zero_fill
    if family == "hue":
        return torch.linspace(-0.4, 0.4, steps).tolist(), O.hue_shift
    if family == "saturation":
        return torch.linspace(0.0, 2.0, steps).tolist(), O.saturation
    return torch.linspace(0.1, 3.0, steps).tolist(), O.blur


def notebook_ratio(z: torch.Tensor, h: torch.Tensor) -> float:
    """pretrained.ipynb: mean over orbits of mean_dims var(z) / (mean_dims var(h) + 1e-12) (population var)."""
    vz = z.double().var(1, unbiased=False).mean(-1)
    vh = h.double().var(1, unbiased=False).mean(-1)
    return float((vz / (vh + 1e-12)).mean())


def isometry(k: int, width: int, seed: int) -> torch.Tensor:
    """(width, k) with orthonormal columns (QR of a seeded Gaussian)."""
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(width, k, generator=g, dtype=torch.float64))
    return q.float()


def orbit_embeddings(model, encode, imgs: torch.Tensor, n: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Per orbit family: the backbone features z (N, P, d) of the orbit of each of the ``n`` images
    and the head's outputs h (N, P, k)."""
    per_family = {}
    for fam in FAMILIES:
        params, fn = sweep(fam)
        z = torch.stack([encode(fn(imgs, p)) for p in params], 1)  # (N, P, d)
        with torch.no_grad():
            h = model.head(z.reshape(-1, z.shape[-1])).reshape(n, len(params), -1)
        per_family[fam] = (z, h)
    return per_family


def width_table(title: str, z: torch.Tensor, h: torch.Tensor, scale: str, seed: int) -> tuple[C.Table, dict]:
    """The table of heads of equal function and different width on the rotation orbits ``z``, ``h``:
    the trained head followed by isometries ×m, and the identity head z ↦ Qz up to DINO's k/d;
    with its curves (width, notebook ratio, relative compression) per kind of head."""
    from geohead.geometry.orbits import compression, space_geometry

    d, k = z.shape[-1], h.shape[-1]
    t = C.Table(title)
    curves = {"head": [], "identity": []}
    gz = space_geometry(z)
    base = None
    multiples = (1, 2, 4) if scale == "smoke" else (1, 2, 4, 8)
    for m in multiples:
        he = h if m == 1 else h @ isometry(k, m * k, seed + m).T
        r = notebook_ratio(z, he)
        rel = compression(gz, space_geometry(he))["relative"]
        base = base or r
        curves["head"].append((m * k, r, rel))
        t.add(f"trained head h, width {m * k}" + ("" if m == 1 else f" (h followed by an isometry ×{m})"), None, r, rel,
              f"notebook ratio / m = {r / m:.3g}")
    factor = 65536 / 384
    for width in (d, 16 * d, round(factor * d)):
        ze = z if width == d else z @ isometry(d, width, seed).T
        r = notebook_ratio(z, ze)
        rel = compression(gz, space_geometry(ze))["relative"]
        curves["identity"].append((width, r, rel))
        t.add(f"identity head z ↦ Qz, width {width} ({width / d:.4g}·d)", None, r, rel, "a head that does nothing")
    return t, curves


def family_table(per_family: dict, d: int, k: int) -> tuple[C.Table, dict]:
    """Our Table 1 head by orbit family: the notebook's ratio, that ratio with the width factor
    k/d removed, and the relative compression."""
    from geohead.geometry.orbits import compression, space_geometry

    fam_t = C.Table(f"Our Table 1 head by orbit family: the notebook's formula vs relative compression "
                    f"(k/d = {k}/{d} = {k / d:.3g})")
    fam_res = {}
    for fam, (zf, hf) in per_family.items():
        r = notebook_ratio(zf, hf)
        rel = compression(space_geometry(zf), space_geometry(hf))["relative"]
        fam_res[fam] = {"notebook": r, "width_removed": r * d / k, "relative": rel}
        fam_t.add(f"{fam}", None, r, rel, f"notebook ÷ (k/d) = {r * d / k:.3g}")
    return fam_t, fam_res


def published_table() -> C.Table:
    """The published pretrained-model ratios with the width factor k/d removed."""
    pub_t = C.Table("Published pretrained-model ratios (pretrained.ipynb) with the width factor k/d removed")
    for name, p in PUBLISHED.items():
        f = p["k"] / p["d"]
        for fam, r in zip(FAMILIES, p["ratios"]):
            pub_t.add(f"{name}, {fam}", r, "n/a offline", r / f, f"k/d = {p['k']}/{p['d']} = {f:.3g}")
    return pub_t


def plot(args, curves: dict, d: int) -> None:
    """width_artefact.png: the ratios against the head's width, beside the published ratios with
    and without the width factor."""
    plt = C.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(14, 5))
    ax = axes[0]
    for key, style, label in (("head", "o", "trained head h ∘ isometry"), ("identity", "s", "identity head z ↦ Qz")):
        w = [c[0] for c in curves[key]]
        ax.loglog(w, [c[1] for c in curves[key]], style + "--", label=f"{label}: notebook formula")
        ax.loglog(w, [c[2] for c in curves[key]], style + "-", label=f"{label}: relative compression")
    ax.axhline(1, color="gray", lw=0.8)
    ax.set_xlabel("head output width k")
    ax.set_ylabel("orbit compression (×)")
    ax.set_title(f"equal function, different width (backbone d = {d})")
    ax.legend(fontsize=8)
    ax = axes[1]
    labels, pub, cor = [], [], []
    for name, p in PUBLISHED.items():
        for fam, r in zip(FAMILIES, p["ratios"]):
            labels.append(f"{name.replace(' ResNet-50', ' R50')}\n{fam}")
            pub.append(r)
            cor.append(r * p["d"] / p["k"])
    x = torch.arange(len(labels)).float()
    ax.bar((x - 0.2).tolist(), pub, width=0.4, color="lightcoral", edgecolor="k", label="published (notebook formula)")
    ax.bar((x + 0.2).tolist(), cor, width=0.4, color="lightblue", edgecolor="k", label="÷ k/d (width factor removed)")
    ax.set_yscale("log")
    ax.axhline(1, color="gray", lw=0.8)
    ax.set_xticks(x.tolist(), labels, rotation=90, fontsize=6)
    ax.set_ylabel("orbit compression (×)")
    ax.set_title("published pretrained-model ratios")
    ax.legend(fontsize=8)
    fig.suptitle("The d_head/d_backbone factor of the per-dimension variance ratio", fontweight="bold")
    fig.tight_layout()
    C.figure(args.out / "width_artefact.png", fig)


def main(argv: list[str] | None = None) -> None:
    args = C.finish_args(C.parser(__doc__, "width_artefact").parse_args(argv))
    t0 = time.perf_counter()
    cfg, (model, run, (mean, std), train_s) = table1_model(args)
    test = C.load_split(args, train=False)
    g = torch.Generator().manual_seed(args.seed)
    n = 16 if args.scale == "smoke" else 64
    imgs = C.to_unit(test.images[torch.randperm(len(test), generator=g)[:n]])
    encode = C.encoder(model.backbone, mean, std)

    per_family = orbit_embeddings(model, encode, imgs, n)
    z, h = per_family["rotation"]
    d, k = z.shape[-1], h.shape[-1]

    t, curves = width_table(f"Width artefact: heads of equal function, different width (rotation orbits 0-45°, {n} test "
                            f"images, Table 1 head {d}→{k}, backbone {cfg.backbone.name}, scale {args.scale})",
                            z, h, args.scale, args.seed)
    fam_t, fam_res = family_table(per_family, d, k)
    pub_t = published_table()
    plot(args, curves, d)
    C.report(args, [t, fam_t, pub_t], {"curves": curves, "families": fam_res, "run": str(run), "d": d, "k": k,
                                       "n_images": n, "published": PUBLISHED}, t0)


if __name__ == "__main__":
    main()
