"""Training configuration: nested dataclasses, TOML recipes, ``--set key=value`` overrides.

A recipe is a TOML file whose top-level keys and tables mirror :class:`TrainConfig`::

    objective = "barlow"
    [objective_args]   lambd = 0.0051
    [data]             name = "cifar10"
    [backbone]         name = "resnet18_cifar"
    [head]             preset = "barlow"; hidden_dim = 2048; out_dim = 2048
    [optim]            name = "lars"; lr = 0.3; epochs = 200
    [track] / [probe]

Unknown keys and bad values fail before anything is built, with the key, the bad value and
the allowed values in the message (:class:`ConfigError`).
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from geohead.heads import HeadSpec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib
from geohead.data.loaders import MAX_IMG_SIZE, MAX_SEED, size_problem, source_error  # noqa: E402  (MAX_SEED: shapes seeds are 2·seed + 1)
from geohead.geometry.summary import hessian_size_problem  # noqa: E402
from geohead.io import read_small, shorten, too_deep  # noqa: E402
from geohead.training.config_types import MAX_NESTING, ConfigError, build, choice, lookup, non_finite  # noqa: E402


OPTIMIZERS = ("lars", "sgd", "adamw")
#: Upper bounds on what sizes a loop or an allocation (epochs and steps of a schedule, the global
#: batch, the factor probes' bins), checked before anything is built.
MAX_EPOCHS, MAX_STEPS, MAX_BATCH, MAX_FACTOR_BINS = 100_000, 10 ** 9, 65_536, 1_000
PRECISIONS = ("auto", "fp32", "bf16")
DEVICES = ("auto", "cpu", "cuda")


@dataclass
class DataConfig:
    """Where images come from and how views are made."""

    name: str = "shapes"
    """``"shapes"`` (built-in), ``"cifar10"``, ``"cifar100"``, or a path to an .npz / image folder."""
    root: Optional[str] = None
    """Root folder for torchvision datasets."""
    n_train: Optional[int] = None
    """Use only the first n training images (None: all)."""
    test: Optional[str] = None
    """Evaluation data for probes: a name or path; None: the same source's test split."""
    n_test: Optional[int] = None
    img_size: int = 32
    views: Optional[str] = None
    """View recipe (``simclr``, ``byol``, ``simsiam``, ``barlow``, ``vicreg``, ``dino``); None: the objective's."""
    view_args: dict = field(default_factory=dict)
    """ViewSpec fields that override the recipe for every view, e.g. ``{rotation = 45, gray_p = 0.0}``."""
    download: bool = False


@dataclass
class BackboneConfig:
    name: Optional[str] = None
    """A geohead or timm backbone name; None: the small CPU default of :mod:`geohead.backbones`."""
    args: dict = field(default_factory=dict)
    """Extra keyword arguments for the backbone (timm model_args)."""
    channels_last: Optional[bool] = None
    """Channels-last memory format; None: the backbone's default (on for ResNets)."""
    sync_batchnorm: bool = False
    """Convert BatchNorm to SyncBatchNorm under torch.distributed (the methods' multi-GPU practice)."""


@dataclass
class HeadConfig:
    """The projection head: a preset with overrides, or a HeadSpec JSON file (``--head``)."""

    preset: Optional[str] = None
    """A preset name (default: the objective's standard head)."""
    smooth: bool = True
    """Replace the head preset's ReLU with SiLU (the predictor stays the method's, see ``predictor``)."""
    file: Optional[str] = None
    """A HeadSpec JSON (e.g. the search's best_head.json); replaces ``preset`` and ``spec``."""
    spec: dict = field(default_factory=dict)
    """HeadSpec fields that override the preset (``hidden_dim``, ``out_dim``, ``depth``, ...)."""
    predictor: dict = field(default_factory=dict)
    """HeadSpec fields that override the predictor preset (BYOL, SimSiam). The predictor is the
    method's published one (ReLU) whatever the head's ``smooth``: it is part of the method, not
    the projection head under study (``activation = "silu"`` here swaps it)."""
    init_scale: float = 1.0
    """Multiply the weights of the head's Linear layers by this factor after initialisation
    (the paper's "pseudo-collapsed" start of Fig. 3 uses 0.1); the predictor is left as built."""

    def resolve(self, objective: str, in_dim: int) -> "HeadSpec":
        """The head's :class:`HeadSpec` for backbone features of dimension ``in_dim``."""
        from geohead.heads import HeadSpec, preset_spec
        from geohead.objectives import OBJECTIVES

        if self.file is not None:  # a spec found on another backbone keeps its widths as multiples of d
            return HeadSpec.load(self.file).rescale(in_dim)
        preset = self.preset or OBJECTIVES[objective].head_preset
        return preset_spec(preset, in_dim, smooth=self.smooth, **self.spec)

    def resolve_predictor(self, objective: str, dim: int) -> "HeadSpec | None":
        """The predictor's :class:`HeadSpec` (BYOL, SimSiam) on embeddings of width ``dim``, else None:
        the method's published predictor (ReLU; not ``smooth``) with the ``predictor`` overrides."""
        from geohead.objectives import OBJECTIVES

        return OBJECTIVES[objective].predictor_spec(dim, **self.predictor)


@dataclass
class OptimConfig:
    name: str = "lars"
    lr: float = 0.3
    """Base learning rate for a batch of 256; the rate used is ``lr * batch_size / 256``."""
    weight_decay: float = 1e-4
    momentum: float = 0.9
    betas: tuple = (0.9, 0.999)
    lars_trust_coeff: float = 0.02
    batch_size: int = 256
    """Global batch (split over processes under torch.distributed)."""
    epochs: float = 100
    max_steps: Optional[int] = None
    """Stop after this many steps (the schedule still spans ``epochs``)."""
    warmup_epochs: float = 10
    final_lr_ratio: float = 0.0
    grad_clip: Optional[float] = None


@dataclass
class TrackConfig:
    log_every: int = 10
    """Steps between loss/lr lines in metrics.jsonl."""
    monitor_every: int = 50
    """Steps between collapse monitors (RankMe, std of normalised embeddings; 0: off)."""
    hessian_every: int = 0
    """Steps between effective-Hessian extremes (costs HVPs; 0: off)."""
    hessian_samples: int = 64
    """Samples of the batch used for the Hessian."""
    hessian_iters: int = 20
    """Lanczos iterations per Hessian evaluation."""
    ckpt_every: int = 0
    """Steps between checkpoints (0: at the end of every epoch)."""
    progress: bool = True
    tensorboard: bool = False
    """TensorBoard event files of metrics.jsonl's numbers in the run folder (needs the tensorboard package)."""


@dataclass
class ProbeConfig:
    enabled: bool = True
    n_train: Optional[int] = 10000
    n_test: Optional[int] = 10000
    knn_k: int = 20
    knn_t: float = 0.07
    linear: bool = True
    factors: bool = True
    """Probe the data's nuisance factors too (the guillotine report)."""
    factor_bins: int = 4


@dataclass
class TrainConfig:
    objective: str = "barlow"
    objective_args: dict = field(default_factory=dict)
    seed: int = 0
    device: str = "auto"
    precision: str = "auto"
    """``auto``: bf16 autocast on CUDA, fp32 on CPU."""
    compile: bool = False
    out: Optional[str] = None
    """Run folder (default ``runs/<objective>``)."""
    data: DataConfig = field(default_factory=DataConfig)
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    head: HeadConfig = field(default_factory=HeadConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    track: TrackConfig = field(default_factory=TrackConfig)
    probe: ProbeConfig = field(default_factory=ProbeConfig)

    # ------------------------------------------------------------------ validation
    def validate(self) -> "TrainConfig":
        from geohead.heads import PRESETS
        from geohead.objectives import OBJECTIVES, get_objective

        choice("objective", self.objective, tuple(OBJECTIVES))
        for key in ("out", "data.name", "data.test", "data.root", "head.file"):  # paths: no file name holds a NUL
            path = str(lookup(self, key) or "")
            if "\x00" in path:
                raise ConfigError(f"{key} = {shorten(path)!r} holds a NUL character, which no path can; "
                                  "give the path without it")
        bad = non_finite(self, "")
        if bad is not None:
            raise ConfigError(f"{bad} = {lookup(self, bad)!r} is not a finite number; give a finite value")
        choice("device", self.device.split(":")[0], DEVICES)
        choice("precision", self.precision, PRECISIONS)
        choice("optim.name", self.optim.name, OPTIMIZERS)
        if self.head.preset is not None:
            choice("head.preset", self.head.preset, PRESETS)
        if self.head.file is not None and not Path(self.head.file).is_file():
            raise ConfigError(f"head.file {self.head.file!r} does not exist (give the path of a HeadSpec JSON)")
        try:  # build the specs once with a stand-in width so bad head keys fail before training
            spec = self.head.resolve(self.objective, 8)
            self.head.resolve_predictor(self.objective, spec.output_dim)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"[head]: {exc}") from None
        try:  # its arguments with the stand-in head width 8 (e.g. DINO's prototypes); the real width is sized at build
            get_objective(self.objective, **OBJECTIVES[self.objective].args_for_head(self.objective_args, spec.output_dim))
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"[objective_args]: {exc}") from None
        if self.data.views is not None:
            choice("data.views", self.data.views, tuple(OBJECTIVES))
        self._check_views()
        self._check_numbers()
        self._check_ranges()
        self._check_backbone_args()
        if self.track.tensorboard and importlib.util.find_spec("tensorboard") is None:
            raise ConfigError("track.tensorboard = true needs the tensorboard package: pip install tensorboard, or set it false")
        if self.optim.max_steps is not None and self.optim.max_steps < 1:
            raise ConfigError(f"optim.max_steps must be >= 1 or unset, got {self.optim.max_steps}")
        return self

    def _check_views(self) -> None:
        """Valid ``data.view_args``, no view's side above the image bound, and a ``data.test`` that
        names a dataset (checked before training, not first at the probes)."""
        from geohead.data.view_recipes import get_recipe

        try:
            size = max(v.size for v in get_recipe(self.data.views or self.objective).replace(**self.data.view_args).views)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"[data.view_args]: {exc}") from None
        if self.data.img_size is not None and size * self.data.img_size > MAX_IMG_SIZE:
            raise ConfigError(f"[data.view_args]: size={size} makes views of {size * self.data.img_size:.0f} pixels from "
                              f"data.img_size={self.data.img_size}, above {MAX_IMG_SIZE}; give size <= "
                              f"{MAX_IMG_SIZE / self.data.img_size:g}")
        if self.data.test is not None and (problem := source_error(self.data.test)) is not None:
            raise ConfigError(f"data.test: {problem}")

    def _check_numbers(self) -> None:
        """Sizes and rates in range, each error naming its key."""
        positive = {
            "optim.batch_size": self.optim.batch_size, "optim.lr": self.optim.lr, "optim.epochs": self.optim.epochs,
            "data.img_size": self.data.img_size, "track.log_every": self.track.log_every,
            "head.init_scale": self.head.init_scale,
            "probe.knn_k": self.probe.knn_k, "probe.knn_t": self.probe.knn_t, "probe.factor_bins": self.probe.factor_bins,
        }
        for key, value in positive.items():
            if not value > 0:
                raise ConfigError(f"{key} must be > 0, got {value!r}")
        nonneg = {
            "optim.weight_decay": self.optim.weight_decay, "optim.warmup_epochs": self.optim.warmup_epochs,
            "track.monitor_every": self.track.monitor_every, "track.hessian_every": self.track.hessian_every,
            "track.ckpt_every": self.track.ckpt_every, "optim.final_lr_ratio": self.optim.final_lr_ratio,
        }
        for key, value in nonneg.items():
            if not value >= 0:
                raise ConfigError(f"{key} must be >= 0, got {value!r}")
        optional = {"data.n_train": self.data.n_train, "data.n_test": self.data.n_test,
                    "probe.n_train": self.probe.n_train, "probe.n_test": self.probe.n_test,
                    "track.hessian_samples": self.track.hessian_samples, "track.hessian_iters": self.track.hessian_iters}
        for key, value in optional.items():
            if value is not None and not value >= 1:
                raise ConfigError(f"{key} must be a positive integer (or unset), got {value!r}")
        problem = hessian_size_problem({"track.hessian_samples": self.track.hessian_samples},
                                       {"track.hessian_iters": self.track.hessian_iters})
        if problem:
            raise ConfigError(problem)
        for key in ("data.n_train", "data.n_test", "probe.n_train", "probe.n_test"):
            problem = size_problem(lookup(self, key), self.data.img_size, key, "data.img_size")
            if problem:
                raise ConfigError(problem)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= MAX_SEED:
            raise ConfigError(f"seed must be an integer from 0 to 2^62, got {self.seed!r}; give a smaller seed")

    def _check_ranges(self) -> None:
        """Schedules, batch and factor bins within their bounds; optimiser settings that can train
        (a negative clip would reverse the gradients, AdamW needs two betas in [0, 1))."""
        o, bins = self.optim, self.probe.factor_bins
        upper = {"optim.epochs": (o.epochs, MAX_EPOCHS), "optim.warmup_epochs": (o.warmup_epochs, MAX_EPOCHS),
                 "optim.max_steps": (o.max_steps or 1, MAX_STEPS), "optim.batch_size": (o.batch_size, MAX_BATCH)}
        for key, (value, bound) in upper.items():
            if value > bound:
                raise ConfigError(f"{key} must be at most {bound:,}, got {value!r}")
        if self.probe.enabled and self.probe.factors:  # the factor probes bin probe.n_train images
            top = min(MAX_FACTOR_BINS, self.probe.n_train or MAX_FACTOR_BINS)
            if not 2 <= bins <= top:
                raise ConfigError(f"probe.factor_bins must be from 2 to {top:,}"
                                  f"{' (probe.n_train)' if top == self.probe.n_train else ''}, got {bins!r}")
        if not 0 <= o.momentum < 1:
            raise ConfigError(f"optim.momentum must be in [0, 1), got {o.momentum!r}")
        if o.grad_clip is not None and not o.grad_clip >= 0:
            raise ConfigError(f"optim.grad_clip must be >= 0 (0: no clipping), got {o.grad_clip!r}")
        betas = o.betas
        if (not isinstance(betas, (list, tuple)) or len(betas) != 2
                or not all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1 for b in betas)):
            raise ConfigError(f"optim.betas must be two numbers in [0, 1) (AdamW's), e.g. [0.9, 0.999], got {betas!r}")

    def _check_backbone_args(self) -> None:
        """backbone.args reach timm.create_model: a recipe (often someone else's file) may pass
        only plain architecture arguments, no weights, paths or network options."""
        from geohead.backbones import check_model_args

        try:
            check_model_args(self.backbone.args)
        except ValueError as exc:
            raise ConfigError(f"[backbone.args]: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, default=list)

    @property
    def out_dir(self) -> Path:
        return Path(self.out or f"runs/{self.objective}").expanduser()  # as folder_problem checks it


# ---------------------------------------------------------------------- recipes and overrides
def config_from_dict(d: dict[str, Any]) -> TrainConfig:
    """Build and validate a :class:`TrainConfig` from nested dicts (a parsed recipe)."""
    return build(TrainConfig, d, "").validate()


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"optim.lr=0.1"`` -> (["optim", "lr"], 0.1); the value is parsed as TOML, else a string."""
    if "=" not in text:
        raise ConfigError(f"override {shorten(text)!r} must look like key=value (e.g. optim.lr=0.1)")
    key, _, raw = text.partition("=")
    key, raw = key.strip(), raw.strip()
    if not key:
        raise ConfigError(f"override {shorten(text)!r} has an empty key")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    except RecursionError:  # deeper than the parser goes (TOML has no null: None marks it)
        value = None
    if value is None or too_deep(value, MAX_NESTING):
        raise ConfigError(f"override {key}=...: its value nests deeper than {MAX_NESTING} levels; give a flat value")
    return key.split("."), value


def apply_overrides(d: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key=value`` overrides to a nested recipe dict (copied)."""
    out = json.loads(json.dumps(d))
    for text in overrides:
        path, value = parse_override(text)
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {shorten(text)!r}: {part!r} is not a table")
        node[path[-1]] = value
    return out


def load_recipe(recipe: str | Path, overrides: list[str] | None = None) -> TrainConfig:
    """Read a TOML recipe, apply overrides, validate; raises :class:`ConfigError`.

    ``recipe`` is a path to a TOML file, or the name of a recipe shipped in the package
    (``"barlow_shapes_cpu"``, see :func:`packaged_recipes`), so that ``geohead train NAME`` works
    from an installed wheel; an existing file of that name wins.
    """
    label, raw = _recipe_bytes(recipe)
    try:
        d = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"recipe {label!r} is not UTF-8 text (byte {exc.start}); save it as UTF-8 TOML") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"recipe {label!r} is not valid TOML: {exc}") from None
    except RecursionError:  # deeper than the parser goes
        d = None
    if d is None or too_deep(d, MAX_NESTING):
        raise ConfigError(f"recipe {label!r} nests tables or arrays deeper than {MAX_NESTING} levels; it is not a "
                          "geohead recipe (see geohead/recipes/*.toml)")
    if not d:
        raise ConfigError(f"recipe {label!r} is empty; a recipe names at least its objective "
                          "(objective = \"barlow\"), see geohead/recipes/*.toml")
    return config_from_dict(apply_overrides(d, overrides or []))


def packaged_recipes() -> list[str]:
    """The names of the recipes shipped in the package (geohead/recipes, package-data), sorted."""
    return sorted(f.name[: -len(".toml")] for f in (resources.files("geohead") / "recipes").iterdir() if f.name.endswith(".toml"))


def _recipe_bytes(recipe: str | Path) -> tuple[str, bytes]:
    """(how to name it in messages, its bytes) of a recipe file or packaged recipe name."""
    path = Path(recipe)
    if path.is_file():
        return str(path), read_small(path, "recipe", "a recipe is a short TOML file (geohead/recipes/*.toml)", ConfigError)
    name = path.name[: -len(".toml")] if path.suffix == ".toml" else path.name
    known = packaged_recipes()
    if len(path.parts) == 1 and name in known:  # a bare name (or NAME.toml): the packaged recipe
        return name, (resources.files("geohead") / "recipes" / f"{name}.toml").read_bytes()
    if path.suffix == ".toml" or len(path.parts) > 1:
        hint = f"; the packaged recipe {name!r} is `geohead train {name}`" if name in known else ""
        raise ConfigError(f"recipe {str(path)!r} does not exist{hint}")
    raise ConfigError(f"unknown recipe {str(recipe)!r}: give a TOML file or the name of a packaged recipe, "
                      f"one of {known}")
