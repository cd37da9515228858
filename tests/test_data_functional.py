"""Batched per-sample colour/geometry ops against torchvision's per-image reference."""
from __future__ import annotations

import pytest
import torch
import torchvision.transforms.functional as TF

from geohead.data import functional as Fn

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture()
def x() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    img = torch.rand(6, 3, 16, 16, generator=g)
    img[:, :, :3] = 0.5  # gray rows: hue undefined, must stay put
    img[0] = 0.0  # a black image
    return img


def _per_image(fn, x: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
    return torch.stack([fn(x[i], float(params[i])) for i in range(len(x))])


def test_colour_ops_match_torchvision(x: torch.Tensor) -> None:
    g = torch.Generator().manual_seed(1)
    hue = torch.rand(6, generator=g) - 0.5
    fac = torch.rand(6, generator=g) * 2
    assert torch.allclose(Fn.adjust_hue(x, hue), _per_image(TF.adjust_hue, x, hue), atol=1e-5)
    assert torch.allclose(Fn.adjust_saturation(x, fac), _per_image(TF.adjust_saturation, x, fac), atol=1e-5)
    assert torch.allclose(Fn.adjust_contrast(x, fac), _per_image(TF.adjust_contrast, x, fac), atol=1e-5)
    assert torch.allclose(Fn.adjust_brightness(x, fac), _per_image(TF.adjust_brightness, x, fac), atol=1e-6)
    assert torch.allclose(Fn.rgb_to_gray(x), TF.rgb_to_grayscale(x), atol=1e-6)
    assert torch.allclose(Fn.solarize(x), TF.solarize(x, 0.5))
    # HSV round trip and a full turn of hue are identities
    assert torch.allclose(Fn.hsv_to_rgb(Fn.rgb_to_hsv(x)), x, atol=1e-6)
    assert torch.allclose(Fn.adjust_hue(x, 1.0), x, atol=1e-5)


def test_blur_and_affine_match_torchvision(x: torch.Tensor) -> None:
    sig = torch.tensor([0.0, 0.5, 0.8, 1.0, 1.3, 2.0])
    out = Fn.gaussian_blur(x, sig, radius=6)
    ref = torch.stack([x[0]] + [TF.gaussian_blur(x[i], 13, float(sig[i])) for i in range(1, 6)])
    assert torch.allclose(out, ref, atol=1e-5)
    n = len(x)
    zero, one = torch.zeros(n), torch.ones(n)
    angle = torch.linspace(-90, 90, n)
    theta = Fn.affine_matrices(zero, zero, one, one, angle, torch.zeros(n, dtype=torch.bool), 16, 16)
    rot = Fn.affine_resample(x, theta, (16, 16), padding_mode="zeros")
    ref = torch.stack([TF.rotate(x[i], float(angle[i]), TF.InterpolationMode.BILINEAR) for i in range(n)])
    inner = (slice(None), slice(None), slice(4, 12), slice(4, 12))  # both fill the corners differently
    assert torch.allclose(rot[inner], ref[inner], atol=1e-5)
    flip = Fn.affine_matrices(zero, zero, one, one, zero, torch.ones(n, dtype=torch.bool), 16, 16)
    assert torch.allclose(Fn.affine_resample(x, flip, (16, 16)), x.flip(-1), atol=1e-6)
    # a crop window: top-left quarter, resized to 8x8 = the quarter itself
    q = Fn.affine_matrices(-0.5 * one, -0.5 * one, 0.5 * one, 0.5 * one, zero, torch.zeros(n, dtype=torch.bool), 16, 16)
    assert torch.allclose(Fn.affine_resample(x, q, (8, 8)), x[:, :, :8, :8], atol=1e-6)


def test_parameter_shapes_are_checked(x: torch.Tensor) -> None:
    with pytest.raises(ValueError, match=r"expected \(6,\)"):
        Fn.adjust_saturation(x, torch.ones(5))
    with pytest.raises(ValueError, match=r"\(B, 3, H, W\)"):
        Fn.check_images(x[:, :2])
