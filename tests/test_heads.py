"""GeometricHead, HeadSpec, presets and whitening."""
from __future__ import annotations

import itertools
import json
import re
import warnings

import pytest
import torch
from torch import nn

from geohead import GeometricHead, HeadSpec
from geohead.heads import ACTIVATIONS, PRESETS, WhiteningRankWarning, preset_spec

ACTS = ["silu", "gelu", "mish", "softplus", "tanh", "relu", "identity"]


def linears(head: GeometricHead) -> list[nn.Linear]:
    return [m for name, m in head.mlp.named_children() if name.startswith("fc")]


@pytest.mark.parametrize("act,norm,depth", list(itertools.product(ACTS, ["batch", "layer", None], [1, 2, 3, 4])))
def test_shapes_every_activation_norm_depth(act: str, norm: str | None, depth: int) -> None:
    head = GeometricHead(12, 5, hidden_dim=9, depth=depth, activation=act, norm=norm)
    y = head(torch.randn(6, 12))
    assert y.shape == (6, 5)
    fcs = linears(head)
    assert len(fcs) == depth
    assert [f.in_features for f in fcs] == [12] + [9] * (depth - 1)
    assert [f.out_features for f in fcs] == [9] * (depth - 1) + [5]
    acts = [m for n, m in head.mlp.named_children() if n.startswith("act")]
    assert len(acts) == depth - 1  # a depth-1 (linear) head has no activation
    assert all(isinstance(a, ACTIVATIONS[act]) for a in acts)
    norms = [m for n, m in head.mlp.named_children() if n.startswith("norm")]
    expected_norm = {"batch": nn.BatchNorm1d, "layer": nn.LayerNorm, None: nn.Identity}[norm]
    assert all(type(m) is expected_norm for m in norms)
    # bias="auto": dropped exactly where a BatchNorm follows
    for f in fcs[:-1]:
        assert (f.bias is None) == (norm == "batch")
    assert fcs[-1].bias is not None


def test_swish_is_silu_and_module_types() -> None:
    assert GeometricHead(4, 3, hidden_dim=5, activation="swish").spec.activation == "silu"
    head = GeometricHead(4, 3, hidden_dim=5, activation=nn.ELU)
    assert isinstance(head.mlp.act0, nn.ELU)
    rebuilt = GeometricHead.from_spec(HeadSpec.from_json(head.spec.to_json()))
    assert isinstance(rebuilt.mlp.act0, nn.ELU)


def test_bad_arguments_fail_at_construction_with_valid_values() -> None:
    with pytest.raises(ValueError, match=r"unknown activation 'swishy'.*'gelu'.*'silu'"):
        GeometricHead(4, 3, activation="swishy")
    with pytest.raises(ValueError, match=r"unknown norm 'group'"):
        GeometricHead(4, 3, norm="group")
    with pytest.raises(ValueError, match=r"depth must be an integer from 1 to 64, got 0"):
        GeometricHead(4, 3, depth=0)
    with pytest.raises(ValueError, match=r"last_norm"):
        GeometricHead(4, 3, last_norm="instance")
    with pytest.raises(ValueError, match=r"bias must be"):
        GeometricHead(4, 3, bias="yes")
    with pytest.raises(ValueError, match=r"unknown head preset 'moco'.*'barlow'"):
        GeometricHead.preset("moco", 8)
    with pytest.raises(ValueError, match=r"expects input of shape \(B, 4\)"):
        GeometricHead(4, 3, hidden_dim=5)(torch.randn(2, 5))
    with pytest.raises(ValueError, match=r"unknown HeadSpec keys \['widht'\]"):
        HeadSpec.from_dict({"in_dim": 3, "out_dim": 2, "widht": 4})


def test_arguments_after_out_dim_are_keyword_only() -> None:
    # lightly's (input_dim, hidden_dim, output_dim) order must not build a 512->2048 head silently
    with pytest.raises(TypeError, match=re.escape("GeometricHead(512, 128, hidden_dim=2048)")):
        GeometricHead(512, 2048, 128)
    with pytest.raises(TypeError, match=re.escape("GeometricHead(8, 4, hidden_dim=16, depth=2)")):
        GeometricHead(8, 4, 16, 2)
    assert GeometricHead(512, 128, hidden_dim=2048).spec.describe() == (
        "depth 3 512->2048->128 silu norm=batch last_norm=none whiten=none"
    )


def test_explicit_bias_and_last_norm() -> None:
    head = GeometricHead(6, 4, hidden_dim=8, depth=3, bias=True, last_norm="batch_noaffine")
    assert all(f.bias is not None for f in linears(head))
    assert isinstance(head.mlp.last_norm, nn.BatchNorm1d) and not head.mlp.last_norm.affine
    head = GeometricHead(6, 4, hidden_dim=8, depth=3, last_norm="batch")
    assert linears(head)[-1].bias is None and head.mlp.last_norm.affine
    head = GeometricHead(6, 4, hidden_dim=8, depth=2, norm="layer")
    assert linears(head)[0].bias is not None  # LayerNorm does not remove a per-feature bias


@pytest.mark.parametrize("spec", [
    HeadSpec(10, 4, hidden_dim=7, depth=3, activation="gelu", norm="layer", last_norm="batch"),
    HeadSpec(10, 4, hidden_dim=7, depth=1, activation="relu", norm=None, bias=False),
    HeadSpec(10, 4, hidden_dim=7, depth=2, activation="mish", whiten="pca", prototypes=11),
])
def test_spec_json_round_trip_gives_identical_module(spec: HeadSpec, tmp_path) -> None:
    path = tmp_path / "head.json"
    spec.to_json(path)
    loaded = HeadSpec.load(path)
    assert loaded == spec
    assert HeadSpec.from_json(spec.to_json()) == spec
    a = GeometricHead.from_spec(spec)
    b = GeometricHead.from_spec(loaded)
    assert a.spec == b.spec == spec
    assert repr(a) == repr(b)
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb) and all(sa[k].shape == sb[k].shape for k in sa)
    b.load_state_dict(sa)
    x = torch.randn(5, 10)
    a.eval(), b.eval()
    assert torch.equal(a(x), b(x))
    assert json.loads(spec.to_json())["format"] == "geohead.HeadSpec"


def test_spec_json_errors(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        HeadSpec.from_json(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="not valid JSON"):
        HeadSpec.from_json("{not json")
    with pytest.raises(ValueError, match="not a geohead head spec"):
        HeadSpec.from_dict({"format": "other", "in_dim": 2, "out_dim": 2})


def test_spec_describe_one_line_summary() -> None:
    assert HeadSpec(512, 128, depth=1, norm=None).describe() == "linear 512->128 last_norm=none whiten=none"
    spec = HeadSpec(512, 128, hidden_dim=2048, depth=3, activation="gelu", norm=None,
                    last_norm="batch_noaffine", whiten="zca")
    assert spec.describe() == (
        "depth 3 512->2048->128 gelu norm=none last_norm=batch_noaffine whiten=zca"
    )
    assert HeadSpec(8, 4, hidden_dim=16, depth=2).describe() == (
        "depth 2 8->16->4 silu norm=batch last_norm=none whiten=none"
    )


def _cov(x: torch.Tensor) -> torch.Tensor:
    x = x.double()
    xc = x - x.mean(0)
    return xc.T @ xc / (x.shape[0] - 1)


@pytest.mark.parametrize("mode", ["zca", "pca"])
@pytest.mark.parametrize("in_dim,hidden", [(16, 32), (16, 16), (16, 8)])
def test_whitening_makes_first_preactivation_white(mode: str, in_dim: int, hidden: int) -> None:
    g = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(in_dim, in_dim, generator=g))
    mixing = q * torch.linspace(0.2, 4.0, in_dim)  # full rank, condition number 400 in Σ
    feats = torch.randn(2000, in_dim, generator=g) @ mixing * 3.0 + 5.0
    head = GeometricHead(in_dim, 4, hidden_dim=hidden, depth=2, norm=None, whiten=None)
    head.whiten_(feats, mode=mode)
    m = min(in_dim, hidden)
    pre = head.mlp.fc0(feats)[:, :m]
    assert torch.allclose(_cov(pre), torch.eye(m, dtype=torch.float64), atol=1e-3)
    assert pre.mean(0).abs().max() < 1e-3  # the bias centres the kept units
    assert head.spec.whiten == mode and head.whitening_info["rank"] == m
    if mode == "pca" and hidden < in_dim:
        # the kept subspace is the top principal subspace of the features
        evals, evecs = torch.linalg.eigh(_cov(feats))
        top = evecs[:, -hidden:]
        w = head.mlp.fc0.weight.double()
        resid = w - (w @ top) @ top.T
        assert resid.abs().max() < 1e-4 * w.abs().max()
    if mode == "zca" and hidden >= in_dim:
        # ZCA: W = Σ^{-1/2}, a symmetric matrix
        w = head.mlp.fc0.weight.detach().double()[:in_dim]
        assert torch.allclose(w, w.T, atol=1e-4 * float(w.abs().max()))


def test_whitening_constructor_and_rank_deficient_features() -> None:
    g = torch.Generator().manual_seed(1)
    feats = torch.randn(300, 3, generator=g) @ torch.randn(3, 10, generator=g)  # rank 3 in R^10
    with pytest.warns(WhiteningRankWarning, match="numerical rank 3"):
        head = GeometricHead(10, 4, hidden_dim=16, depth=2, whiten=feats)
    assert head.whitening_info["rank"] == 3
    pre = head.mlp.fc0(feats)[:, :10]
    cov = _cov(pre)
    evals = torch.linalg.eigvalsh(cov)
    # white on the 3 kept directions (eigenvalue 1), zero elsewhere: a rank-3 projector
    assert torch.allclose(evals[-3:], torch.ones(3, dtype=torch.float64), atol=1e-3)
    assert evals[:-3].abs().max() < 1e-3
    # fewer samples than dimensions: rank at most N-1
    few = torch.randn(5, 10, generator=g)
    with pytest.warns(WhiteningRankWarning, match="5 samples for 10 dimensions"):
        head = GeometricHead(10, 4, hidden_dim=16, depth=2, norm=None).whiten_(few)
    assert head.whitening_info["rank"] == 4
    with pytest.raises(ValueError, match="shape \\(N, 10\\)"):
        head.whiten_(torch.randn(5, 9))
    with pytest.raises(ValueError, match="non-finite"):
        head.whiten_(torch.full((5, 10), float("nan")))
    with pytest.raises(ValueError, match="zero variance"):
        head.whiten_(torch.ones(5, 10))
    with pytest.raises(ValueError, match="unknown whitening mode"):
        head.whiten_(few, mode="cholesky")


PRESET_SHAPES = {
    # name: (depth, hidden, out, norm, last_norm, prototypes)
    "simclr": (2, 512, 128, "batch", None, None),
    "byol": (2, 4096, 256, "batch", None, None),
    "byol_predictor": (2, 4096, 512, "batch", None, None),
    "simsiam": (3, 2048, 2048, "batch", "batch_noaffine", None),
    "simsiam_predictor": (2, 128, 512, "batch", None, None),
    "barlow": (3, 8192, 8192, "batch", None, None),
    "vicreg": (3, 8192, 8192, "batch", None, None),
    "dino": (3, 2048, 256, None, None, 65536),
}


@pytest.mark.parametrize("name", PRESETS)
def test_presets_match_documented_shapes(name: str) -> None:
    depth, hidden, out, norm, last_norm, protos = PRESET_SHAPES[name]
    spec = preset_spec(name, 512)
    assert (spec.depth, spec.hidden_dim, spec.out_dim, spec.norm, spec.last_norm, spec.prototypes) == (
        depth, hidden, out, norm, last_norm, protos)
    assert spec.activation == ("gelu" if name == "dino" else "silu")
    assert preset_spec(name, 512, smooth=False).activation == ("gelu" if name == "dino" else "relu")
    from geohead.heads import presets
    assert '"' in getattr(presets, f"_{name}").__doc__  # each preset quotes its paper
    small = GeometricHead.preset(name, 32, hidden_dim=16, **({"prototypes": 20} if name == "dino" else {}))
    y = small(torch.randn(4, 32))
    assert y.shape == (4, 20 if name == "dino" else small.spec.out_dim)


def test_dino_prototype_layer_is_weight_normalised_with_frozen_gain() -> None:
    head = GeometricHead.preset("dino", 16, hidden_dim=32, out_dim=8, prototypes=10)
    proto = head.prototypes
    g = proto.parametrizations.weight.original0
    assert not g.requires_grad and torch.all(g == 1)
    assert torch.allclose(proto.weight.norm(dim=1), torch.ones(10), atol=1e-6)
    assert sum(p.numel() for p in head.parameters() if p.requires_grad) > 0
    free = GeometricHead.preset("dino", 16, hidden_dim=32, out_dim=8, prototypes=10, freeze_prototype_norm=False)
    assert free.prototypes.parametrizations.weight.original0.requires_grad


def test_compiled_head_matches_eager() -> None:
    torch.manual_seed(0)
    head = GeometricHead(16, 8, hidden_dim=32, depth=3, activation="silu").eval()
    x = torch.randn(6, 16)
    compiled = torch.compile(head)
    assert torch.allclose(compiled(x), head(x), atol=1e-6, rtol=1e-5)


def test_functional_transforms_jvp_vjp() -> None:
    torch.manual_seed(0)
    head = GeometricHead(5, 3, hidden_dim=7, depth=3).double().eval()
    params = dict(head.named_parameters())
    buffers = dict(head.named_buffers())
    z = torch.randn(4, 5, dtype=torch.float64)
    v = torch.randn_like(z)

    def f(z_: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(head, (params, buffers), (z_,))

    out, jv = torch.func.jvp(f, (z,), (v,))
    assert torch.allclose(out, head(z))
    eps = 1e-6
    fd = (head(z + eps * v) - head(z - eps * v)) / (2 * eps)
    assert torch.allclose(jv, fd, atol=1e-8)
    _, pullback = torch.func.vjp(f, z)
    u = torch.randn(4, 3, dtype=torch.float64)
    (ju,) = pullback(u)
    assert torch.allclose((ju * v).sum(), (u * jv).sum())  # <J^T u, v> = <u, J v>


def test_autocast_bf16() -> None:
    torch.manual_seed(0)
    head = GeometricHead(16, 8, hidden_dim=32).eval()
    x = torch.randn(4, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = head(x)
    assert y.dtype == torch.bfloat16
    assert torch.allclose(y.float(), head(x), atol=5e-2, rtol=5e-2)


def test_ddp_wraps_head(tmp_path) -> None:
    import torch.distributed as dist

    init = f"file://{tmp_path / 'pg'}"
    dist.init_process_group("gloo", init_method=init, rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        head = GeometricHead(8, 4, hidden_dim=16)
        ddp = nn.parallel.DistributedDataParallel(head)
        x = torch.randn(6, 8)
        y = ddp(x)
        y.pow(2).sum().backward()
        assert y.shape == (6, 4)
        assert all(p.grad is not None for p in head.parameters() if p.requires_grad)
    finally:
        dist.destroy_process_group()


def test_search_trials_silence_only_the_whitening_rank_warning():
    """A search trains many whitened candidates on rank-deficient features: it silences that
    warning (the candidate's criteria record the fact) and nothing else."""
    import warnings

    from geohead.search.trial import _quiet_whitening

    head = GeometricHead(10, 4, depth=1, whiten="pca")
    feats = torch.randn(50, 3) @ torch.randn(3, 10)  # rank 3 < 10
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with _quiet_whitening():
            head.whiten_(feats)
            warnings.warn("other", UserWarning)
    assert [str(w.message) for w in seen] == ["other"]
