"""The Optuna study: settings, one trial (screen -> train -> criteria -> score), workers, resume.

Every trial trains with the *same* seed (backbone initialisation, batch order and views), so
trials differ only by their head: common random numbers, which is what makes criteria and kNN
accuracy comparable across ~30 short trials. The seed is recorded with every trial.

A trial:

1. samples a head from the :class:`~geohead.search.space.SearchSpace` (TPE by default,
   NSGA-II with ``multi``, or random);
2. screens it at init (:func:`~geohead.search.criteria.screen`): a head that cannot escape
   collapse *and* has a badly conditioned H_eff is PRUNED before any training;
3. trains backbone + head with :func:`geohead.train.train` for ``steps`` steps, reporting the
   backbone's RankMe / d at every epoch end to Optuna's median pruner (single-objective studies
   only: Optuna does not prune multi-objective ones);
4. measures the trained criteria (:func:`~geohead.search.criteria.trained_criteria`) and returns
   the label-free score (default), kNN accuracy (``score="knn"``), or the four normalised criteria
   (``multi``).

A NaN/inf loss or criterion, or any other error inside a trial, makes the trial FAIL (reason in
its ``fail_reason`` attribute) and the study goes on. A trial that samples a head an earlier trial
completed returns that trial's measurements without training again (``duplicate_of``): under
the common seed the result would be identical. ``trials`` counts finished trials of the study (complete, pruned, failed), so
rerunning the same command resumes a study until it holds ``trials`` of them; a FAIL that was
retried (its worker died) is replaced by its retry.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import os
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from geohead.search.criteria import (
    DEFAULT_FAMILIES, SCORE_CRITERIA, EvalInputs, ScreenInputs, TrialDiverged, calibrate_batchnorm, geometric_score,
    score_components, screen, screen_verdict, trained_criteria,
)
from geohead.search.space import DIMENSIONS, SearchSpace, parse_constraints

SCORES = ("geometry", "knn")
SAMPLERS = ("tpe", "random", "nsga2")
BUILTIN_DATA = ("shapes", "cifar10", "cifar100")
#: View overrides used on the built-in shapes data unless ``--set data.view_args...`` says otherwise.
#: Shapes draws the object's hue uniformly over the whole colour circle, independent of the class,
#: so the recipes' ±0.1 hue jitter leaves colour as a shortcut: Barlow Twins on shapes with the
#: standard views ends *below* the random-init backbone's class kNN (measured: 0.156 vs 0.172
#: after the 6-epoch shapes recipe), and with full hue jitter it learns the class within 100 steps.
SHAPES_VIEW_ARGS: dict[str, Any] = {"hue": 0.5}
#: Orbits whose tangents the screen (2) and the trained criteria (8) use (5 tangents each with the
#: 7-point sweeps); the Fisher rank costs one forward-mode product per tangent direction.
SCREEN_TANGENT_IMAGES = 2
#: Samples of the collapsed state at which the screen measures the escape curvature.
COLLAPSED_BATCH = 16
TANGENT_IMAGES = 8


class SearchError(ValueError):
    """Bad search settings (a value that cannot work, with the fix in the message)."""


class TrialError(RuntimeError):
    """A trial raised an unexpected error: Optuna records it as FAIL and the study goes on."""


@dataclasses.dataclass
class SearchConfig:
    """Settings of ``geohead search`` (the defaults are the README's CPU command).

    Attributes (study identity: the settings a resumed study must share are in :meth:`identity`):
        objective: SSL objective name.
        out: output folder (default ``runs/search_<objective>``).
        data, test: training data (name or path) and probe test data (None: the built-in
            dataset's test split, or a held-out part of a file).
        data_root, download: folder of torchvision's CIFAR files (None: ``$GEOHEAD_DATA`` or
            ``~/.cache/geohead/data``) and whether torchvision may download them there.
        n_train: training images (None: the dataset's default / all).
        img_size, backbone: image side, backbone name (None: the small CPU default).
        steps, batch_size: per-trial training budget.
        trials: finished trials the study should hold; timeout: seconds after which no new trial
            starts (None: no limit); workers: local processes sharing the storage.
        storage, study: Optuna storage (see :mod:`geohead.search.storage`) and study name.
        seed, device: the common seed of every trial; ``auto``/``cpu``/``cuda``.
        score: ``geometry`` (label-free, default) or ``knn``; multi: NSGA-II over the four
            normalised criteria; sampler: ``tpe``/``random``/``nsga2`` (None: tpe, or nsga2 with multi).
        fix, ranges: ``--fix``/``--range`` entries; overrides: ``--set`` entries for the training config.
        probe_train, probe_test, orbit_images, families, screen_batch: sizes of the measurements.
        prune: screen and median pruning on; prune_stable_rank: H_eff stable rank at the real
            features below which a head that cannot escape collapse is pruned at the screen.
        heartbeat: seconds between heartbeats of a running trial (RDB storages).
        keep_checkpoints: keep every trial's last.ckpt (default: deleted once the trial is measured;
            ``geohead train --head best_head.json`` retrains the winner at full length).
        progress: a progress bar per trial (one worker only).
    """

    objective: str = "barlow"
    out: str | None = None
    data: str = "shapes"
    test: str | None = None
    data_root: str | None = None
    download: bool = False
    n_train: int | None = None
    img_size: int = 32
    backbone: str | None = None
    steps: int = 100
    batch_size: int = 256
    trials: int = 100
    timeout: float | None = 480.0
    workers: int = 1
    storage: str | None = None
    study: str | None = None
    seed: int = 0
    device: str = "auto"
    score: str = "geometry"
    multi: bool = False
    sampler: str | None = None
    fix: tuple[str, ...] = ()
    ranges: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    probe_train: int = 5000
    probe_test: int = 2000
    orbit_images: int = 64
    families: tuple[str, ...] = DEFAULT_FAMILIES
    screen_batch: int = 256
    prune: bool = True
    prune_stable_rank: float = 2.0
    heartbeat: int = 20
    keep_checkpoints: bool = False
    progress: bool = True

    # ------------------------------------------------------------------ derived
    @property
    def out_dir(self) -> Path:
        return Path(self.out or f"runs/search_{self.objective}")

    @property
    def study_name(self) -> str:
        if self.study:
            return self.study
        data = Path(self.data).stem if self.data not in BUILTIN_DATA else self.data
        return f"{self.objective}-{data}-{self.backbone or 'default'}" + ("-multi" if self.multi else "")

    @property
    def sampler_name(self) -> str:
        return self.sampler or ("nsga2" if self.multi else "tpe")

    def identity(self) -> dict[str, Any]:
        """The settings every trial of one study must share (a resumed study checks them)."""
        keys = ("objective", "data", "test", "n_train", "img_size", "backbone", "steps", "batch_size", "seed",
                "score", "multi", "fix", "ranges", "overrides", "probe_train", "probe_test", "orbit_images",
                "families", "screen_batch", "prune", "prune_stable_rank")
        d = dataclasses.asdict(self)
        return {k: (list(d[k]) if isinstance(d[k], tuple) else d[k]) for k in keys}

    def validate(self) -> "SearchConfig":
        from geohead.objectives import OBJECTIVES

        if self.objective not in OBJECTIVES:
            raise SearchError(f"unknown objective {self.objective!r}; choose one of {sorted(OBJECTIVES)}")
        if self.score not in SCORES:
            raise SearchError(f"unknown score {self.score!r}; choose one of {list(SCORES)}")
        if self.multi and self.score != "geometry":
            raise SearchError("--multi optimises the label-free criteria themselves; drop --score knn or --multi")
        if self.sampler is not None and self.sampler not in SAMPLERS:
            raise SearchError(f"unknown sampler {self.sampler!r}; choose one of {list(SAMPLERS)}")
        if self.device.split(":")[0] not in ("auto", "cpu", "cuda"):
            raise SearchError(f"unknown device {self.device!r}; use auto, cpu, cuda or cuda:K")
        positive = {"steps": self.steps, "batch_size": self.batch_size, "trials": self.trials, "workers": self.workers,
                    "img_size": self.img_size, "probe_train": self.probe_train, "probe_test": self.probe_test,
                    "orbit_images": self.orbit_images, "screen_batch": self.screen_batch, "heartbeat": self.heartbeat}
        for key, value in positive.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SearchError(f"--{key.replace('_', '-')} must be a positive integer, got {value!r}")
        if self.n_train is not None and self.n_train < self.batch_size:
            raise SearchError(f"--n-train {self.n_train} is smaller than --batch-size {self.batch_size}; raise it or lower the batch")
        if self.timeout is not None and not self.timeout > 0:
            raise SearchError(f"--timeout must be > 0 seconds (or 0 for no limit), got {self.timeout!r}")
        if self.screen_batch < 2:
            raise SearchError("--screen-batch must be at least 2")
        from geohead.data import ORBIT_FAMILIES

        bad = [f for f in self.families if f not in ORBIT_FAMILIES]
        if bad:
            raise SearchError(f"unknown orbit families {bad}; choose from {sorted(ORBIT_FAMILIES)}")
        parse_constraints(self.fix, self.ranges)  # raises SpaceError (a ValueError) with the fix
        for text in self.overrides:
            key = text.partition("=")[0].strip()
            if key in ("head.file", "head.preset", "head.spec") or key in {f"head.spec.{d}" for d in DIMENSIONS}:
                raise SearchError(f"--set {text!r}: the search chooses the head; use --fix/--range for its dimensions "
                                  "(--set head.spec.KEY is for fields it does not search, e.g. prototypes)")
            if key in ("out", "optim.max_steps", "probe.enabled"):
                raise SearchError(f"--set {text!r}: {key} is set by the search (use --out / --steps)")
        return self


@dataclasses.dataclass
class SearchResult:
    """What :func:`run_search` leaves: the output folder, the study and its summary (search.json)."""

    out_dir: Path
    study_name: str
    storage: str
    summary: dict[str, Any]
    table: str


# ---------------------------------------------------------------------- per-worker context
class TrialRunner:
    """Everything one worker needs to run trials: data, initial backbone features, the space."""

    def __init__(self, cfg: SearchConfig, worker: int = 0, echo: Callable[[str], None] | None = None) -> None:
        from geohead.config import ConfigError, apply_overrides, config_from_dict
        from geohead.data import ORBIT_FAMILIES, load_dataset, make_view_fn
        from geohead.features import image_encoder
        from geohead.geometry.orbits import build_orbits
        from geohead.geometry.tangents import orbit_tangents
        from geohead.train import build_models, resolve_device

        self.cfg = cfg
        self.worker = worker
        self.echo = echo or (lambda s: print(s, file=sys.stderr, flush=True))
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}"
        self.device = resolve_device(cfg.device)
        seed = cfg.seed
        try:
            data = load_dataset(cfg.data, root=cfg.data_root, download=cfg.download, train=True, n=cfg.n_train,
                                img_size=cfg.img_size, seed=seed)
        except (ValueError, FileNotFoundError) as exc:
            raise SearchError(f"--data {cfg.data!r}: {exc}") from None
        n = len(data)
        if n < cfg.batch_size:
            raise SearchError(f"--data has {n} images, fewer than --batch-size {cfg.batch_size}; lower the batch size")
        spe = n // cfg.batch_size
        epochs = cfg.steps / spe
        base: dict[str, Any] = {
            "objective": cfg.objective, "seed": seed, "device": cfg.device,
            "data": {"name": cfg.data, "root": cfg.data_root, "n_train": cfg.n_train, "img_size": cfg.img_size,
                     "view_args": dict(SHAPES_VIEW_ARGS) if cfg.data == "shapes" else {}},
            "backbone": {"name": cfg.backbone} if cfg.backbone else {},
            "optim": {"batch_size": cfg.batch_size, "max_steps": cfg.steps, "epochs": epochs, "warmup_epochs": 0.1 * epochs},
            "track": {"log_every": max(1, cfg.steps // 10), "monitor_every": 0, "ckpt_every": cfg.steps,
                      "progress": bool(cfg.progress and cfg.workers == 1)},
            "probe": {"enabled": False},
        }
        try:
            base = apply_overrides(base, list(cfg.overrides))
            base_cfg = config_from_dict(base)
        except ConfigError as exc:
            raise SearchError(f"--set: {exc}") from None
        self.base = base
        self.base_cfg = base_cfg

        # probe splits: the training data's first images vs the test split (or a held-out part)
        g = torch.Generator().manual_seed(seed)
        if cfg.test is None and cfg.data not in BUILTIN_DATA:
            perm = torch.randperm(n, generator=g)
            n_te = min(cfg.probe_test, n // 3)
            test = data.subset(perm[:n_te].sort().values)
            probe_tr = data.subset(perm[n_te:n_te + cfg.probe_train].sort().values)
            self.echo(f"note: no --test given; kNN is measured on {n_te} held-out images of {cfg.data} "
                      "(they are also in the unlabelled training set); pass --test for a separate split")
        else:  # --test, or the built-in dataset's own test split
            name, what = (cfg.test, "--test") if cfg.test is not None else (cfg.data, "test split of")
            try:
                test = load_dataset(name, root=cfg.data_root, download=cfg.download, train=False,
                                    n=cfg.probe_test, img_size=cfg.img_size, seed=seed)
            except (ValueError, FileNotFoundError) as exc:
                raise SearchError(f"{what} {name!r}: {exc}") from None
            probe_tr = data.subset(torch.arange(min(n, cfg.probe_train)))
        has_labels = int(torch.unique(probe_tr.labels).numel()) > 1
        if cfg.score == "knn" and not has_labels:
            raise SearchError("--score knn needs labelled data with at least 2 classes; use the default label-free score")

        # the initial backbone (exactly train()'s: same seed, built first), BN calibrated on two views
        torch.manual_seed(seed)
        model, objective, head_spec, _ = build_models(base_cfg)
        self.base_spec = head_spec
        self.in_dim = head_spec.in_dim
        backbone = model.backbone.to(self.device)
        recipe = base_cfg.data.views or cfg.objective
        view_fn = make_view_fn(recipe, img_size=cfg.img_size, mean=data.mean, std=data.std, **base_cfg.data.view_args)
        batch = data.images[: cfg.screen_batch].to(self.device)
        views = view_fn(batch, torch.Generator(device=self.device).manual_seed(seed))[:2]
        cl = bool(backbone.geohead_config.get("channels_last"))
        if cl:
            views = [v.contiguous(memory_format=torch.channels_last) for v in views]
        calibrate_batchnorm(backbone, views)
        with torch.no_grad():
            z1, z2 = (backbone(v).float().cpu() for v in views)
        to_device = image_encoder(backbone, data.mean, data.std, self.device, channels_last=cl)

        def encode(x01: torch.Tensor) -> torch.Tensor:
            return to_device(x01).cpu()

        orbit_imgs = probe_tr.images[: cfg.orbit_images].float() / 255.0
        tangents = {}
        for name in cfg.families:  # tangents of a few orbits (the Fisher rank costs a product per direction)
            fam = ORBIT_FAMILIES[name]
            orb = build_orbits(encode, nn.Identity(), orbit_imgs[:SCREEN_TANGENT_IMAGES], fam.fn, fam.params)
            tangents[name] = orbit_tangents(orb)
        del model, backbone
        gc = torch.Generator().manual_seed(seed)
        bc = min(COLLAPSED_BATCH, cfg.screen_batch)
        mu, sd = z1.double().mean(0), z1.double().std(0).clamp_min(1e-6)
        spread = 1e-2
        collapsed = tuple((mu + spread * sd * torch.randn(bc, self.in_dim, generator=gc, dtype=torch.float64)).float()
                          for _ in range(2))
        obj = objective

        def predictor_spec(dim: int):
            return base_cfg.head.resolve_predictor(cfg.objective, dim)

        self.screen_inputs = ScreenInputs(obj, z1, z2, collapsed, tangents, predictor_spec, seed=seed, spread=spread)
        self.eval_inputs = EvalInputs(
            train_images=probe_tr.images, train_labels=probe_tr.labels if has_labels else None,
            test_images=test.images, test_labels=test.labels if has_labels else None,
            orbit_images=orbit_imgs, view_batch=(views[0].cpu(), views[1].cpu()),
            mean=tuple(data.mean), std=tuple(data.std), families=tuple(cfg.families), seed=seed,
            tangent_images=TANGENT_IMAGES,
        )
        fixed, ranged = parse_constraints(cfg.fix, cfg.ranges)
        self.space = SearchSpace.default(self.in_dim).constrain(fixed, ranged)

    # ------------------------------------------------------------------ one trial
    def trial_dir(self, number: int) -> Path:
        return self.cfg.out_dir / "trials" / f"{number:04d}"

    def objective(self, trial: Any) -> float | tuple[float, ...]:
        """Optuna's objective: one trial (see the module docstring). Any error inside a trial
        (numerical or not) makes it FAIL with the reason recorded; the study goes on."""
        import optuna

        try:
            return self._objective(trial)
        except (optuna.TrialPruned, TrialDiverged):
            raise
        except Exception as exc:  # noqa: BLE001 - one bad trial must not end a long study
            reason = f"{type(exc).__name__}: {exc}"
            trial.set_user_attr("fail_reason", reason[:500])
            self.echo(f"trial {trial.number} failed with an error:\n{traceback.format_exc(limit=-6)}")
            raise TrialError(reason) from exc

    def _duplicate(self, trial: Any, spec: Any) -> Any | None:
        """A completed trial of the same head (trials are deterministic given the common seed)."""
        from optuna.trial import TrialState

        head = spec.to_dict()
        for t in trial.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if t.user_attrs.get("head") == head and "duplicate_of" not in t.user_attrs:
                return t
        return None

    def _objective(self, trial: Any) -> float | tuple[float, ...]:
        import optuna

        from geohead.config import config_from_dict

        cfg = self.cfg
        # a retry (of a trial whose worker died) is enqueued with the dead trial's params and user
        # attributes, so "trial" holds the original number there
        first = trial.user_attrs.get("retry_of", trial.user_attrs.get("trial"))
        retry_of = int(first) if first is not None and int(first) != trial.number else None
        spec = self.space.suggest(trial, self.base_spec)
        trial.set_user_attr("trial", trial.number)
        if retry_of is not None:
            trial.set_user_attr("retry_of", retry_of)
        trial.set_user_attr("head", spec.to_dict())
        trial.set_user_attr("seed", cfg.seed)
        trial.set_user_attr("worker", self.worker_id)
        same = self._duplicate(trial, spec)
        if same is not None:  # the same head under the same seed: its measurements, without training again
            for k, v in same.user_attrs.items():
                if k not in ("trial", "worker", "retry_of", "head", "seed"):
                    trial.set_user_attr(k, v)
            trial.set_user_attr("duplicate_of", same.number)
            return tuple(same.values) if cfg.multi else same.values[0]
        self.echo(f"trial {trial.number}: {describe_spec(spec)}" + (f" (retry of trial {retry_of})" if retry_of is not None else ""))

        def fail(reason: str) -> TrialDiverged:
            trial.set_user_attr("fail_reason", reason[:500])
            return TrialDiverged(reason)

        try:
            crit = screen(spec, self.screen_inputs)
        except TrialDiverged as exc:
            raise fail(str(exc)) from None
        for k, v in crit.items():
            trial.set_user_attr(k, v)
        verdict = screen_verdict(crit, cfg.prune_stable_rank)
        if verdict and cfg.prune and not cfg.multi:
            trial.set_user_attr("pruned_by", verdict)
            raise optuna.TrialPruned(verdict)

        d = copy.deepcopy(self.base)
        d["out"] = str(self.trial_dir(trial.number))
        d.setdefault("head", {})["spec"] = {k: v for k, v in dataclasses.asdict(spec).items() if k != "in_dim"}
        tcfg = config_from_dict(d)
        live: dict[str, Any] = {}
        single = not cfg.multi

        def on_epoch(info: Any) -> None:
            live.update(model=info.model, teacher=info.teacher, objective=info.objective)
            if info.epoch == 0 or not single:
                return
            from geohead.geometry import rankme

            m = info.model
            m.backbone.eval()
            with torch.no_grad():
                f = m.backbone(info.views[0]).float()
            value = rankme(f) / f.shape[1] if torch.isfinite(f).all() else float("nan")
            if not math.isfinite(value):
                raise fail(f"non-finite backbone features at epoch {info.epoch}")
            trial.report(value, info.epoch)
            if cfg.prune and trial.should_prune():
                trial.set_user_attr("pruned_by", f"median pruner at epoch {info.epoch} (backbone RankMe/d {value:.3f})")
                raise optuna.TrialPruned()

        t0 = time.perf_counter()
        try:
            return self._train_and_measure(trial, tcfg, on_epoch, live, fail, t0)
        finally:
            if not cfg.keep_checkpoints:
                (self.trial_dir(trial.number) / "last.ckpt").unlink(missing_ok=True)

    def _train_and_measure(self, trial: Any, tcfg: Any, on_epoch: Callable, live: dict, fail: Callable, t0: float):
        from geohead.train import TrainingDiverged, train

        cfg = self.cfg
        try:
            train(tcfg, overwrite=True, callback=on_epoch)
        except TrainingDiverged as exc:
            raise fail(f"diverged: {exc}") from None
        trial.set_user_attr("train_seconds", time.perf_counter() - t0)
        model, teacher = live["model"], live.get("teacher")
        objective = live["objective"]
        try:
            crit2 = trained_criteria(
                model.backbone, model.head, objective, self.eval_inputs,
                predictor=model.predictor if objective.needs_predictor else None,
                teacher_head=teacher.head if teacher is not None else None, device=self.device)
        except TrialDiverged as exc:
            raise fail(str(exc)) from None
        comps = score_components(crit2)
        crit2["score"] = geometric_score(crit2)
        for k, v in {**crit2, **{f"score_{k}": v for k, v in comps.items()}}.items():
            trial.set_user_attr(k, v)
        if cfg.multi:
            return tuple(comps[k] for k in SCORE_CRITERIA)
        if cfg.score == "knn":
            return crit2["knn_backbone"]
        return crit2["score"]


def describe_spec(spec: Any) -> str:
    if spec.depth == 1:
        body = f"linear {spec.in_dim}->{spec.out_dim}"
    else:
        body = (f"depth {spec.depth} {spec.in_dim}->{spec.hidden_dim}->{spec.out_dim} {spec.activation} "
                f"norm={spec.norm or 'none'}")
    return f"{body} last_norm={spec.last_norm or 'none'} whiten={spec.whiten or 'none'}"


# ---------------------------------------------------------------------- study handling
def make_sampler(cfg: SearchConfig, seed: int) -> Any:
    import optuna

    name = cfg.sampler_name
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(4, min(16, cfg.trials // 3)))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # multivariate/group are "experimental" in Optuna
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(10, max(3, cfg.trials // 4)),
                                          multivariate=True, group=True, constant_liar=cfg.workers > 1)


def make_pruner(cfg: SearchConfig) -> Any:
    import optuna

    if cfg.multi or not cfg.prune:
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=8, n_warmup_steps=0)


def create_study(cfg: SearchConfig, storage: Any) -> Any:
    """Create the study, or load it when it exists with the same settings (resume)."""
    import optuna

    directions = ["maximize"] * (len(SCORE_CRITERIA) if cfg.multi else 1)
    study = optuna.create_study(study_name=cfg.study_name, storage=storage, directions=directions, load_if_exists=True)
    ident = cfg.identity()
    stored = study.user_attrs.get("search_config")
    if stored is None:
        study.set_user_attr("search_config", ident)
        study.set_user_attr("score", "multi" if cfg.multi else cfg.score)
        study.set_user_attr("criteria", list(SCORE_CRITERIA))
    elif stored != ident:
        diff = {k: (stored.get(k), ident.get(k)) for k in ident if stored.get(k) != ident.get(k)}
        first = ", ".join(f"{k}: stored {a!r} vs now {b!r}" for k, (a, b) in list(diff.items())[:3])
        raise SearchError(f"study {cfg.study_name!r} in this storage was made with other settings ({first}); "
                          "rerun with the same settings to resume, or pass --study NAME (or another --out) for a new study")
    if [d.name.lower() for d in study.directions] != directions:
        raise SearchError(f"study {cfg.study_name!r} has {len(study.directions)} objective(s); choose another --study")
    return study


def worker_device(device: str, worker: int, n_cuda: int) -> str:
    """The device of local worker ``worker``: with ``auto``/``cuda`` and several visible GPUs,
    worker i takes ``cuda:(i mod n_cuda)`` (one trial per GPU); an explicit ``cuda:K`` or
    ``cpu`` is kept as given.
    """
    if device in ("auto", "cuda") and n_cuda > 1:
        return f"cuda:{worker % n_cuda}"
    return device


def _work(cfg: SearchConfig, worker: int, url: str, deadline: float | None, echo: Callable[[str], None] | None = None) -> None:
    """One worker: run trials until the study holds ``cfg.trials`` finished trials or time is up."""
    import optuna

    from geohead.search.storage import count_trials, fail_stale, has_heartbeat, open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    _quiet()
    say = echo or (lambda s: print(s, file=sys.stderr, flush=True))
    if cfg.workers > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // cfg.workers))
        cfg = dataclasses.replace(cfg, device=worker_device(cfg.device, worker, torch.cuda.device_count()))
        prefix = f"[worker {worker}] "
        echo_w = lambda s: say(prefix + s)  # noqa: E731
    else:
        echo_w = say
    storage = open_storage(url, cfg.heartbeat)
    existing = len(optuna.load_study(study_name=cfg.study_name, storage=storage).trials)
    seed = cfg.seed * 1_000_003 + worker * 7_919 + existing
    study = optuna.load_study(study_name=cfg.study_name, storage=storage, sampler=make_sampler(cfg, seed),
                              pruner=make_pruner(cfg))
    runner: TrialRunner | None = None
    heartbeat = has_heartbeat(storage)

    def finished(study: Any, t: Any) -> None:
        c = count_trials(study)
        echo_w(f"[{c['done']}/{cfg.trials}] {trial_line(t)}")

    while True:
        fail_stale(study)
        c = count_trials(study)
        if deadline is not None and time.time() >= deadline:
            break
        if c["done"] + c["running"] >= cfg.trials and not c["waiting"]:
            if c["running"] and heartbeat:  # other workers' trials: wait for them, or retry them if their worker died
                time.sleep(min(2.0, cfg.heartbeat))
                continue
            break
        if runner is None:
            t0 = time.perf_counter()
            runner = TrialRunner(cfg, worker, echo_w)
            echo_w(f"search space (d={runner.in_dim}, {runner.space.size()} heads):\n{runner.space.describe()}\n"
                   f"prepared data, initial backbone features and tangents in {time.perf_counter() - t0:.1f} s")
        study.optimize(runner.objective, n_trials=1, catch=(TrialDiverged, TrialError), callbacks=[finished],
                       gc_after_trial=True)


def _quiet() -> None:
    """Silence Optuna's "experimental feature" warnings (heartbeats, retries, multivariate TPE)."""
    import warnings

    import optuna

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def _worker_main(cfg_dict: dict[str, Any], worker: int, url: str, deadline: float | None) -> None:
    cfg = SearchConfig(**cfg_dict)
    _work(cfg, worker, url, deadline)


def trial_line(t: Any) -> str:
    """One line about a finished trial."""
    ua = t.user_attrs
    head = ua.get("head")
    from geohead.heads import HeadSpec

    desc = describe_spec(HeadSpec.from_dict(head)) if head else "?"
    state = t.state.name
    dur = t.duration.total_seconds() if t.duration is not None else float("nan")
    if state == "COMPLETE" and "duplicate_of" in ua:
        return f"trial {t.number} COMPLETE = trial {ua['duplicate_of']} (same head, not trained again) | {desc}"
    if state == "COMPLETE":
        knn = ua.get("knn_backbone")
        knn_s = f" kNN {knn:.3f}" if knn is not None else ""
        return (f"trial {t.number} COMPLETE score {ua.get('score', float('nan')):.4f}{knn_s} | {desc} | "
                f"screen {ua.get('screen_seconds', 0):.1f}s train {ua.get('train_seconds', 0):.1f}s "
                f"eval {ua.get('eval_seconds', 0):.1f}s total {dur:.1f}s")
    if state == "PRUNED":
        return f"trial {t.number} PRUNED ({ua.get('pruned_by', 'pruner')}) | {desc} | {dur:.1f}s"
    return f"trial {t.number} {state} ({ua.get('fail_reason', 'error')}) | {desc} | {dur:.1f}s"


def _check_data(cfg: SearchConfig) -> None:
    """Fail early, naming the flag, when --data or --test cannot be read (one image of each split
    the search will use); with ``download`` this is where torchvision downloads the files."""
    from geohead.data import load_dataset

    reads = [("--data", cfg.data, True)]
    if cfg.test is not None:
        reads.append(("--test", cfg.test, False))
    elif cfg.data in BUILTIN_DATA:
        reads.append(("--data", cfg.data, False))
    for flag, name, train in reads:
        try:
            load_dataset(name, root=cfg.data_root, download=cfg.download, train=train, n=1, img_size=cfg.img_size)
        except (ValueError, FileNotFoundError) as exc:
            raise SearchError(f"{flag} {name!r}: {exc}") from None


def run_search(cfg: SearchConfig, echo: Callable[[str], None] | None = None) -> SearchResult:
    """Run (or resume) the search of ``cfg`` and write its outputs; see the module docstring.

    Raises :class:`SearchError` (a ``ValueError``) for bad settings and storages.
    """
    import optuna

    from geohead.search.outputs import write_outputs
    from geohead.search.storage import describe, open_storage, storage_url

    cfg.validate()
    _check_data(cfg)  # before anything is written; downloads here (once) when asked
    cfg = dataclasses.replace(cfg, download=False)
    _quiet()
    say = echo or (lambda s: print(s, file=sys.stderr, flush=True))
    out = cfg.out_dir
    out.mkdir(parents=True, exist_ok=True)
    url = storage_url(cfg.storage, out)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        storage = open_storage(url, cfg.heartbeat)
    except ValueError as exc:
        raise SearchError(str(exc)) from None
    study = create_study(cfg, storage)
    t0 = time.time()
    deadline = t0 + cfg.timeout if cfg.timeout else None
    say(f"geohead search: {cfg.objective} on {cfg.data}, study {cfg.study_name!r} in {describe(url)}, "
        f"{len(study.trials)} trial(s) stored, target {cfg.trials}"
        + (f", timeout {cfg.timeout:.0f} s" if cfg.timeout else "") + f" -> {out}")
    interrupted = False
    try:
        if cfg.workers == 1:
            _work(cfg, 0, url, deadline, say)
        else:
            import multiprocessing as mp

            ctx = mp.get_context("spawn")
            procs = [ctx.Process(target=_worker_main, args=(dataclasses.asdict(cfg), i, url, deadline), daemon=False)
                     for i in range(cfg.workers)]
            for p in procs:
                p.start()
            for p in procs:
                p.join()
            bad = [p.exitcode for p in procs if p.exitcode]
            if bad:
                say(f"warning: {len(bad)} worker(s) exited with codes {bad}; their running trials are retried by the next run")
    except KeyboardInterrupt:
        interrupted = True
        say("interrupted: writing the outputs of the finished trials")
    study = optuna.load_study(study_name=cfg.study_name, storage=storage)
    summary, table = write_outputs(study, cfg, describe(url), time.time() - t0)
    if interrupted:
        raise KeyboardInterrupt
    return SearchResult(out, cfg.study_name, describe(url), summary, table)


__all__ = ["SCORES", "SAMPLERS", "SearchConfig", "SearchError", "SearchResult", "TrialRunner", "run_search"]
