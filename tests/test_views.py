"""On-device views: shapes, ranges, per-sample randomness, reproducibility, exact special cases."""
from __future__ import annotations

import math

import pytest
import torch

from geohead.data.shapes import make_shapes
from geohead.data.view_recipes import RECIPES, ViewSpec, sample_crop_boxes
from geohead.data.views import CIFAR10_MEAN, CIFAR10_STD, Views, make_view_fn

pytestmark = pytest.mark.usefixtures("one_thread")

MEAN = torch.tensor(CIFAR10_MEAN).view(1, 3, 1, 1)
STD = torch.tensor(CIFAR10_STD).view(1, 3, 1, 1)


@pytest.fixture(scope="module")
def batch() -> torch.Tensor:
    return make_shapes(16, seed=0).images


def _unnorm(v: torch.Tensor) -> torch.Tensor:
    return v * STD + MEAN


CASES = [(name, "fused") for name in sorted(RECIPES)] + [(name, "kornia") for name in ("simclr", "byol", "dino")]


@pytest.mark.parametrize(("name", "backend"), CASES)
def test_recipe_shapes_dtype_range_and_randomness(name: str, backend: str, batch: torch.Tensor) -> None:
    views = make_view_fn(name, img_size=32, backend=backend)
    g = torch.Generator().manual_seed(0)
    out = views(batch, g)
    recipe = RECIPES[name]
    assert len(out) == recipe.num_views == len(views.view_sizes)
    expect_sizes = [32, 32] + ([16] * 8 if name == "dino" else [])
    for v, side in zip(out, expect_sizes):
        assert v.shape == (16, 3, side, side) and v.dtype == torch.float32
        x = _unnorm(v)
        assert torch.isfinite(v).all()
        assert float(x.min()) >= -1e-5 and float(x.max()) <= 1 + 1e-5
    # views differ between samples of identical images, and between the views of one image
    same = batch[:1].expand(16, -1, -1, -1).contiguous()
    a, b = views(same, g)[:2]
    diffs = (a[:, None] - a[None]).abs().flatten(2).mean(-1)
    off = diffs[~torch.eye(16, dtype=torch.bool)]
    assert float((off > 1e-3).float().mean()) > 0.95
    assert float(((a - b).abs().flatten(1).mean(1) > 1e-3).float().mean()) > 0.9
    # same seed -> identical views, other seed -> different views
    r1 = views(batch, torch.Generator().manual_seed(7))
    r2 = views(batch, torch.Generator().manual_seed(7))
    r3 = views(batch, torch.Generator().manual_seed(8))
    assert all(torch.equal(p, q) for p, q in zip(r1, r2))
    assert not torch.equal(r1[0], r3[0])


def test_kornia_backend_leaves_global_rng_alone(batch: torch.Tensor) -> None:
    views = make_view_fn("simclr", backend="kornia")
    state = torch.get_rng_state()
    views(batch, torch.Generator().manual_seed(0))
    assert torch.equal(state, torch.get_rng_state())


def test_no_generator_follows_torch_manual_seed(batch: torch.Tensor) -> None:
    views = make_view_fn("byol")
    torch.manual_seed(3)
    a = views(batch)
    torch.manual_seed(3)
    b = views(batch)
    assert all(torch.equal(p, q) for p, q in zip(a, b))


def _identity_spec(**kw) -> ViewSpec:
    base = dict(crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0), flip_p=0.0, jitter_p=0.0, gray_p=0.0)
    return ViewSpec(**{**base, **kw})


def _views(spec: ViewSpec, **kw) -> Views:
    from geohead.data.view_recipes import ViewRecipe

    return Views(ViewRecipe("test", (spec,)), **kw)


def test_exact_special_cases(batch: torch.Tensor) -> None:
    """Full-image crops, forced flips, grayscale and solarisation give known images."""
    x = batch.float() / 255
    g = torch.Generator().manual_seed(0)
    (v,) = _views(_identity_spec())(batch, g)
    assert torch.allclose(_unnorm(v), x, atol=1e-5)
    (v,) = _views(_identity_spec(flip_p=1.0))(batch, g)
    assert torch.allclose(_unnorm(v), x.flip(-1), atol=1e-5)
    (v,) = _views(_identity_spec(gray_p=1.0))(batch, g)
    y = _unnorm(v)
    assert torch.allclose(y[:, 0], y[:, 1], atol=1e-5) and torch.allclose(y[:, 1], y[:, 2], atol=1e-5)
    (v,) = _views(_identity_spec(solarize_p=1.0))(batch, g)
    assert torch.allclose(_unnorm(v), torch.where(x >= 0.5, 1 - x, x), atol=1e-5)
    (v,) = _views(_identity_spec(), img_size=16)(batch, g)  # full image, half resolution
    ref = torch.nn.functional.interpolate(x, size=(16, 16), mode="bilinear", align_corners=False)
    assert torch.allclose(_unnorm(v), ref, atol=1e-5)
    # normalisation uses the given statistics
    (v,) = _views(_identity_spec(), mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))(batch, g)
    assert torch.allclose(v, x * 2 - 1, atol=1e-5)
    # jitter with zero strength and probability 1 is the identity too; full-strength brightness is not
    (v,) = _views(_identity_spec(jitter_p=1.0, brightness=0.0, contrast=0.0, saturation=0.0, hue=0.0))(batch, g)
    assert torch.allclose(_unnorm(v), x, atol=1e-5)
    (v,) = _views(_identity_spec(jitter_p=1.0, brightness=0.8, contrast=0.0, saturation=0.0, hue=0.0))(batch, g)
    ratio = (_unnorm(v).sum(dim=(1, 2, 3)) / x.sum(dim=(1, 2, 3)))
    assert float(ratio.std()) > 0.05  # per-sample brightness factors


def test_blur_and_rotation_views(batch: torch.Tensor) -> None:
    g = torch.Generator().manual_seed(0)
    x = batch.float() / 255
    (v,) = _views(_identity_spec(blur_p=1.0, blur_sigma=(1.0, 1.5)))(batch, g)
    y = _unnorm(v)
    # blur lowers high-frequency energy of every image
    hf = lambda t: (t[..., 1:] - t[..., :-1]).abs().mean(dim=(1, 2, 3))  # noqa: E731
    assert bool((hf(y) < 0.8 * hf(x)).all())
    (v,) = _views(_identity_spec(rotation=45.0))(batch, g)
    assert float((_unnorm(v) - x).abs().mean()) > 0.01


def test_crop_boxes_follow_the_scale_and_ratio_ranges() -> None:
    g = torch.Generator().manual_seed(0)
    cx, cy, hw, hh = sample_crop_boxes(20_000, 32, 32, (0.08, 1.0), (3 / 4, 4 / 3), g)
    area = hw * hh  # fraction of the image area (half sizes are fractions of the half extent)
    ratio = hw / hh
    assert float(area.min()) >= 0.08 - 1e-6 and float(area.max()) <= 1 + 1e-6
    assert float(ratio.min()) >= 3 / 4 - 1e-5 and float(ratio.max()) <= 4 / 3 + 1e-5
    # boxes stay inside the image
    assert float((cx.abs() + hw).max()) <= 1 + 1e-5 and float((cy.abs() + hh).max()) <= 1 + 1e-5
    # same distribution as torchvision's RandomResizedCrop.get_params (large image: little rounding)
    from torchvision.transforms import RandomResizedCrop

    torch.manual_seed(0)
    ref = torch.tensor(
        [RandomResizedCrop.get_params(torch.empty(1, 1000, 1000), [0.08, 1.0], [3 / 4, 4 / 3])[2:] for _ in range(2000)],
        dtype=torch.float64,
    ) / 1000.0
    ref_area, ref_logr = ref[:, 0] * ref[:, 1], torch.log(ref[:, 1] / ref[:, 0])
    assert abs(float(area.mean()) - float(ref_area.mean())) < 0.015
    assert abs(float(area.std()) - float(ref_area.std())) < 0.015
    assert abs(float(torch.log(ratio).std()) - float(ref_logr.std())) < 0.01
    assert abs(float(torch.log(ratio).mean())) < 0.01
    # a ratio range that never fits falls back to the largest centred box of an allowed ratio
    cx, cy, hw, hh = sample_crop_boxes(100, 32, 32, (1.0, 1.0), (2.0, 3.0), g)
    assert torch.allclose(hw, torch.ones(100)) and torch.allclose(hh, torch.full((100,), 0.5))
    assert math.isclose(float(cx.abs().max()), 0.0, abs_tol=1e-6)


def test_bad_input(batch: torch.Tensor) -> None:
    views = make_view_fn("simclr")
    with pytest.raises(TypeError, match="uint8"):
        views(batch.long())
    with pytest.raises(ValueError, match=r"\(B, 3, H, W\)"):
        views(batch.permute(0, 2, 3, 1))
    with pytest.raises(ValueError, match="unknown view recipe 'moco'"):
        make_view_fn("moco")
    with pytest.raises(ValueError, match="unknown views backend"):
        make_view_fn("simclr", backend="dali")
    with pytest.raises(ValueError, match="unknown ViewSpec fields"):
        make_view_fn("simclr", strength=0.5)
    with pytest.raises(ValueError, match="probability"):
        make_view_fn("simclr", gray_p=1.5)
    with pytest.raises(ValueError, match="crop_scale"):
        make_view_fn("simclr", crop_scale=(0.5, 0.2))
    with pytest.raises(ValueError, match="3 values"):
        make_view_fn("simclr", mean=(0.5, 0.5))
    # float input in [0, 1] is accepted and equals the uint8 path
    g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    a = views(batch, g1)
    b = views(batch.float() / 255, g2)
    assert torch.allclose(a[0], b[0], atol=1e-6)
