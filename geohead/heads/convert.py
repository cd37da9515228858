"""Other libraries' projection heads as :class:`GeometricHead`: one intermediate description of an
MLP (:class:`MLPLayout`) read from modules (lightly's heads, any ``nn.Sequential``) or from a
state dict with sequential indices (``layers.N.*``, ``projector.N.*``, DINO's ``mlp.N.*``), then
turned into a :class:`HeadSpec` and a GeometricHead with the same weights.

An MLP fits a GeometricHead when it is ``[Linear, norm?, act]* Linear, last_norm?`` with equal
hidden widths, one hidden norm kind and one activation, optionally followed by DINO's
L2-normalisation and weight-normalised prototype layer. :func:`reference_forward` is the
documented forward of such an MLP written with ``torch.nn.functional`` alone (never through
GeometricHead), which the exactness checks compare against.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from geohead.heads.layers import ACTIVATIONS, activation_layer, linear_bias
from geohead.heads.spec import HeadSpec

#: Functional forms of the activations a converted head may use (keys of ACTIVATIONS).
_ACT_FN = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu, "tanh": torch.tanh, "mish": F.mish,
           "softplus": F.softplus, "identity": lambda x: x}


class HeadConversionError(ValueError):
    """An MLP that a GeometricHead cannot express (the message says what differs)."""


@dataclasses.dataclass
class Block:
    """One Linear and what follows it: ``weight`` (out, in), ``bias`` (out,) or None, ``norm``
    (None, "batch", "batch_noaffine", "layer") with its tensors, ``act`` (a name or None)."""

    weight: Tensor
    bias: Tensor | None
    norm: str | None = None
    norm_state: dict[str, Tensor] = dataclasses.field(default_factory=dict)
    act: str | None = None


@dataclasses.dataclass
class MLPLayout:
    """An MLP head: its blocks and, for DINO heads, the weight-normalised prototypes
    (``g`` (K, 1), ``v`` (K, out_dim)) after an L2-normalisation."""

    blocks: list[Block]
    prototype_g: Tensor | None = None
    prototype_v: Tensor | None = None

    def spec(self) -> HeadSpec:
        """The HeadSpec of this MLP (:class:`HeadConversionError` when it has none)."""
        b = self.blocks
        if not b:
            raise HeadConversionError("the head has no Linear layer")
        hidden, last = b[:-1], b[-1]
        if last.act is not None:
            raise HeadConversionError(f"the head ends with an activation ({last.act}); a GeometricHead ends with a Linear (+ norm)")
        widths = {blk.weight.shape[0] for blk in hidden}
        norms = {blk.norm for blk in hidden}
        acts = {blk.act for blk in hidden}
        if len(widths) > 1:
            raise HeadConversionError(f"hidden widths differ ({sorted(widths)}); a GeometricHead has one hidden_dim")
        if len(norms) > 1 or (norms and next(iter(norms)) not in ("batch", "layer", None)):
            raise HeadConversionError(f"hidden norms {sorted(map(str, norms))}: a GeometricHead has one of batch, layer, none")
        if None in acts and hidden:
            raise HeadConversionError("a hidden Linear is not followed by an activation")
        if len(acts) > 1:
            raise HeadConversionError(f"hidden activations differ ({sorted(map(str, acts))})")
        has_bias = [blk.bias is not None for blk in b]
        auto = [linear_bias("auto", blk.norm) for blk in b]
        bias: Any = "auto" if has_bias == auto else (any(has_bias))
        for i in range(len(b) - 1):
            if b[i + 1].weight.shape[1] != b[i].weight.shape[0]:
                raise HeadConversionError(f"Linear {i + 1} takes {b[i + 1].weight.shape[1]} inputs, Linear {i} gives {b[i].weight.shape[0]}")
        protos = None
        if self.prototype_v is not None:
            protos = int(self.prototype_v.shape[0])
        return HeadSpec(
            in_dim=int(b[0].weight.shape[1]), out_dim=int(last.weight.shape[0]),
            hidden_dim=int(hidden[0].weight.shape[0]) if hidden else int(last.weight.shape[0]), depth=len(b),
            activation=(next(iter(acts)) if hidden else "identity") or "identity", norm=next(iter(norms)) if hidden else None,
            bias=bias, last_norm=last.norm, prototypes=protos,
            freeze_prototype_norm=bool(self.prototype_g is None or torch.all(self.prototype_g == 1)),
        )

    def state_dict(self, spec: HeadSpec) -> dict[str, Tensor]:
        """The tensors in GeometricHead's key names (``mlp.fcN``, ``mlp.normN``, ``mlp.last_norm``,
        ``prototypes.parametrizations.weight.original0/1``); a bias the spec has but the MLP
        lacks is zero (the same outputs)."""
        out: dict[str, Tensor] = {}
        n = len(self.blocks)
        for i, blk in enumerate(self.blocks):
            out[f"mlp.fc{i}.weight"] = blk.weight
            if linear_bias(spec.bias, blk.norm):
                out[f"mlp.fc{i}.bias"] = blk.bias if blk.bias is not None else torch.zeros_like(blk.weight[:, 0])
            norm_name = "last_norm" if i == n - 1 else f"norm{i}"
            for k, v in blk.norm_state.items():
                out[f"mlp.{norm_name}.{k}"] = v
        if self.prototype_v is not None:
            g = self.prototype_g if self.prototype_g is not None else self.prototype_v.norm(dim=1, keepdim=True)
            out["prototypes.parametrizations.weight.original0"] = g
            out["prototypes.parametrizations.weight.original1"] = self.prototype_v
        return out


# ---------------------------------------------------------------------- reading modules
def _norm_of(m: nn.Module) -> tuple[str, dict[str, Tensor]] | None:
    if isinstance(m, nn.BatchNorm1d):
        if m.eps != 1e-5:
            raise HeadConversionError(f"BatchNorm1d eps={m.eps}; a GeometricHead's is 1e-5")
        if not m.track_running_stats:
            raise HeadConversionError("BatchNorm1d without running statistics cannot be evaluated in eval mode")
        return ("batch" if m.affine else "batch_noaffine"), {k: v.detach() for k, v in m.state_dict().items()}
    if isinstance(m, nn.LayerNorm):
        if m.eps != 1e-5 or not m.elementwise_affine:
            raise HeadConversionError("LayerNorm with eps != 1e-5 or without affine parameters")
        return "layer", {k: v.detach() for k, v in m.state_dict().items()}
    return None


def _act_of(m: nn.Module) -> str | None:
    if isinstance(m, nn.GELU) and m.approximate != "none":
        raise HeadConversionError("GELU(approximate='tanh') has no GeometricHead activation name")
    for name, cls in ACTIVATIONS.items():
        if type(m) is cls and name != "swish":
            return name
    return None


def layout_from_modules(modules: Sequence[nn.Module], last_layer: nn.Module | None = None) -> MLPLayout:
    """The layout of a chain of modules (Linear, BatchNorm1d, LayerNorm, activations; anything
    else is a :class:`HeadConversionError`), and DINO's weight-normed ``last_layer`` if any."""
    blocks: list[Block] = []
    for m in modules:
        if isinstance(m, nn.Linear):
            blocks.append(Block(m.weight.detach(), None if m.bias is None else m.bias.detach()))
            continue
        if not blocks:
            raise HeadConversionError(f"the head starts with {type(m).__name__}, not a Linear")
        norm = _norm_of(m)
        if norm is not None:
            if blocks[-1].norm is not None or blocks[-1].act is not None:
                raise HeadConversionError(f"{type(m).__name__} after a norm or activation")
            blocks[-1].norm, blocks[-1].norm_state = norm
            continue
        act = _act_of(m)
        if act is None or blocks[-1].act is not None:
            raise HeadConversionError(f"a GeometricHead has no counterpart of {type(m).__name__} at this place")
        blocks[-1].act = act
    layout = MLPLayout(blocks)
    if last_layer is not None:
        layout.prototype_g, layout.prototype_v = _weight_norm_of(dict(last_layer.state_dict()), last_layer)
    return layout


def _weight_norm_of(state: Mapping[str, Tensor], module: nn.Module | None = None) -> tuple[Tensor | None, Tensor]:
    """(g, v) of a weight-normalised Linear: old-style ``weight_g/weight_v``, parametrized
    ``parametrizations.weight.original0/1``, or a plain ``weight`` (then g = None)."""
    for g_key, v_key in (("weight_g", "weight_v"), ("parametrizations.weight.original0", "parametrizations.weight.original1")):
        if g_key in state and v_key in state:
            g, v = state[g_key].detach(), state[v_key].detach()
            if g.shape != (v.shape[0], 1):
                raise HeadConversionError(f"weight norm over dim {g.shape}: only DINO's (per output unit, dim=0) is supported")
            return g, v
    if "weight" in state and "bias" not in state:
        return None, state["weight"].detach()
    raise HeadConversionError(f"the last layer has tensors {sorted(state)}; expected DINO's weight-normed Linear without bias")


# ---------------------------------------------------------------------- reading state dicts
def layout_from_state(state: Mapping[str, Tensor], activation: str, last_layer: Mapping[str, Tensor] | None = None) -> MLPLayout:
    """The layout of a ``nn.Sequential`` MLP's state dict with keys ``<index>.<tensor>``
    (prefix removed). Parameter-free modules leave gaps in the indices: each gap after a block
    is its activation (``activation``: the method's, as weights do not say which)."""
    by_index: dict[int, dict[str, Tensor]] = {}
    for key, value in state.items():
        idx, _, name = key.partition(".")
        if not idx.isdigit():
            raise HeadConversionError(f"key {key!r} is not '<index>.<tensor>' of an nn.Sequential")
        by_index.setdefault(int(idx), {})[name] = value
    blocks: list[Block] = []
    last_idx = None
    for idx in sorted(by_index):
        t = by_index[idx]
        gap = last_idx is not None and idx - last_idx > 1
        if gap and blocks:
            if blocks[-1].act is not None:
                raise HeadConversionError(f"two parameter-free modules before index {idx}; cannot tell the activation")
            blocks[-1].act = activation
        if "weight" in t and t["weight"].dim() == 2:
            blocks.append(Block(t["weight"], t.get("bias")))
        elif "running_mean" in t or "weight" in t:
            if not blocks or blocks[-1].norm is not None or blocks[-1].act is not None:
                raise HeadConversionError(f"a norm at index {idx} that does not follow a Linear")
            kind = "batch" if "running_mean" in t and "weight" in t else "batch_noaffine" if "running_mean" in t else "layer"
            blocks[-1].norm, blocks[-1].norm_state = kind, dict(t)
        else:
            raise HeadConversionError(f"index {idx} holds {sorted(t)}: neither a Linear nor a norm")
        last_idx = idx
    layout = MLPLayout(blocks)
    if last_layer is not None:
        layout.prototype_g, layout.prototype_v = _weight_norm_of(last_layer)
    return layout


# ---------------------------------------------------------------------- the documented forward
@torch.no_grad()
def reference_forward(layout: MLPLayout, x: Tensor, activation: str | None = None) -> Tensor:
    """The documented forward of the MLP (eval mode), with ``torch.nn.functional`` only:
    ``Linear → norm → act`` per block, then (DINO) ``normalize(·, dim=-1)`` and the
    weight-normalised prototypes ``x @ (g · v / ‖v‖)ᵀ``. Shapes: (B, in_dim) -> (B, out)."""
    for blk in layout.blocks:
        x = F.linear(x, blk.weight, blk.bias)
        s = blk.norm_state
        if blk.norm in ("batch", "batch_noaffine"):
            x = F.batch_norm(x, s["running_mean"], s["running_var"], s.get("weight"), s.get("bias"), training=False, eps=1e-5)
        elif blk.norm == "layer":
            x = F.layer_norm(x, (x.shape[-1],), s["weight"], s["bias"], eps=1e-5)
        if blk.act is not None:
            name = activation or blk.act
            x = _ACT_FN[name](x) if name in _ACT_FN else activation_layer(name)()(x)
    if layout.prototype_v is not None:
        v = layout.prototype_v
        g = layout.prototype_g if layout.prototype_g is not None else v.norm(dim=1, keepdim=True)
        x = F.linear(F.normalize(x, dim=-1, p=2), g * v / v.norm(dim=1, keepdim=True))
    return x


def compare_outputs(got: Tensor, want: Tensor) -> dict[str, Any]:
    """``{"max_abs_diff", "exact", "allclose"}`` of two outputs (allclose: rtol 1e-5, atol 1e-6)."""
    if got.shape != want.shape:
        return {"max_abs_diff": None, "exact": False, "allclose": False, "shapes": [list(got.shape), list(want.shape)]}
    return {"max_abs_diff": float((got - want).abs().max()), "exact": bool(torch.equal(got, want)),
            "allclose": bool(torch.allclose(got, want, rtol=1e-5, atol=1e-6))}


__all__ = ["Block", "HeadConversionError", "MLPLayout", "compare_outputs", "layout_from_modules", "layout_from_state",
           "reference_forward"]
