"""The shapes dataset: recorded factors must match what was rendered."""
from __future__ import annotations

import math

import pytest
import torch

from geohead.data import functional as Fn
from geohead.data.loaders import load_dataset
from geohead.data.orbits import hue_shift, rotate
from geohead.data.shapes import (
    FACTOR_NAMES,
    SHAPE_CLASSES,
    SYMMETRY_ORDER,
    make_shapes,
    render_shapes,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def _circ_mean(h: torch.Tensor, dim: int = -1) -> torch.Tensor:
    a = 2 * math.pi * h
    return torch.remainder(torch.atan2(torch.sin(a).mean(dim), torch.cos(a).mean(dim)) / (2 * math.pi), 1.0)


def _circ_dist(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    d = torch.remainder(a - b, 1.0)
    return torch.minimum(d, 1 - d)


def test_deterministic_balanced_and_recorded() -> None:
    a, b = make_shapes(300, seed=3), make_shapes(300, seed=3)
    assert torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels)
    assert not torch.equal(make_shapes(300, seed=4).images, a.images)
    assert a.images.shape == (300, 3, 32, 32) and a.images.dtype == torch.uint8
    assert a.labels.dtype == torch.int64 and a.class_names == list(SHAPE_CLASSES)
    counts = a.class_counts()
    assert counts.max() - counts.min() <= 1  # exactly balanced
    assert set(a.factors) == set(FACTOR_NAMES)
    assert all(v.shape == (300,) and v.dtype == torch.float32 for v in a.factors.values())
    assert a.factor_kinds["hue"] == "circular" and a.factor_periods["rotation"] == 360.0
    assert a.factor_kinds["scale"] == "continuous"
    # splits come from disjoint seeds
    tr, te = load_dataset("shapes", n=200, train=True), load_dataset("shapes", n=200, train=False)
    assert not torch.equal(tr.factors["hue"], te.factors["hue"])
    assert tr.name == "shapes-train" and te.name == "shapes-test"


def test_overriding_one_factor_keeps_the_others() -> None:
    a = make_shapes(64, seed=5)
    b = make_shapes(64, seed=5, factors={"rotation": 10.0})
    assert torch.equal(a.labels, b.labels)
    for k in FACTOR_NAMES:
        if k != "rotation":
            assert torch.equal(a.factors[k], b.factors[k]), k
    assert torch.all(b.factors["rotation"] == 10.0)


def test_colour_factors_match_pixels() -> None:
    """Mean hue / saturation / value of fully covered pixels track the recorded factors."""
    d = make_shapes(400, seed=7)
    _, cov = render_shapes(d.labels, d.factors, 32, return_coverage=True)
    hsv = Fn.rgb_to_hsv(d.images.float() / 255)
    inside = cov >= 1.0
    outside = cov <= 0.0
    assert bool(inside.flatten(1).sum(1).min() > 5) and bool(outside.flatten(1).sum(1).min() > 100)
    hue_err, bg_err = [], []
    for i in range(len(d)):
        hue_err.append(_circ_dist(_circ_mean(hsv[i, 0][inside[i]]), d.factors["hue"][i]))
        # V = max(R, G, B) and the noise is the same in R, G and B, so mean V tracks the factor
        bg_err.append(
            abs(float(hsv[i, 2][outside[i]].mean()) - float(d.factors["bg_brightness"][i]))
        )
    hue_err = torch.stack(hue_err)
    assert float(hue_err.max()) < 0.02, float(hue_err.max())  # turns; noise is monochrome
    assert max(bg_err) < 0.03
    # without noise, every inside pixel has exactly the factor colour (up to uint8 rounding)
    q = make_shapes(100, seed=8, factors={"noise": 0.0})
    _, cov = render_shapes(q.labels, q.factors, 32, return_coverage=True)
    hsv = Fn.rgb_to_hsv(q.images.float() / 255)
    for i in range(len(q)):
        m = cov[i] >= 1.0
        assert float(_circ_dist(hsv[i, 0][m], q.factors["hue"][i]).max()) < 0.01
        assert float((hsv[i, 1][m] - q.factors["saturation"][i]).abs().max()) < 0.01
        assert float((hsv[i, 2][m] - q.factors["brightness"][i]).abs().max()) <= 0.5 / 255 + 1e-6


# analytic template areas (local units, before scaling), see geohead/data/shapes.py
_AREA = {
    "disc": math.pi * 0.9**2,
    "square": 1.44**2,
    "triangle": 3 * math.sqrt(3) / 4 * 1.0**2,
    "pentagon": 5 / 2 * 0.95**2 * math.sin(2 * math.pi / 5),
    "hexagon": 3 * math.sqrt(3) / 2 * 0.95**2,
    "cross": 2 * (1.9 * 0.6) - 0.6**2,
    "ring": math.pi * (0.96**2 - 0.48**2),
    "ellipse": math.pi * 1.0 * 0.5,
}


def test_scale_and_position_match_the_rendered_shape() -> None:
    """Covered area = scale² × template area; coverage centroid = (pos_x, pos_y) (symmetric classes)."""
    s = 64
    d = make_shapes(300, img_size=s, seed=11)
    _, cov = render_shapes(d.labels, d.factors, s, return_coverage=True)
    pix = (2.0 / s) ** 2  # area of a pixel in normalised units
    centres = (torch.arange(s) + 0.5) * (2.0 / s) - 1.0
    checked = set()
    for i in range(len(d)):
        name = d.class_names[int(d.labels[i])]
        c = cov[i]
        if name in _AREA:
            area = float(c.sum()) * pix
            expect = _AREA[name] * float(d.factors["scale"][i]) ** 2
            assert abs(area / expect - 1) < 0.03, (name, area, expect)
            checked.add(name)
        if name != "arrow":  # every other template is centred on its origin
            cx = float((c.sum(0) * centres).sum() / c.sum())
            cy = float((c.sum(1) * centres).sum() / c.sum())
            assert abs(cx - float(d.factors["pos_x"][i])) < 0.5 * 2 / s, name
            assert abs(cy - float(d.factors["pos_y"][i])) < 0.5 * 2 / s, name
    assert checked == set(_AREA)


@pytest.mark.parametrize("with_position", [False, True])
def test_rotation_orbit_equals_rerendering(with_position: bool) -> None:
    """orbits.rotate(image, Δ) ≈ render(rotation + Δ) (and the position turned with it)."""
    s, delta = 64, 30.0
    fixed = {"noise": 0.0} if with_position else {"noise": 0.0, "pos_x": 0.0, "pos_y": 0.0}
    d = make_shapes(100, img_size=s, seed=12, factors=fixed)
    f = dict(d.factors)
    g = dict(f)
    g["rotation"] = f["rotation"] + delta
    a = math.radians(delta)  # counter-clockwise on screen, y pointing down
    g["pos_x"] = f["pos_x"] * math.cos(a) + f["pos_y"] * math.sin(a)
    g["pos_y"] = -f["pos_x"] * math.sin(a) + f["pos_y"] * math.cos(a)
    target = render_shapes(d.labels, g, s).float() / 255
    x = d.images.float() / 255
    err = (rotate(x, delta) - target).abs().mean(dim=(1, 2, 3))
    base = (x - target).abs().mean(dim=(1, 2, 3))  # not rotating at all
    # off-centre shapes near the border can be reflected into the corners the rotation uncovers
    assert float(err.max()) < (0.012 if with_position else 0.006), float(err.max())
    assert float(err.median()) < 0.003
    for c, name in enumerate(d.class_names):
        if SYMMETRY_ORDER[name] == 0:  # disc and ring look the same at every angle
            continue
        m = d.labels == c
        assert float(err[m].mean()) < 0.5 * float(base[m].mean()), name
    # the opposite direction is clearly wrong: the sign convention is tested, not only the angle
    wrong = (rotate(x, -delta) - target).abs().mean(dim=(1, 2, 3))
    asym = torch.tensor([SYMMETRY_ORDER[d.class_names[int(c)]] in (1, 3, 5, 2) for c in d.labels])
    assert float(err[asym].mean()) < 0.3 * float(wrong[asym].mean())


def test_hue_orbit_equals_rerendering_with_shifted_hues() -> None:
    s = 32
    d = make_shapes(100, img_size=s, seed=13, factors={"noise": 0.0})
    _, cov = render_shapes(d.labels, d.factors, s, return_coverage=True)
    g = dict(d.factors)
    g["hue"] = d.factors["hue"] + 0.3
    g["bg_hue"] = d.factors["bg_hue"] + 0.3
    target = render_shapes(d.labels, g, s).float() / 255
    err = (hue_shift(d.images.float() / 255, 0.3) - target).abs()
    pure = ((cov == 0) | (cov == 1)).unsqueeze(1).expand_as(err)  # edge pixels mix two colours
    assert float(err[pure].max()) <= 2 / 255


def test_sizes_subsets_and_bad_input() -> None:
    d = make_shapes(20, img_size=48, seed=0, classes=("disc", "arrow"))
    assert d.images.shape == (20, 3, 48, 48) and d.class_names == ["disc", "arrow"]
    assert set(d.labels.tolist()) == {0, 1}
    assert len(make_shapes(0)) == 0
    with pytest.raises(ValueError, match="unknown shape classes"):
        make_shapes(4, classes=("disc", "blob"))
    with pytest.raises(ValueError, match="unknown shapes factor"):
        make_shapes(4, factors={"colour": 0.3})
    with pytest.raises(ValueError, match="unknown shapes factor"):
        make_shapes(4, ranges={"tilt": (0, 1)})
    with pytest.raises(ValueError, match="low <= high"):
        make_shapes(4, ranges={"scale": (0.7, 0.2)})
    with pytest.raises(ValueError, match="non-negative integer"):
        make_shapes(-1)
    with pytest.raises(ValueError, match="shape"):
        make_shapes(4, factors={"hue": torch.zeros(3)})
    with pytest.raises(ValueError, match="img_size"):
        make_shapes(4, img_size=2)
