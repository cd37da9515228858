"""What every trial of one worker shares, prepared once by :func:`prepare_trial_inputs`.

The training data (loaded once; every trial trains on it) and its probe splits, the training
config every trial starts from, the initial backbone (built by
:func:`geohead.training.model.seeded_models`, as :func:`geohead.training.loop.train` builds it) with its
BatchNorm calibrated on two views of a batch and its features of those views, tangents of a few
orbits, the collapsed state around the real feature mean, whether Thm 4.1's premise holds there
(:mod:`geohead.search.escape`), and the search space scaled to the backbone's feature dimension d.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch import Tensor, nn

from geohead.heads import HeadSpec
from geohead.search.config import SearchConfig, SearchError, base_train_config
from geohead.search.criteria import EvalInputs, ScreenInputs, calibrate_batchnorm
from geohead.search.escape import reference_premise
from geohead.search.space import SearchSpace, parse_constraints

if TYPE_CHECKING:
    from geohead.geometry import EscapePremise

#: Orbits whose tangents the screen (2) and the trained criteria (8) use (5 tangents each with the
#: 7-point sweeps); the Fisher rank costs one forward-mode product per tangent direction.
SCREEN_TANGENT_IMAGES = 2
TANGENT_IMAGES = 8
#: Samples of the collapsed state at which the screen measures the escape curvature.
COLLAPSED_BATCH = 16
#: Spread of the collapsed state around the real feature mean, relative to the per-dimension std.
COLLAPSED_SPREAD = 1e-2
#: The search's heads have at most this many prototypes per backbone dimension (DINO; see
#: :func:`_capped_prototypes`).
PROTOTYPES_PER_DIM = 4


@dataclasses.dataclass
class TrialInputs:
    """Everything a worker's trials share (see the module docstring).

    Attributes:
        device: where trials train and are measured.
        base: the training config of every trial, as a dict (each trial adds its head and ``out``).
        base_spec: the recipe's head for the objective: the fields the search does not choose.
        screen_inputs: what the screen at init needs.
        eval_inputs: what the trained criteria need.
        space: the search space, ``--fix``/``--range`` applied.
        premise: Thm 4.1's premise for the objective (whether the escape criterion is on).
        data: the training set every trial trains on (:func:`geohead.training.model.training_data` of ``base``).
    """

    device: torch.device
    base: dict[str, Any]
    base_spec: HeadSpec
    screen_inputs: ScreenInputs
    eval_inputs: EvalInputs
    space: SearchSpace
    premise: EscapePremise
    data: Any = None

    @property
    def in_dim(self) -> int:
        """The backbone's feature dimension d."""
        return self.base_spec.in_dim


@dataclasses.dataclass
class _InitialBackbone:
    """What the search keeps of the initial backbone: features of two views, tangents, the objective."""

    objective: nn.Module
    head_spec: HeadSpec
    views: tuple[Tensor, Tensor]
    z1: Tensor
    z2: Tensor
    tangents: dict[str, tuple[Tensor, Tensor]]


def prepare_trial_inputs(cfg: SearchConfig, echo: Callable[[str], None]) -> TrialInputs:
    """Load the data and measure the initial backbone for ``cfg``'s trials (a few seconds on CPU).

    Raises :class:`SearchError` for data that cannot be read or is too small, a bad ``--set``,
    and ``--score knn`` without labels; ``echo`` receives notes (a probe split held out of a file).
    """
    from geohead.training.model import resolve_device

    device = resolve_device(cfg.device)
    data = _training_data(cfg)
    base, base_cfg = base_train_config(cfg, len(data))  # the schedule's epochs need the data's size
    probe_train, probe_test = _probe_splits(cfg, data, echo)
    has_labels = int(torch.unique(probe_train.labels).numel()) > 1
    if cfg.score == "knn" and not has_labels:
        raise SearchError("--score knn needs labelled data with at least 2 classes; use the default label-free score")
    orbit_images = probe_train.images[: cfg.orbit_images].float() / 255.0
    init = _initial_backbone(cfg, base_cfg, data, orbit_images[:SCREEN_TANGENT_IMAGES], device)
    capped = _capped_prototypes(base, init.head_spec)
    if capped is not None:  # rebuilt from the same seed: the same backbone, the objective at the capped width
        base, base_cfg = capped
        init = _initial_backbone(cfg, base_cfg, data, orbit_images[:SCREEN_TANGENT_IMAGES], device)
    in_dim = init.head_spec.in_dim
    screen_inputs = ScreenInputs(init.objective, init.z1, init.z2, _collapsed_state(init.objective, init.z1, in_dim, cfg), init.tangents,
                                 functools.partial(base_cfg.head.resolve_predictor, cfg.objective), seed=cfg.seed,
                                 spread=COLLAPSED_SPREAD)
    eval_inputs = EvalInputs(
        train_images=probe_train.images, train_labels=probe_train.labels if has_labels else None,
        test_images=probe_test.images, test_labels=probe_test.labels if has_labels else None,
        orbit_images=orbit_images, view_batch=init.views, mean=tuple(data.mean), std=tuple(data.std),
        families=tuple(cfg.families), seed=cfg.seed, tangent_images=TANGENT_IMAGES,
    )
    fixed, ranged = parse_constraints(cfg.fix, cfg.ranges)
    space = SearchSpace.default(in_dim).constrain(fixed, ranged)
    premise = reference_premise(init.objective, init.head_spec, init.z1, screen_inputs.collapsed,
                                screen_inputs.predictor_spec, cfg.seed, COLLAPSED_SPREAD)
    return TrialInputs(device, base, init.head_spec, screen_inputs, eval_inputs, space, premise, data)


def _capped_prototypes(base: dict[str, Any], spec: HeadSpec) -> tuple[dict[str, Any], Any] | None:
    """The base config with the head's prototypes capped at :data:`PROTOTYPES_PER_DIM` · d, or
    None when they are within it or the user set them (``--set head.spec.prototypes=K``).

    DINO's paper head has K = 65536 prototypes (ImageNet); on the CPU default backbone (d = 128)
    that layer alone costs ~2 s per step, so a default 390-s search would train one head. Every other
    width of the search is capped at 4·d (:mod:`geohead.search.space`,
    :mod:`geohead.search.reference`); the prototypes follow the same rule (512 at d = 128, the
    CPU recipe's; 2048 at d = 512, where solo-learn's CIFAR recipe uses 4096)."""
    from geohead.training.config import config_from_dict

    user = dict(base.get("head", {}).get("spec", {}))
    cap = PROTOTYPES_PER_DIM * spec.in_dim
    if spec.prototypes is None or spec.prototypes <= cap or "prototypes" in user:
        return None
    capped = {**base, "head": {**base.get("head", {}), "spec": {**user, "prototypes": cap}}}
    return capped, config_from_dict(capped)


def _training_data(cfg: SearchConfig) -> Any:
    """The training images (``--data``), at least one batch of them: the training set of the
    trials' config (:func:`geohead.training.model.training_data`), loaded once for every trial."""
    from geohead.training.model import training_data

    _, stand_in = base_train_config(cfg, max(cfg.n_train or 0, 10 * cfg.batch_size))  # the data fields only
    try:
        data = training_data(stand_in)
    except (ValueError, FileNotFoundError) as exc:
        raise SearchError(f"--data {cfg.data!r}: {exc}") from None
    if len(data) < cfg.batch_size:
        raise SearchError(f"--data has {len(data)} images, fewer than --batch-size {cfg.batch_size}; lower the batch size")
    return data


def _probe_splits(cfg: SearchConfig, data: Any, echo: Callable[[str], None]) -> tuple[Any, Any]:
    """(probe train, probe test) by the one rule (:func:`geohead.probes.splits.probe_split`): the
    training data's first images vs ``--test`` or the built-in dataset's test split; for a file
    without ``--test``, disjoint parts of it."""
    from geohead.data import load_dataset
    from geohead.probes.splits import probe_split

    def load(name: Any, train: bool, n: int | None) -> Any:
        what = "--test" if cfg.test is not None else "test split of"
        try:
            return load_dataset(name, root=cfg.data_root, download=cfg.download, train=train, n=n,
                                img_size=cfg.img_size, seed=cfg.seed)
        except (ValueError, FileNotFoundError) as exc:
            raise SearchError(f"{what} {str(name)!r}: {exc}") from None

    split = probe_split(cfg.data, cfg.test, load, n_train=cfg.probe_train, n_test=cfg.probe_test, seed=cfg.seed, data=data)
    if split.held_out:
        echo(f"note: no --test given; kNN is measured on {len(split.test)} held-out images of {cfg.data} "
             "(they are also in the unlabelled training set; the probe trains on others); pass --test for a separate split")
    return split.train, split.test


def _initial_backbone(cfg: SearchConfig, base_cfg: Any, data: Any, tangent_images: Tensor,
                      device: torch.device) -> _InitialBackbone:
    """The backbone as train() builds it (:func:`geohead.training.model.seeded_models`), BatchNorm
    calibrated on two views of the first ``screen_batch`` images; its features of those views
    and the tangents of the orbits of ``tangent_images`` (float [0, 1])."""
    from geohead.data import make_view_fn
    from geohead.features import image_encoder
    from geohead.training.model import seeded_models

    try:
        model, objective, head_spec, _ = seeded_models(base_cfg)  # as train() builds it
    except ValueError as exc:  # an unknown backbone name, an image size it cannot take, bad model args
        what = f"--backbone {cfg.backbone!r}" if cfg.backbone else "the backbone"
        raise SearchError(f"{what}: {exc}") from None
    backbone = model.backbone.to(device)
    recipe = base_cfg.data.views or cfg.objective
    view_fn = make_view_fn(recipe, img_size=cfg.img_size, mean=data.mean, std=data.std, **base_cfg.data.view_args)
    batch = data.images[: cfg.screen_batch].to(device)
    views = view_fn(batch, torch.Generator(device=device).manual_seed(cfg.seed))[:2]
    cl = bool(backbone.geohead_config.get("channels_last"))
    if cl:
        views = [v.contiguous(memory_format=torch.channels_last) for v in views]
    calibrate_batchnorm(backbone, views)
    with torch.no_grad():
        z1, z2 = (backbone(v).float().cpu() for v in views)
    to_device = image_encoder(backbone, data.mean, data.std, device, channels_last=cl)

    def encode(x01: Tensor) -> Tensor:
        return to_device(x01).cpu()

    tangents = _tangents(cfg.families, encode, tangent_images)
    return _InitialBackbone(objective, head_spec, (views[0].cpu(), views[1].cpu()), z1, z2, tangents)


def _tangents(families: tuple[str, ...], encode: Callable[[Tensor], Tensor],
              images: Tensor) -> dict[str, tuple[Tensor, Tensor]]:
    """Orbit family -> (base points, tangents) in backbone space of the orbits of ``images``."""
    from geohead.data import ORBIT_FAMILIES
    from geohead.geometry.orbits import build_orbits
    from geohead.geometry.tangents import orbit_tangents

    tangents = {}
    for name in families:
        fam = ORBIT_FAMILIES[name]
        orb = build_orbits(encode, nn.Identity(), images, fam.fn, fam.params)
        tangents[name] = orbit_tangents(orb)
    return tangents


def _collapsed_state(objective: nn.Module, z1: Tensor, in_dim: int, cfg: SearchConfig) -> tuple[Tensor, Tensor]:
    """Two batches of the collapsed state (the objective's construction): centred on the real
    feature mean, the noise :data:`COLLAPSED_SPREAD` times the per-dimension std (seeded)."""
    gen = torch.Generator().manual_seed(cfg.seed)
    bc = min(COLLAPSED_BATCH, cfg.screen_batch)
    mu, sd = z1.double().mean(0), z1.double().std(0).clamp_min(1e-6)
    state = objective.collapsed_state(bc, in_dim, spread=COLLAPSED_SPREAD, generator=gen, center=mu, scale=sd)
    return state.z1.float(), state.z2.float()


__all__ = ["COLLAPSED_BATCH", "SCREEN_TANGENT_IMAGES", "TANGENT_IMAGES", "TrialInputs", "prepare_trial_inputs"]
