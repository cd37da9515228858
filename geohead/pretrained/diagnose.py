""":func:`diagnose_model`: the geometry report of any backbone + head + objective, and
:func:`diagnose_pretrained`, the same for a checkpoint trained anywhere (the paper's "foundation
models" analysis: does the head compress or expand augmentation orbits?).

The measurements are :mod:`geohead.diagnose`'s (escape curvature at collapse, H_eff at real
features, SLQ density, orbit invariance per family, collapse monitors, guillotine probes), and
the report has the same JSON layout (``format: geohead.diagnose/1``), so ``format_table`` and
``geohead report`` read it; it adds ``pretrained`` (what was read and the head check) and
``orbit_summary`` (the geometric mean of the width-corrected compression over the families and
the verdict ``"compresses"`` (> 1) or ``"expands"`` (< 1)).

Inputs: the data's uint8 RGB images, scaled to [0, 1] and passed through :class:`InputAdapter`:
the user's ``mean``/``std`` (default: the data's), and for a backbone that takes one channel the
luma of the RGB image (the orbit families act on RGB, hue included, before the conversion).
"""
from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Callable, Sequence

import torch
from torch import Tensor, nn

from geohead.diagnose import DiagnoseSettings, _Clock, _json_safe
from geohead.diagnose.verdict import orbit_summary
from geohead.errors import DivergedModelError
from geohead.pretrained.model import found_head


class InputAdapter(nn.Module):
    """``backbone((x - mean) / std)`` for RGB images ``x`` in [0, 1] (B, 3, H, W), converted to
    luma (B, 1, H, W) first when ``in_chans == 1``. Shapes: (B, 3, H, W) -> the backbone's (B, d),
    flattened to 2-D."""

    def __init__(self, backbone: nn.Module, mean: Sequence[float], std: Sequence[float], in_chans: int = 3) -> None:
        super().__init__()
        if in_chans not in (1, 3) or len(mean) != in_chans or len(std) != in_chans:
            raise ValueError(f"in_chans {in_chans} needs {in_chans} mean and std values, got mean={list(mean)}, std={list(std)}")
        self.backbone, self.in_chans = backbone, in_chans
        self.register_buffer("mean", torch.tensor(list(mean), dtype=torch.float32).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(list(std), dtype=torch.float32).view(1, -1, 1, 1))

    def forward(self, x: Tensor) -> Tensor:
        if self.in_chans == 1:
            from geohead.data.functional import rgb_to_gray

            x = rgb_to_gray(x)
        return self.backbone((x - self.mean) / self.std).flatten(1)


def _in_chans(backbone: nn.Module) -> int:
    conv = next((m for m in backbone.modules() if isinstance(m, nn.Conv2d)), None)
    return int(conv.in_channels) if conv is not None else 3


def diagnose_model(backbone: nn.Module, head: nn.Module, objective: str | nn.Module, *, data: str | os.PathLike = "shapes",
                   data_test: str | None = None, data_root: str | None = None, mean: Sequence[float] | None = None,
                   std: Sequence[float] | None = None, img_size: int = 32, teacher_head: nn.Module | None = None,
                   predictor: nn.Module | None = None, settings: DiagnoseSettings | None = None,
                   progress: Callable[[str], None] | str | None = "auto", source: dict[str, Any] | None = None,
                   objective_state: dict[str, Any] | None = None) -> dict[str, Any]:
    """The geometry report (module docstring) of ``backbone`` (any ``nn.Module``: images (B, C,
    S, S) -> features, flattened to (B, d)) and ``head`` (any ``nn.Module`` (B, d) -> (B, k): d
    and k are found by a forward on real features, :func:`~geohead.pretrained.model.found_head`)
    under ``objective``. Non-finite or huge features raise
    :class:`~geohead.errors.DivergedModelError` (a ValueError) naming the model as diverged.

    Args:
        objective: a geohead objective name (``barlow``, ``vicreg``, ``dino``, ``simclr``,
            ``byol``, ``simsiam``) or a built :class:`~geohead.objectives.Objective`; a name is
            built with its paper defaults, sized to the head's output.
        data, data_test, data_root: images to measure on (default the built-in ``shapes``, as the
            CLI's; ``cifar10``, an .npz file, a folder), resized to ``img_size``; ``data_test``
            default: ``data``'s test split, or for one file a disjoint held-out part of it.
        mean, std: the normalisation the backbone was trained with (default: the data's; one
            value each for a grayscale backbone).
        teacher_head, predictor: DINO's teacher head, BYOL's predictor, where the method has one.
        settings: :class:`~geohead.diagnose.DiagnoseSettings` (``data*`` fields are ignored here).
        progress: ``"auto"`` (a bar with ETA when stderr is a terminal), ``"bar"``, None, or a
            callable given each stage's name.
        source: recorded under ``source`` (what the models came from).
        objective_state: what the checkpoint records of the objective (``dino_center``).
    Returns: the JSON-ready report (strict JSON: NaN as "nan").
    """
    from geohead.pretrained.backbone import check_model_inputs

    check_model_inputs(backbone, head, mean, std, teacher_head=teacher_head, predictor=predictor)
    s = (settings or DiagnoseSettings()).validate()
    from geohead.diagnose.progress import stage_sink
    from geohead.training.model import resolve_device

    device = resolve_device(s.device)  # "cuda" without CUDA is a ValueError that says so
    _objective_key(objective)  # a bad name fails before any data is made
    say = _Clock(stage_sink(progress, len(s.families), s.probes))
    say("data", "data")
    split = _probe_split(data, data_test, data_root, img_size, s)
    test, train = split.test, (split.train if s.probes else None)
    chans = _in_chans(backbone)
    mean, std, normalisation = _input_stats(mean, std, train or test, chans)
    enc = InputAdapter(backbone, mean, std, chans).to(device).eval()
    measured, found = found_head(enc, head.to(device).eval(), test.images[:8].float().div(255.0).to(device))
    obj = _objective(objective, measured, objective_state)
    teacher_head = teacher_head.to(device).eval() if teacher_head is not None else None
    predictor = predictor.to(device).eval() if predictor is not None else None
    try:
        parts = _curvature(enc, measured, obj, predictor, teacher_head, test, img_size, s, device, say)
        parts.update(_orbits_collapse_probes(enc, measured, test, train, s, device, say))
    except torch.linalg.LinAlgError as exc:
        raise DivergedModelError(f"the model's features are too ill-conditioned to measure ({str(exc).splitlines()[0]}); "
                                 "a diverged run: diagnose a checkpoint from before the divergence") from None
    parts["probe_split"], parts["found"], parts["normalisation"] = split.to_dict(), found, normalisation
    say("", None)
    return _json_safe(_assemble(source or {}, head, obj, predictor, teacher_head, enc, data, data_test, test, img_size, s,
                                parts, say.seconds))


def _input_stats(mean: Sequence[float] | None, std: Sequence[float] | None, data: Any,
                 chans: int) -> tuple[Sequence[float], Sequence[float], str]:
    """(mean, std, ``"given"``) when both are given, else the data's (``data.mean``/``std``; 0.5
    and 0.25 for a grayscale backbone) and ``"data"``: what the report records as ``normalisation``."""
    if mean is not None and std is not None:
        return mean, std, "given"
    return (list(data.mean), list(data.std), "data") if chans == 3 else ([0.5], [0.25], "data")


def _probe_split(data: Any, data_test: Any, data_root: Any, img_size: int, s: DiagnoseSettings) -> Any:
    """The probe's images by the one rule (:func:`geohead.probes.splits.probe_split`): a single
    file without ``data_test`` is split into disjoint probe-train and probe-test parts."""
    from geohead.data import load_dataset
    from geohead.probes.splits import probe_split

    def load(name: Any, train: bool, n: int | None) -> Any:
        return load_dataset(name, root=data_root, train=train, n=n, img_size=img_size, seed=s.seed)

    return probe_split(data, data_test, load, n_train=s.n_train, n_test=s.n_test, seed=s.seed)


def _objective_key(objective: str | nn.Module) -> str | None:
    """The registry key of an objective name (None for a built objective); an unknown name is a ValueError."""
    from geohead.objectives import OBJECTIVES
    from geohead.pretrained.layouts import METHOD_NAMES

    if not isinstance(objective, str):
        return None
    key = METHOD_NAMES.get(objective.lower(), objective.lower())
    if key not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; choose one of {sorted(OBJECTIVES)} (or pass an Objective)")
    return key


def _objective(objective: str | nn.Module, head: nn.Module, state: dict[str, Any] | None = None) -> nn.Module:
    """The objective: given, or built by name with its paper defaults sized to the head; for a
    trained model, DINO's teacher temperature is the final one (past the warm-up) and its centre
    the checkpoint's (``state["dino_center"]``) when recorded."""
    from geohead.objectives import get_objective, objective_for_head

    key = _objective_key(objective)
    if key is None:
        return objective
    out = getattr(head, "out_dim", None)  # a width the loss cannot take is refused before it is built
    obj = (objective_for_head(key, {}, out) if isinstance(out, int) else get_objective(key)).eval()
    if hasattr(obj, "set_epoch"):
        obj.set_epoch(float("inf"))
    center = (state or {}).get("dino_center")
    if isinstance(center, Tensor) and isinstance(getattr(obj, "center", None), Tensor) and center.shape == obj.center.shape:
        obj.center.copy_(center)
    return obj


def _curvature(enc: InputAdapter, head: nn.Module, obj: nn.Module, predictor: nn.Module | None, teacher: nn.Module | None,
               test: Any, img_size: int, s: DiagnoseSettings, device: torch.device, say: _Clock) -> dict[str, Any]:
    from geohead.data import make_view_fn
    from geohead.geometry import EffectiveHessian, EscapeSettings, escape_curvature, slq_density, spectrum_summary
    from geohead.geometry.summary import MODES

    say("escape curvature at collapse", "escape")
    settings = EscapeSettings(batch_size=s.collapse_batch, kind="complete", mode=s.mode, refine=s.refine)
    escape = escape_curvature(head, obj, settings=settings, predictor=predictor, teacher=teacher,
                              generator=torch.Generator().manual_seed(s.seed))
    say("H_eff at real features", "hessian")
    b = min(s.hessian_samples, len(test))
    recipe = getattr(obj, "name", "simclr") or "simclr"
    view_fn = make_view_fn(recipe, img_size=img_size, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))
    views = view_fn(test.images[:b].to(device), torch.Generator(device=device).manual_seed(s.seed))
    with torch.no_grad():
        z1, z2 = enc(views[0]).float(), enc(views[1]).float()
    eh = EffectiveHessian(head, obj, z1, z2, predictor=predictor, teacher=teacher, bn_mode="eval", dtype=MODES[s.mode]["dtype"])
    hess = spectrum_summary(eh, mode=s.mode, generator=torch.Generator().manual_seed(s.seed))
    dens = slq_density(eh.H, num_probes=s.density_probes, num_steps=s.density_steps, generator=torch.Generator().manual_seed(s.seed))
    return {"escape": escape.to_dict(), "hessian": hess.to_dict(), "density": dens.to_dict(), "hessian_samples": b}


def _orbits_collapse_probes(enc: InputAdapter, head: nn.Module, test: Any, train: Any, s: DiagnoseSettings,
                            device: torch.device, say: _Clock) -> dict[str, Any]:
    from geohead.data import ORBIT_FAMILIES
    from geohead.training.evaluate import probe_targets
    from geohead.features import extract
    from geohead.geometry import collapse_monitors, orbit_invariance
    from geohead.probes import guillotine_report

    n_orb = min(s.n_orbit_images, len(test))
    images01 = test.images[:n_orb].float().div(255.0).to(device)
    encode = torch.no_grad()(lambda x: enc(x.to(device, torch.float32)).float())
    orbits = {}
    for name in s.families:
        fam = ORBIT_FAMILIES[name]
        say(f"orbits: {name}", "orbits")
        orbits[name] = orbit_invariance(encode, head, images01, fam.fn, fam.params, labels=test.labels[:n_orb],
                                        generator=torch.Generator().manual_seed(s.seed), tangent_orbits=s.tangent_orbits).to_dict()
        orbits[name]["description"] = fam.description
    say("collapse monitors", "collapse")
    zero, one = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    fb_te, fh_te = extract(enc, head, test.images, zero, one, device)
    collapse = {"backbone": collapse_monitors(fb_te).to_dict(), "head": collapse_monitors(fh_te).to_dict()}
    probes = None
    if s.probes and train is not None:
        say("guillotine probes", "probes")
        fb_tr, fh_tr = extract(enc, head, train.images, zero, one, device)
        probes = guillotine_report(fb_tr, fh_tr, fb_te, fh_te, probe_targets(train, test),
                                   probes=("knn", "linear") if s.linear else ("knn",)).to_dict()
    return {"orbits": orbits, "collapse": collapse, "probes": probes, "n_orbit_images": n_orb}


def _is_identity(head: nn.Module) -> bool:
    spec = getattr(head, "spec", None)
    w = getattr(getattr(getattr(head, "mlp", None), "fc0", None), "weight", None)
    return bool(spec is not None and spec.depth == 1 and spec.in_dim == spec.out_dim and w is not None
                and torch.equal(w.detach().cpu(), torch.eye(spec.in_dim)))


def _assemble(source: dict[str, Any], head: nn.Module, obj: nn.Module, predictor: Any, teacher: Any, enc: InputAdapter,
              data: Any, data_test: Any, test: Any, img_size: int, s: DiagnoseSettings, parts: dict[str, Any],
              seconds: dict[str, float]) -> dict[str, Any]:
    spec = getattr(head, "spec", None)
    cfg = getattr(enc.backbone, "geohead_config", {}) or {}
    report = {
        "format": "geohead.diagnose/1",
        "source": {"checkpoint": source.get("source"), "objective": getattr(obj, "name", type(obj).__name__), "step": None,
                   "total_steps": None, "backbone": cfg.get("name") or type(enc.backbone).__name__,
                   "backbone_dim": parts["collapse"]["backbone"].get("dim"),
                   "head_spec": spec.to_dict() if spec is not None else {"module": type(head).__name__},
                   "head": parts["found"]["head"], "head_dims": [parts["found"]["in_dim"], parts["found"]["out_dim"]],
                   "predictor_spec": predictor.spec.to_dict() if hasattr(predictor, "spec") else None,
                   "teacher": teacher is not None, "trained_on": None},
        "data": {"name": str(data), "test": str(data_test or data), "n_test": len(test), "img_size": img_size,
                 "probe_split": parts["probe_split"],
                 "n_orbit_images": parts["n_orbit_images"], "hessian_samples": parts["hessian_samples"],
                 "mean": enc.mean.flatten().tolist(), "std": enc.std.flatten().tolist(), "in_chans": enc.in_chans,
                 "normalisation": parts["normalisation"]},
        "settings": {**dataclasses.asdict(s), "families": list(s.families)},
        **{k: parts[k] for k in ("escape", "hessian", "density", "orbits", "collapse", "probes")},
        "orbit_summary": orbit_summary(parts["orbits"]) if not _is_identity(head) else
        {"geometric_mean": 1.0, "head": None, "families": len(parts["orbits"]), "note": "identity head: no head measured"},
        "pretrained": source or None,
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
    }
    return report


def identity_head(dim: int) -> nn.Module:
    """A linear GeometricHead (dim -> dim, no bias) with W = I: the identity as a head, for a
    backbone measured alone. Shapes: (B, dim) -> (B, dim)."""
    from geohead.heads import GeometricHead

    head = GeometricHead(dim, dim, depth=1, bias=False)
    with torch.no_grad():
        head.mlp.fc0.weight.copy_(torch.eye(dim))
    return head.eval()


def _preprocessing(pt: Any, img_size: int | None, mean: Sequence[float] | None,
                   std: Sequence[float] | None) -> tuple[int, Sequence[float] | None, Sequence[float] | None]:
    """The input side and normalisation to diagnose ``pt`` with: the given ones, else what the
    checkpoint records (a ViT's own size, a Lightning module's hyper-parameters), else 32 pixels
    and the data's mean/std (None), each default warned about and noted in ``pt.layout.notes``."""
    import warnings

    from geohead.pretrained.load import recorded_normalisation

    cfg = pt.backbone.geohead_config
    size = cfg.get("model_args", {}).get("img_size") or img_size or (
        cfg["img_size"] if cfg.get("img_size_source") != "default" else None)
    assumed = [] if size else ["input size 32 pixels (give --img-size, img_size=)"]
    if mean is None or std is None:
        mean, std = recorded_normalisation(pt.layout)
        if mean is None:
            assumed.append("the data's own mean/std (give --mean and --std, mean= and std=)")
    if assumed:
        note = f"assumed: {' and '.join(assumed)}: the checkpoint does not record what it was trained with"
        pt.layout.notes.append(note)
        warnings.warn(note, UserWarning, stacklevel=3)
    return int(size or 32), mean, std


def diagnose_pretrained(path: str | os.PathLike, *, architecture: str | None = None, method: str | None = None,
                        activation: str | None = None, model_args: dict[str, Any] | None = None,
                        img_size: int | None = None, data: str = "shapes", data_test: str | None = None,
                        data_root: str | None = None, mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
                        settings: DiagnoseSettings | None = None,
                        progress: Callable[[str], None] | str | None = "auto") -> dict[str, Any]:
    """:func:`~geohead.pretrained.load_pretrained` then :func:`diagnose_model` (images at the
    backbone's img_size: a ViT's own, else ``img_size``, else the checkpoint's recorded one, else 32)."""
    from geohead.pretrained.load import load_pretrained
    from geohead.pretrained.read import PretrainedError

    t0 = time.perf_counter()
    pt = load_pretrained(path, architecture=architecture, method=method, activation=activation, model_args=model_args,
                         img_size=img_size)
    if pt.head is None:
        if pt.method is None:
            raise PretrainedError(f"{str(path)!r} holds a backbone only (layout {pt.layout.name}); the head geometry needs a "
                                  "head (geohead.diagnose_model(backbone, head, objective=...) with the head you trained); "
                                  "pass --method to measure the backbone alone, under that objective, with the identity head")
        pt.head = identity_head(int(pt.backbone.geohead_config["num_features"]))
        pt.layout.notes.append("no head in the checkpoint: measured with the identity head (a linear GeometricHead with "
                               "W = I), so the head's numbers are the backbone's and orbit compression is 1")
    from geohead.objectives import OBJECTIVES

    if pt.method is not None and OBJECTIVES[pt.method].predictor_preset is not None and pt.predictor is None:
        raise PretrainedError(f"{pt.method} needs its predictor, and {str(path)!r} holds none under "
                              "prediction_head. / predictor.; give a checkpoint with it, or another --method")
    if pt.method is None:
        raise PretrainedError(f"{str(path)!r} (layout {pt.layout.name}) does not say which SSL method trained it; pass "
                              "--method (barlow, vicreg, simclr, byol, simsiam, dino)")
    size, mean, std = _preprocessing(pt, img_size, mean, std)
    record = {**pt.describe(), "load_seconds": round(time.perf_counter() - t0, 3)}
    record["backbone"]["img_size"] = size
    return diagnose_model(pt.backbone, pt.head, pt.method, data=data, data_test=data_test, data_root=data_root, mean=mean,
                          std=std, img_size=size, teacher_head=pt.teacher_head, predictor=pt.predictor, settings=settings,
                          progress=progress,
                          source=record, objective_state=pt.layout.meta)


__all__ = ["InputAdapter", "diagnose_model", "diagnose_pretrained", "identity_head", "orbit_summary"]
