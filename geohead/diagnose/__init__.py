"""The geometry report of a trained backbone + head: ``geohead diagnose RUN_OR_CKPT``.

:func:`diagnose` composes the library's measurements on the models of one checkpoint, and
records exactly what each call returned (``to_dict()`` of its result):

* ``escape`` — :func:`geohead.geometry.escape_curvature` of the head (+ predictor, teacher head)
  at the objective's complete collapsed state: H_eff = G + M, the objective's own curvature, and
  the head's share along the escape direction (Thm 4.1);
* ``hessian`` — :func:`geohead.geometry.spectrum_summary` of an
  :class:`~geohead.geometry.EffectiveHessian` at *real* backbone features (two training views of
  a test batch): λ_min, λ_max, negatives, ‖M‖_F/‖H‖_F; ``density`` —
  :func:`geohead.geometry.slq_density` of the same H_eff (what ``geohead report`` plots);
* ``orbits`` — :func:`geohead.geometry.orbit_invariance` per augmentation family of
  :data:`geohead.data.ORBIT_FAMILIES`: the width-invariant compression beside the paper's
  ``paper_l2`` / ``paper_var``, tangent invariance and the Fisher-rank loss;
* ``collapse`` — :func:`geohead.geometry.collapse_monitors` of backbone features and head
  embeddings of the test split;
* ``probes`` — the guillotine report (:func:`geohead.training.evaluate.run_probes`: kNN / linear probes for
  the class and the data's nuisance factors, backbone vs head).

Every random choice is seeded (:class:`DiagnoseSettings.seed`), models run in eval mode (BN on
running statistics; ``bn_mode="eval"`` everywhere), inputs are normalised with the training
data's mean/std. Reproducing a number by hand means calling the same function with the same
inputs (see ``tests/test_diagnose.py``, which does exactly that).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor

from geohead.errors import DivergedModelError, NonFiniteError
from geohead.training.checkpoint import Checkpoint, load_checkpoint
from geohead.training.model import TrainedModels, load_trained, resolve_device


@dataclasses.dataclass
class DiagnoseSettings:
    """Knobs of :func:`diagnose` (all recorded in the report).

    Attributes:
        data, data_root, data_test: images to measure on; default the checkpoint's training data
            (``data_test``: its test source; a file or folder ``data`` without ``data_test`` is
            split into disjoint probe-train and probe-test parts, :mod:`geohead.probes.splits`).
        n_test: test images (collapse monitors, probe test set); n_train: probe training images.
        n_orbit_images: images per orbit family (each gives P views, P = the family's sweep).
        tangent_orbits: the tangent invariance and Fisher rank from the first this many orbits
            (one forward-mode product per tangent direction each: on a 2048-wide head the cost and
            memory of the orbits stage; None: all ``n_orbit_images``). The default 8 is the
            search's; the orbit spreads and the compression use every orbit.
        hessian_samples: batch size B of the H_eff at real features (its dimension is B·d: the
            default 32 keeps a ResNet-18's (d = 512) at 16384, half the former 64's cost).
        collapse_batch: batch size B of the collapsed state (H_eff there is B·d-dimensional, float64
            in accurate mode: the default 8 keeps a ResNet-18's at 4096, a quarter of the former 16's cost).
        refine: L-BFGS iterations that look for a collapsed equilibrium near the drawn state
            (used instead of it when one is found; 0 measures the drawn state as it is).
        mode: ``"accurate"`` (float64, converged Lanczos) or ``"fast"`` (float32, screening).
        density_probes, density_steps: stochastic Lanczos quadrature of the spectral density.
        families: orbit families (names in ORBIT_FAMILIES); probes: run the guillotine probes;
        linear: add linear probes to the kNN probes.
        seed: seeds every generator; device: "auto", "cpu", "cuda[:k]".
    """

    data: str | None = None
    data_root: str | None = None
    data_test: str | None = None
    n_test: int = 1000
    n_train: int = 2000
    n_orbit_images: int = 64
    tangent_orbits: int | None = 8
    hessian_samples: int = 32
    collapse_batch: int = 8
    refine: int = 50
    mode: str = "accurate"
    density_probes: int = 4
    density_steps: int = 40
    families: tuple[str, ...] = ("rotate", "hue", "saturation", "blur", "crop")
    probes: bool = True
    linear: bool = True
    seed: int = 0
    device: str = "cpu"

    def validate(self) -> "DiagnoseSettings":
        from geohead.data.orbits import ORBIT_FAMILIES
        from geohead.geometry.summary import MODES, hessian_size_problem

        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} is not one of {list(MODES)}")
        bad = [f for f in self.families if f not in ORBIT_FAMILIES]
        if bad:
            raise ValueError(f"unknown orbit families {bad}; choose from {list(ORBIT_FAMILIES)}")
        twice = sorted(f for f, n in Counter(self.families).items() if n > 1)
        if twice:
            raise ValueError(f"orbit families {twice} are named more than once; name each once (each is measured once)")
        if not self.families:
            raise ValueError(f"no orbit families given; name at least one of {list(ORBIT_FAMILIES)} (e.g. --families rotate,hue)")
        _check_bounds(self)
        for key in ("n_test", "n_train", "n_orbit_images", "density_probes", "density_steps"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
        if self.tangent_orbits is not None and self.tangent_orbits < 1:
            raise ValueError(f"tangent_orbits must be >= 1 or None (all orbits), got {self.tangent_orbits}")
        if self.refine < 0:
            raise ValueError(f"refine must be >= 0 (L-BFGS iterations), got {self.refine}")
        for key in ("hessian_samples", "collapse_batch"):
            if getattr(self, key) < 2:
                raise ValueError(f"{key} must be >= 2 (a batch objective needs two samples), got {getattr(self, key)}")
        problem = hessian_size_problem({"hessian_samples": self.hessian_samples, "collapse_batch": self.collapse_batch},
                                       {"density_steps": self.density_steps, "density_probes": self.density_probes})
        if problem:
            raise ValueError(problem)
        return self


def _check_bounds(s: DiagnoseSettings) -> None:
    """Image counts and the seed within geohead's bounds (:func:`geohead.data.loaders.size_problem`), before any data is made."""
    from geohead.data.loaders import MAX_SEED, size_problem

    problem = next(filter(None, (size_problem(getattr(s, k), None, k) for k in ("n_test", "n_train", "n_orbit_images"))), None)
    if problem:
        raise ValueError(problem)
    if isinstance(s.seed, bool) or not isinstance(s.seed, int) or not 0 <= s.seed <= MAX_SEED:
        raise ValueError(f"seed must be an integer from 0 to 2^62, got {s.seed!r}; give a smaller seed")


def _config(meta: dict[str, Any], s: DiagnoseSettings):
    """The run's TrainConfig with the data and probe settings of this diagnosis."""
    from geohead.training.config import ConfigError, config_from_dict

    d = json.loads(json.dumps(meta.get("config") or {}))
    bad = [k for k, v in (("config", d), *((f"config.{k}", d.get(k)) for k in ("head", "data", "probe") if isinstance(d, dict)))
           if v is not None and not isinstance(v, dict)]
    if bad:
        raise ValueError(f"the checkpoint's {bad[0]} is not a table: it was edited or not written by geohead train; "
                         "use the checkpoint its run wrote")
    d.setdefault("head", {})["file"] = None  # the head comes from the checkpoint's head_spec
    for key in ("track", "optim"):  # training's logging and optimiser: not used here (and bounded tighter than older runs were)
        d.pop(key, None)
    data = d.setdefault("data", {})
    if s.data is not None:
        data.update(name=s.data, test=s.data_test, root=s.data_root)
    elif s.data_test is not None:
        data["test"] = s.data_test
    if s.data_root is not None:
        data["root"] = s.data_root
    d["probe"] = {**d.get("probe", {}), "enabled": True, "n_train": s.n_train, "n_test": s.n_test, "linear": s.linear}
    bins = d["probe"].get("factor_bins", 4)
    if d["probe"].get("factors", True) and isinstance(bins, int) and 2 <= bins and s.n_train < bins:
        raise ValueError(f"--n-train {s.n_train} is below the run's probe.factor_bins ({bins}): its factor probes bin that "
                         f"many images; give --n-train {bins} or more")
    try:
        return config_from_dict(d)
    except ConfigError as exc:
        raise ValueError(f"the checkpoint's training config does not validate with this geohead: {exc}") from None


def _json_safe(x: Any) -> Any:
    """NaN/inf -> strings "nan"/"inf"/"-inf" so the report is strict JSON."""
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def real_feature_batch(tm: TrainedModels, images: Tensor, mean, std, cfg, seed: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Backbone features (B, d) of two training views of ``images`` (uint8, B images).

    The views come from the run's view recipe (``data.views`` or the objective's, with
    ``data.view_args``), drawn with ``torch.Generator(device).manual_seed(seed)``; the backbone
    runs in eval mode, without gradients; features are float32.
    """
    from geohead.data import make_view_fn

    view_fn = make_view_fn(cfg.data.views or cfg.objective, img_size=cfg.data.img_size, mean=mean, std=std,
                           **dict(getattr(cfg.data, "view_args", {}) or {}))
    gen = torch.Generator(device=device).manual_seed(seed)
    views = view_fn(images.to(device), gen)
    if tm.channels_last:
        views = [v.contiguous(memory_format=torch.channels_last) for v in views]
    with torch.no_grad():
        return tm.model.backbone(views[0]).float(), tm.model.backbone(views[1]).float()


class _Clock:
    """Seconds spent per part, and the progress before each part: a line for a callable
    ``progress(msg)``, a step of the bar for a :class:`~geohead.diagnose.progress.StageBar`."""

    def __init__(self, progress: Callable[[str], None] | None) -> None:
        from geohead.diagnose.progress import StageBar

        self.progress, self.seconds = progress, {}
        self.bar = isinstance(progress, StageBar)
        self.t, self.part = time.perf_counter(), None

    def __call__(self, msg: str, part: str | None = None) -> None:
        now = time.perf_counter()
        if self.part is not None:
            self.seconds[self.part] = self.seconds.get(self.part, 0.0) + now - self.t
        self.t, self.part = now, part
        if self.bar:
            self.progress(msg, part)
        elif self.progress is not None and msg:
            self.progress(msg)


def diagnose(source: str | os.PathLike | Checkpoint, settings: DiagnoseSettings | None = None,
             progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The geometry report of a checkpoint (see the module docstring); a JSON-ready dict.

    ``progress`` (optional) is called with a short string before each part.
    """
    from geohead.data import load_dataset
    from geohead.training.evaluate import run_probes

    from geohead.diagnose.progress import stage_sink

    s = (settings or DiagnoseSettings()).validate()
    device = resolve_device(s.device)
    ck = source if isinstance(source, Checkpoint) else load_checkpoint(source)
    tm = load_trained(ck, device)
    cfg = _config(tm.meta, s)
    normalisation(tm.meta)  # a header without it is refused before any measurement

    say = _Clock(stage_sink(progress, len(s.families), s.probes))
    say("data", "data")  # first, so that a bad --data fails before any measurement
    split, train_data = _split(cfg, s)
    test = split.test
    try:
        parts = _curvature(tm, test, cfg, s, device, say)
        parts.update(_orbits_and_collapse(tm, test, s, device, say))
    except (torch.linalg.LinAlgError, NonFiniteError) as exc:
        raise DivergedModelError(f"the model has diverged: its features are non-finite or too ill-conditioned to measure "
                                 f"({str(exc).splitlines()[0]}); diagnose a checkpoint from before the divergence") from None
    parts["probes"] = None
    if s.probes:
        say("guillotine probes", "probes")
        parts["probes"] = run_probes(cfg, tm.model, train_data, device, load_dataset)
    parts["probe_split"] = split.to_dict()
    say("", None)
    return _json_safe(_assemble(ck, tm, cfg, s, test, parts, say.seconds))


def _split(cfg: Any, s: DiagnoseSettings) -> tuple[Any, Any]:
    """The probe split of ``cfg``'s data (:func:`geohead.probes.splits.probe_split`, the one
    :func:`~geohead.training.evaluate.run_probes` makes again from the same images) and those
    training images: ``n_train`` of a source with a test split, ``n_train + n_test`` of one file."""
    from geohead.data import load_dataset
    from geohead.probes.splits import has_test_split, probe_split, same_source

    def load(name: Any, train: bool, n: int | None) -> Any:
        return load_dataset(name, root=cfg.data.root, train=train, download=False, n=n, img_size=cfg.data.img_size,
                            seed=cfg.seed)

    separate = has_test_split(cfg.data.name) or (cfg.data.test is not None and not same_source(cfg.data.name, cfg.data.test))
    data = load(cfg.data.name, True, s.n_train if separate else s.n_train + s.n_test)
    split = probe_split(cfg.data.name, cfg.data.test, load, n_train=s.n_train, n_test=s.n_test, seed=cfg.seed, data=data)
    return split, data


def _curvature(tm: TrainedModels, test: Any, cfg: Any, s: DiagnoseSettings, device: torch.device,
               say: _Clock) -> dict[str, Any]:
    """``escape`` (at the complete collapsed state), ``hessian`` and ``density`` (H_eff at two
    training views of the first ``hessian_samples`` test images)."""
    from geohead.geometry import EffectiveHessian, EscapeSettings, escape_curvature, slq_density, spectrum_summary
    from geohead.geometry.summary import MODES

    head, pred, teacher_head = tm.model.head, tm.predictor, tm.teacher_head
    say("escape curvature at collapse", "escape")
    settings = EscapeSettings(batch_size=s.collapse_batch, kind="complete", mode=s.mode, refine=s.refine)
    escape = escape_curvature(head, tm.objective, settings=settings, predictor=pred, teacher=teacher_head,
                              generator=torch.Generator().manual_seed(s.seed))
    say("H_eff at real features", "hessian")
    b = min(s.hessian_samples, len(test))
    mean, std = normalisation(tm.meta)  # the training normalisation, whatever the data
    z1, z2 = real_feature_batch(tm, test.images[:b], mean, std, cfg, s.seed, device)
    eh = EffectiveHessian(head, tm.objective, z1, z2, predictor=pred, teacher=teacher_head, bn_mode="eval",
                          dtype=MODES[s.mode]["dtype"])
    hess = spectrum_summary(eh, mode=s.mode, generator=torch.Generator().manual_seed(s.seed))
    dens = slq_density(eh.H, num_probes=s.density_probes, num_steps=s.density_steps,
                       generator=torch.Generator().manual_seed(s.seed))
    return {"escape": escape.to_dict(), "hessian": hess.to_dict(), "density": dens.to_dict(), "hessian_samples": b}


def _orbits_and_collapse(tm: TrainedModels, test: Any, s: DiagnoseSettings, device: torch.device,
                         say: _Clock) -> dict[str, Any]:
    """``orbits`` per augmentation family on the first ``n_orbit_images`` test images, and the
    ``collapse`` monitors of backbone features and head embeddings of the test split."""
    from geohead.data import ORBIT_FAMILIES
    from geohead.features import extract, image_encoder
    from geohead.geometry import collapse_monitors, orbit_invariance

    mean, std = normalisation(tm.meta)
    n_orb = min(s.n_orbit_images, len(test))
    images01 = test.images[:n_orb].float() / 255.0
    encode = image_encoder(tm.model.backbone, mean, std, device, channels_last=tm.channels_last)
    orbits = {}
    for name in s.families:
        fam = ORBIT_FAMILIES[name]
        say(f"orbits: {name}", "orbits")
        orbits[name] = orbit_invariance(encode, tm.model.head, images01.to(device), fam.fn, fam.params,
                                        labels=test.labels[:n_orb], generator=torch.Generator().manual_seed(s.seed),
                                        tangent_orbits=s.tangent_orbits).to_dict()
        orbits[name]["description"] = fam.description
    say("collapse monitors", "collapse")
    feats, embs = extract(tm.model.backbone, tm.model.head, test.images, mean, std, device, channels_last=tm.channels_last)
    collapse = {"backbone": collapse_monitors(feats).to_dict(), "head": collapse_monitors(embs).to_dict()}
    return {"orbits": orbits, "collapse": collapse, "n_orbit_images": n_orb}


def _assemble(ck: Checkpoint, tm: TrainedModels, cfg: Any, s: DiagnoseSettings, test: Any, parts: dict[str, Any],
              seconds: dict[str, float]) -> dict[str, Any]:
    """The report's JSON layout (``format: geohead.diagnose/1``)."""
    from geohead.diagnose.verdict import orbit_summary

    meta, bb = tm.meta, tm.meta["backbone"]
    report = {
        "format": "geohead.diagnose/1",
        "source": {
            "checkpoint": str(ck.path), "objective": meta["objective"], "step": meta.get("step"),
            "total_steps": meta.get("total_steps"), "backbone": bb.get("name"), "backbone_dim": bb.get("num_features"),
            "head_spec": meta["head_spec"], "predictor_spec": meta.get("predictor_spec"),
            "teacher": tm.teacher is not None, "trained_on": meta.get("data"),
        },
        "data": {"name": cfg.data.name, "test": cfg.data.test or cfg.data.name, "n_test": len(test),
                 "probe_split": parts["probe_split"],
                 "n_orbit_images": parts["n_orbit_images"], "hessian_samples": parts["hessian_samples"],
                 **dict(zip(("mean", "std"), normalisation(meta)))},
        "settings": dataclasses.asdict(s),
        **{k: parts[k] for k in ("escape", "hessian", "density", "orbits", "collapse", "probes")},
        "orbit_summary": orbit_summary(parts["orbits"]),
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
    }
    report["settings"]["families"] = list(s.families)
    return report


def normalisation(meta: dict[str, Any]) -> tuple[Any, Any]:
    """(mean, std) a checkpoint's run trained with (its ``data`` metadata); ``ValueError`` when it
    records none (a header geohead train did not write, even under a checksum that holds)."""
    data = meta.get("data") if isinstance(meta.get("data"), dict) else {}
    if data.get("mean") is None or data.get("std") is None:
        raise ValueError("the checkpoint records no training normalisation (data.mean, data.std); it was not written "
                         "by geohead train")
    return data["mean"], data["std"]


def default_json_path(source: str | os.PathLike) -> Path:
    """``RUN/diagnose.json`` for a run folder, ``<ckpt>.diagnose.json`` beside a checkpoint file."""
    p = Path(source)
    return p / "diagnose.json" if p.is_dir() else p.with_name(p.stem + ".diagnose.json")


from geohead.diagnose.table import fmt, format_table  # noqa: E402  (re-exported: the report's table)

__all__ = ["DiagnoseSettings", "default_json_path", "diagnose", "fmt", "format_table", "real_feature_batch"]
