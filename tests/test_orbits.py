"""Deterministic orbit transforms: identities, references, composition, per-sample params, gradients."""
from __future__ import annotations

import pytest
import torch
import torchvision.transforms.functional as TF

from geohead.data.orbits import ORBIT_FAMILIES, blur, crop_scale, hue_shift, rotate, saturation
from geohead.data.shapes import make_shapes

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def x() -> torch.Tensor:
    return make_shapes(8, seed=0).images.float() / 255


def test_families_identity_and_sweeps(x: torch.Tensor) -> None:
    assert set(ORBIT_FAMILIES) == {"rotate", "hue", "saturation", "blur", "crop"}
    for name, fam in ORBIT_FAMILIES.items():
        assert fam.name == name and fam.description
        assert fam.identity in fam.params and list(fam.params) == sorted(fam.params) and len(fam.params) >= 5
        y = fam(x, fam.identity)
        assert y.shape == x.shape and y.dtype == x.dtype
        assert torch.allclose(y, x, atol=1e-5), name
        orbit = fam.orbit(x)
        assert orbit.shape == (len(fam.params), *x.shape)
        assert float(orbit.min()) >= 0 and float(orbit.max()) <= 1
        # every non-identity parameter moves the images
        for p, v in zip(fam.params, orbit):
            if p != fam.identity:
                assert float((v - x).abs().mean()) > 1e-3, (name, p)


def test_rotate_matches_rot90_and_torchvision(x: torch.Tensor) -> None:
    # bilinear sampling at exact pixel centres: a quarter turn is a permutation of pixels
    assert torch.allclose(rotate(x, 90.0), torch.rot90(x, 1, dims=(2, 3)), atol=1e-5)  # counter-clockwise
    assert torch.allclose(rotate(x, -90.0), torch.rot90(x, -1, dims=(2, 3)), atol=1e-5)
    ref = TF.rotate(x, 20.0, TF.InterpolationMode.BILINEAR)
    inner = (slice(None), slice(None), slice(7, 25), slice(7, 25))  # corners: reflection vs zero fill
    assert torch.allclose(rotate(x, 20.0)[inner], ref[inner], atol=1e-5)


def test_colour_families_match_torchvision_and_compose(x: torch.Tensor) -> None:
    assert torch.allclose(hue_shift(x, 0.13), TF.adjust_hue(x, 0.13), atol=1e-5)
    assert torch.allclose(hue_shift(hue_shift(x, 0.1), 0.25), hue_shift(x, 0.35), atol=1e-5)
    assert torch.allclose(saturation(x, 0.6), TF.adjust_saturation(x, 0.6), atol=1e-5)
    assert torch.allclose(blur(x, 1.0), TF.gaussian_blur(x, 7, 1.0), atol=1e-5)


def test_crop_scale_is_a_centre_zoom(x: torch.Tensor) -> None:
    # area 1/4 -> the central 16x16 pixels, upsampled 2x (same sample points as interpolate)
    centre = x[:, :, 8:24, 8:24]
    ref = torch.nn.functional.interpolate(centre, scale_factor=2, mode="bilinear", align_corners=False)
    inner = (slice(None), slice(None), slice(1, 31), slice(1, 31))  # outermost ring: border vs clamp
    assert torch.allclose(crop_scale(x, 0.25)[inner], ref[inner], atol=1e-5)
    # zooming out (scale > 1) keeps the transform defined through the identity
    assert crop_scale(x, 1.2).shape == x.shape


def test_per_sample_parameters_and_gradients(x: torch.Tensor) -> None:
    params = torch.tensor([0.0, 10.0, -20.0, 45.0, 90.0, 5.0, -5.0, 30.0])
    batched = rotate(x, params)
    single = torch.stack([rotate(x[i : i + 1], float(params[i]))[0] for i in range(8)])
    assert torch.allclose(batched, single, atol=1e-6)
    for fam, p0 in (("rotate", 5.0), ("hue", 0.0537), ("saturation", 1.1), ("blur", 0.7), ("crop", 0.8)):
        fn = ORBIT_FAMILIES[fam].fn
        p = torch.full((8,), p0, dtype=torch.float64, requires_grad=True)
        xd = x.double()
        (g,) = torch.autograd.grad(fn(xd, p).sum(), p)
        eps = 1e-6  # float64; p0 values avoid the kinks of the piecewise-linear hue map (uint8 colours)
        fd = (fn(xd, p0 + eps).sum((1, 2, 3)) - fn(xd, p0 - eps).sum((1, 2, 3))) / (2 * eps)
        assert torch.allclose(g, fd, rtol=1e-3, atol=1e-3), fam


def test_bad_input(x: torch.Tensor) -> None:
    with pytest.raises(TypeError, match="float images"):
        rotate((x * 255).to(torch.uint8), 10.0)
    with pytest.raises(ValueError, match=r"\(B, 3, H, W\)"):
        rotate(x[0], 10.0)
    with pytest.raises(ValueError, match=r"shape \(8,\)"):
        hue_shift(x, torch.zeros(3))
    with pytest.raises(ValueError, match="sigma must be >= 0"):
        blur(x, -1.0)
    with pytest.raises(ValueError, match="must be > 0"):
        crop_scale(x, 0.0)
