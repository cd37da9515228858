"""Settings of ``geohead search``: :class:`SearchConfig`, its checks, and the names they accept."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from geohead.io import shorten
from geohead.search.criteria import DEFAULT_FAMILIES
from geohead.search.score import DEFAULT_SCORE, LABEL_FREE_SCORES
from geohead.search.space import DIMENSIONS, parse_constraints
from geohead.training.config import MAX_BATCH, MAX_EPOCHS, MAX_STEPS

SCORES = ("geometry", "theory", "knn")
#: The first rung of successive halving when neither --min-steps nor --steps is given.
DEFAULT_MIN_STEPS = 100
SAMPLERS = ("tpe", "random", "nsga2")
BUILTIN_DATA = ("shapes", "cifar10", "cifar100")
#: View overrides used on the built-in shapes data unless ``--set data.view_args...`` says otherwise.
#: Shapes draws the object's hue uniformly over the whole colour circle, independent of the class,
#: so the recipes' ±0.1 hue jitter leaves colour as a shortcut: Barlow Twins on shapes with the
#: standard views ends *below* the random-init backbone's class kNN (measured: 0.156 vs 0.172
#: after the 6-epoch shapes recipe), and with full hue jitter it learns the class within 100 steps.
SHAPES_VIEW_ARGS: dict[str, Any] = {"hue": 0.5}
#: ``--set`` keys the search sets itself (the head is chosen per trial, the rest by the search's flags).
_HEAD_KEYS = ("head.file", "head.preset", "head.spec") + tuple(f"head.spec.{d}" for d in DIMENSIONS)
#: ``--set`` keys the search's own flags set (found_on records them, the schedule spans them) -> the flag
_SEARCH_KEYS = {
    "out": "--out", "seed": "--seed", "data.n_train": "--n-train", "optim.batch_size": "--batch-size",
    "optim.max_steps": "--min-steps / --max-steps", "optim.epochs": "--min-steps / --max-steps",
    "optim.warmup_epochs": "--min-steps / --max-steps",
    "probe.enabled": "--probe-train / --probe-test: trials are probed by the search",
}
#: the verdict's most fresh seeds and longest schedule in epochs (each seed trains two runs)
MAX_CONFIRM_SEEDS = 100
#: trials a search may ask for; seconds between a worker's heartbeats (a day) and of --timeout (a year)
MAX_TRIALS, MAX_HEARTBEAT, MAX_TIMEOUT = 100_000, 86_400, 31_536_000


class SearchError(ValueError):
    """Bad search settings (a value that cannot work, with the fix in the message)."""


#: What a search reads or writes in its folder (the trial folders are checked as they are made).
SEARCH_FILES = ("study.db", "trials.csv", "rungs.csv", "search.json", "table.txt", "best_head.json", "pick_head.json",
                "confirm", "criteria_vs_knn.png", "pareto_front.png", "param_importances.png", "trials")


def auto_workers(device: str, n_cpu: int | None = None, n_cuda: int | None = None) -> int:
    """``--workers auto``: one worker per visible GPU when the search runs on CUDA, else
    min(4, CPU cores) (each worker then takes cores // workers threads)."""
    import os

    import torch

    n_cuda = torch.cuda.device_count() if n_cuda is None else n_cuda
    if device.startswith("cuda") or (device == "auto" and n_cuda > 0):
        return 1 if ":" in device else max(1, n_cuda)
    n_cpu = (os.cpu_count() or 1) if n_cpu is None else n_cpu
    return max(1, min(4, n_cpu))


#: The longest backbone name a search takes (timm's longest are under 80 characters).
MAX_NAME = 200


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
        min_steps, max_steps, reduction_factor: the training budget of a trial under successive
            halving (:mod:`geohead.search.study`): every trial trains at least ``min_steps``; at
            rungs ``min_steps·r^k`` < ``max_steps`` (r = ``reduction_factor``) only the best 1/r of
            the trials measured there go on; the survivors train ``max_steps`` (one cosine schedule
            over ``max_steps`` for every trial, so trials are compared at equal steps). None:
            ``steps`` (or 100) and ``steps`` (or 3 × ``min_steps``).
        steps: shorthand for a fixed budget: ``min_steps = max_steps = steps`` unless they are given.
        batch_size: images per training step.
        trials: distinct heads the study should measure (complete, pruned or failed; a trial that
            repeats a measured head is not counted); timeout: seconds after which no new trial
            starts (None: no limit); workers: local processes sharing the storage, or ``auto``
            (:func:`~geohead.search.config.auto_workers`: one per GPU, on CPU min(4, cores)).
        storage, study: Optuna storage (see :mod:`geohead.search.storage`) and study name.
        seed, device: the common seed of every trial; ``auto``/``cpu``/``cuda``.
        score: ``theory`` (label-free, the default: RankMe + H_eff conditioning + tangent-Fisher
            effective rank, see :data:`~geohead.search.score.THEORY_WEIGHTS`), ``geometry``
            (label-free: RankMe alone) or ``knn``; multi:
            NSGA-II over the normalised criteria of ``SCORE_CRITERIA``, the pick by ``score``;
            sampler: ``tpe``/``random``/``nsga2`` (None: tpe, or nsga2 with multi).
        fix, ranges: ``--fix``/``--range`` entries; overrides: ``--set`` entries for the training config.
        probe_train, probe_test, orbit_images, families, screen_batch: sizes of the measurements.
        prune: the screen's escape constraint (where Thm 4.1's premise holds: see
            :mod:`geohead.search.escape`) and successive halving on (off: every trial trains
            ``max_steps``).
        escape: the escape constraint alone (off: every head's escape curvature is still recorded,
            but none is pruned or marked infeasible for it; successive halving stays on). Recorded
            in the study's settings only when off, so studies made before it existed resume.
        heartbeat: seconds between heartbeats of a running trial (RDB storages).
        keep_checkpoints: keep every trial's last.safetensors (default: deleted once the trial is measured;
            ``geohead train --head best_head.json`` retrains the winner at full length).
        progress: one progress bar over the whole study (trials, time, best score).
        confirm_seeds: fresh seeds at which the verdict re-trains the pick and the published head
            (:mod:`geohead.search.verdict`; 0: no verdict runs, the pick is reported unchecked).
        confirm_epochs: the schedule of the verdict's runs in epochs of the training images (None:
            ``max_steps``, the trials' schedule). Set it to the schedule you will train with: the
            scale ladder measured a margin that turned with training length. At a schedule of
            its own the verdict compares the fresh seeds alone, so it needs ``confirm_seeds`` >= 2.
        confirm_backbone: the backbone the verdict's runs train (None: the search's), both heads
            rescaled to its d (:meth:`~geohead.heads.HeadSpec.rescale`). Set it to the backbone
            you will train: the scale ladder measured a margin that turned with width. Its runs
            are compared at the fresh seeds alone (``confirm_seeds`` >= 2), as with ``confirm_epochs``.
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
    min_steps: int | None = None
    max_steps: int | None = None
    steps: int | None = None
    reduction_factor: int = 3
    batch_size: int = 256
    trials: int = 100
    timeout: float | None = 390.0
    workers: int | str = 1
    storage: str | None = None
    study: str | None = None
    seed: int = 0
    device: str = "auto"
    score: str = DEFAULT_SCORE
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
    escape: bool = True
    heartbeat: int = 20
    keep_checkpoints: bool = False
    progress: bool = True
    confirm_seeds: int = 1
    confirm_epochs: int | None = None
    confirm_backbone: str | None = None

    def __post_init__(self) -> None:
        if self.min_steps is None:
            self.min_steps = self.steps if self.steps is not None else DEFAULT_MIN_STEPS
        if self.max_steps is None:
            self.max_steps = self.steps if self.steps is not None else 3 * self.min_steps

    # ------------------------------------------------------------------ derived
    @property
    def rungs(self) -> tuple[int, ...]:
        """Steps at which successive halving decides: ``min_steps·r^k`` below ``max_steps``."""
        out, step = [], int(self.min_steps)
        while step < int(self.max_steps):
            out.append(step)
            step *= max(2, int(self.reduction_factor))
        return tuple(out)

    @property
    def out_dir(self) -> Path:
        """The output folder (``out`` with ``~`` expanded, as folder_problem checks it, or ``runs/search_<objective>``)."""
        return Path(self.out or f"runs/search_{self.objective}").expanduser()

    @property
    def study_name(self) -> str:
        """``study``, or objective-data-backbone (with ``-multi`` for NSGA-II studies)."""
        if self.study:
            return self.study
        data = Path(self.data).stem if self.data not in BUILTIN_DATA else self.data
        return f"{self.objective}-{data}-{self.backbone or 'default'}" + ("-multi" if self.multi else "")

    @property
    def sampler_name(self) -> str:
        """``sampler``, or nsga2 with ``multi`` and tpe without."""
        return self.sampler or ("nsga2" if self.multi else "tpe")

    def identity(self) -> dict[str, Any]:
        """The settings every trial of one study must share (a resumed study checks them)."""
        keys = ("objective", "data", "test", "n_train", "img_size", "backbone", "min_steps", "max_steps",
                "reduction_factor", "batch_size", "seed",
                "score", "multi", "fix", "ranges", "overrides", "probe_train", "probe_test", "orbit_images",
                "families", "screen_batch", "prune")
        keys += () if self.escape else ("escape",)
        d = dataclasses.asdict(self)
        ident = {k: (list(d[k]) if isinstance(d[k], tuple) else d[k]) for k in keys}
        from geohead.objectives import OBJECTIVES

        if self.score in LABEL_FREE_SCORES and not self.multi:
            # a score name's weights can change between versions: the trials of one study share them
            ident["score_weights"] = dict(LABEL_FREE_SCORES[self.score])

        if OBJECTIVES[self.objective].predictor_preset is not None:
            # BYOL/SimSiam studies made before the predictor became the method's own (SiLU then) do not resume
            ident["predictor"] = "published"
        return ident

    def validate(self) -> "SearchConfig":
        """Raise :class:`SearchError` (or the space's ``SpaceError``, both ``ValueError``) naming the
        first bad setting and its fix; return ``self``."""
        self._check_choices()
        self._check_sizes()
        self._check_families()
        parse_constraints(self.fix, self.ranges)  # raises SpaceError (a ValueError) with the fix
        self._check_overrides()
        self._check_storage()
        from geohead.io import folder_problem, refuse_links_out

        problem = folder_problem(self.out_dir)
        if problem:
            raise SearchError(f"--out {str(self.out_dir)!r} cannot be written: {problem}; choose another --out folder")
        refuse_links_out(self.out_dir, SEARCH_FILES, "search file", SearchError)
        for sub in ("trials", "confirm"):  # the run folders a rerun trains into, deletes in and reads results from
            if (self.out_dir / sub).is_dir():
                runs = sorted(f"{sub}/{p.name}" for p in (self.out_dir / sub).iterdir())
                refuse_links_out(self.out_dir, runs, "search run folder", SearchError)
        return self

    def _check_choices(self) -> None:
        from geohead.objectives import OBJECTIVES

        if self.objective not in OBJECTIVES:
            raise SearchError(f"unknown objective {self.objective!r}; choose one of {sorted(OBJECTIVES)}")
        if self.score not in SCORES:
            raise SearchError(f"unknown score {self.score!r}; choose one of {list(SCORES)}")
        if self.multi and self.score == "knn":
            raise SearchError("--multi optimises the label-free criteria and picks by a label-free score; "
                              "drop --score knn or --multi")
        if self.sampler is not None and self.sampler not in SAMPLERS:
            raise SearchError(f"unknown sampler {self.sampler!r}; choose one of {list(SAMPLERS)}")
        if self.device.split(":")[0] not in ("auto", "cpu", "cuda"):
            raise SearchError(f"unknown device {self.device!r}; use auto, cpu, cuda or cuda:K")
        if self.device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise SearchError(f"--device {self.device!r} but CUDA is not available here; use --device cpu or auto")

    def _check_sizes(self) -> None:
        if self.steps is not None and (isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1):
            raise SearchError(f"--steps must be a positive integer, got {self.steps!r}")
        positive = {"min_steps": self.min_steps, "max_steps": self.max_steps, "batch_size": self.batch_size,
                    "trials": self.trials, "workers": 1 if self.workers == "auto" else self.workers, "img_size": self.img_size, "probe_train": self.probe_train, "probe_test": self.probe_test,
                    "orbit_images": self.orbit_images, "screen_batch": self.screen_batch, "heartbeat": self.heartbeat}
        for key, value in positive.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SearchError(f"--{key.replace('_', '-')} must be a positive integer, got {value!r}")
        upper = {"steps": (self.steps or 1, MAX_STEPS), "min_steps": (self.min_steps, MAX_STEPS),
                 "max_steps": (self.max_steps, MAX_STEPS), "batch_size": (self.batch_size, MAX_BATCH),
                 "screen_batch": (self.screen_batch, MAX_BATCH), "trials": (self.trials, MAX_TRIALS),
                 "heartbeat": (self.heartbeat, MAX_HEARTBEAT)}
        for key, (value, bound) in upper.items():
            if value > bound:
                raise SearchError(f"--{key.replace('_', '-')} must be at most {bound:,}, got {value!r}")
        if self.max_steps < self.min_steps:
            raise SearchError(f"--max-steps {self.max_steps} is below --min-steps {self.min_steps}; "
                              f"raise it (e.g. --max-steps {3 * self.min_steps}) or lower --min-steps")
        if isinstance(self.reduction_factor, bool) or not isinstance(self.reduction_factor, int) or self.reduction_factor < 2:
            raise SearchError(f"--reduction-factor must be an integer >= 2, got {self.reduction_factor!r}")
        if self.n_train is not None and self.n_train < self.batch_size:
            raise SearchError(f"--n-train {self.n_train} is smaller than --batch-size {self.batch_size}; raise it or lower the batch")
        seeds = self.confirm_seeds
        if isinstance(seeds, bool) or not isinstance(seeds, int) or not 0 <= seeds <= MAX_CONFIRM_SEEDS:
            raise SearchError(f"--confirm-seeds must be an integer from 0 to {MAX_CONFIRM_SEEDS}, got {seeds!r}")
        epochs = self.confirm_epochs
        if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int)
                                   or not 1 <= epochs <= MAX_EPOCHS):
            raise SearchError(f"--confirm-epochs must be an integer from 1 to {MAX_EPOCHS:,}, got {epochs!r}")
        for flag, name in (("--backbone", self.backbone), ("--confirm-backbone", self.confirm_backbone)):
            if name is not None and not (isinstance(name, str) and 0 < len(name) <= MAX_NAME):
                shown = f"{len(name):,} characters" if isinstance(name, str) and name else repr(name)
                raise SearchError(f"{flag} must be a backbone name of 1 to {MAX_NAME} characters, got {shown}")
        own = [(flag, value) for flag, value in (("--confirm-epochs", self.confirm_epochs),
                                                 ("--confirm-backbone", self.confirm_backbone)) if value is not None]
        if own and self.confirm_seeds < 2:
            flag, value = own[0]
            raise SearchError(f"{flag} {value} needs --confirm-seeds 2 or more (got {self.confirm_seeds}): the trials "
                              "trained at the search's schedule and backbone, so the margin at yours takes its noise "
                              "from the fresh seeds alone")
        if self.timeout is not None and not 0 < self.timeout <= MAX_TIMEOUT:
            raise SearchError(f"--timeout must be above 0 and at most {MAX_TIMEOUT:,} seconds (a year; --timeout 0 for no "
                              f"limit), got {self.timeout!r}")
        if self.screen_batch < 2:
            raise SearchError("--screen-batch must be at least 2")
        self._check_bounds()

    def _check_bounds(self) -> None:
        """Upper bounds, before any data is made or worker spawned: image counts and side
        (:func:`geohead.data.loaders.size_problem`), workers against the cores (CPU) or GPUs, the seed."""
        import os

        from geohead.data.loaders import size_problem
        from geohead.training.config import MAX_SEED

        for name, n in (("--n-train", self.n_train), ("--probe-train", self.probe_train), ("--probe-test", self.probe_test),
                        ("--orbit-images", self.orbit_images), ("--screen-batch", self.screen_batch)):
            problem = size_problem(n, self.img_size, name, "--img-size")
            if problem:
                raise SearchError(problem)
        if self.workers != "auto":
            cuda = self.device.startswith("cuda") or (self.device == "auto" and _cuda_count() > 0)
            top, what = (_cuda_count(), "GPUs") if cuda else (os.cpu_count() or 1, "CPU cores")
            if self.workers > top:
                raise SearchError(f"--workers {self.workers} is more than the {top} {what} here; give at most {top} "
                                  "(or auto)")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= MAX_SEED - self.confirm_seeds:
            raise SearchError(f"--seed must be an integer from 0 to 2^62 less --confirm-seeds (the verdict's fresh seeds "
                              f"follow it), got {self.seed!r}; give a smaller seed")

    def _check_families(self) -> None:
        from geohead.data import ORBIT_FAMILIES

        bad = [f for f in self.families if f not in ORBIT_FAMILIES]
        if bad:
            raise SearchError(f"unknown orbit families {bad}; choose from {sorted(ORBIT_FAMILIES)}")

    def _check_overrides(self) -> None:
        for text in self.overrides:
            key = text.partition("=")[0].strip()
            shown = shorten(text)
            if key in _HEAD_KEYS:
                raise SearchError(f"--set {shown!r}: the search chooses the head; use --fix/--range for its dimensions "
                                  "(--set head.spec.KEY is for fields it does not search, e.g. prototypes)")
            if key in _SEARCH_KEYS:
                raise SearchError(f"--set {shown!r}: {key} is set by the search (use {_SEARCH_KEYS[key]})")
        # keys and values, with a stand-in data size (the real one only sets the schedule's epochs)
        base_train_config(self, max(self.n_train or 0, 10 * self.batch_size))

    def _check_storage(self) -> None:
        from geohead.search.storage import check_storage

        try:
            check_storage(self.storage)
        except ValueError as exc:
            raise SearchError(str(exc)) from None


def _cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def schedule(steps: int, n_images: int, batch_size: int) -> dict[str, Any]:
    """The ``optim`` keys of a run of ``steps`` steps: one cosine schedule over them, its epochs
    over ``n_images`` images and a warm-up of a tenth of them."""
    epochs = steps / max(1, n_images // batch_size)
    return {"max_steps": steps, "epochs": epochs, "warmup_epochs": 0.1 * epochs}


def base_train_config(cfg: SearchConfig, n_images: int) -> tuple[dict[str, Any], Any]:
    """The training config every trial starts from, as a dict and as a validated ``TrainConfig``:
    ``cfg.max_steps`` steps of ``cfg.batch_size`` on ``n_images`` images (one cosine schedule over
    ``max_steps``, which successive halving may cut short), no probes, no per-trial progress bar,
    ``--set`` applied. Raises :class:`SearchError` naming a bad ``--set`` key or value."""
    from geohead.training.config import ConfigError, apply_overrides, config_from_dict

    steps = int(cfg.max_steps)
    base: dict[str, Any] = {
        "objective": cfg.objective, "seed": cfg.seed, "device": cfg.device,
        "data": {"name": cfg.data, "root": cfg.data_root, "n_train": cfg.n_train, "img_size": cfg.img_size,
                 "view_args": dict(SHAPES_VIEW_ARGS) if cfg.data == "shapes" else {}},
        "backbone": {"name": cfg.backbone} if cfg.backbone else {},
        "optim": {"batch_size": cfg.batch_size, **schedule(steps, n_images, cfg.batch_size)},
        "track": {"log_every": max(1, steps // 10), "monitor_every": 0, "ckpt_every": steps, "progress": False},
        "probe": {"enabled": False},
    }
    epochs = base["optim"]["epochs"]
    if epochs > MAX_EPOCHS:
        raise SearchError(f"--max-steps {steps:,} of --batch-size {cfg.batch_size} on {n_images:,} images are {epochs:,.0f} "
                          f"epochs, above the bound of {MAX_EPOCHS:,}; lower --max-steps or --batch-size, or give more images")
    try:
        base = apply_overrides(base, list(cfg.overrides))
        return base, config_from_dict(base)
    except ConfigError as exc:
        raise SearchError(f"--set: {exc}" if cfg.overrides else str(exc)) from None


__all__ = ["BUILTIN_DATA", "SAMPLERS", "SCORES", "SHAPES_VIEW_ARGS", "SearchConfig", "SearchError", "auto_workers",
           "base_train_config", "schedule"]
