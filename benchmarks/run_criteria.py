"""What a verdict on the user's backbone would compare: the search's label-free criteria and
theory score of trained runs, on the search's probe split.

``geohead search --confirm-backbone`` re-trains the pick and the published head on the user's
backbone and compares them by backbone kNN on the search's probe split and, where it has no
labels, by the theory score alone (:mod:`geohead.search.verdict`). The scale ladder
(benchmarks/search_scale.py) trains the same two heads on the wider backbones; this measures each
of its trained runs as a verdict's run is measured (:meth:`TrialRunner.criteria`: the same probe
images, orbits and views as the search whose settings ``--search`` names), so that the ladder
says whether the score sees a margin that turns with width: does the score's margin have the
sign of the backbone's linear-probe margin on the test set?

Run: ``python benchmarks/run_criteria.py --search runs/search_transfer34/simclr/search --backbone
resnet18_cifar --run pick=PICK.safetensors --run published=PUB.safetensors`` (or, from
search_scale.py, :func:`measure_run` on each run's checkpoint before it is deleted). Where the
search's folder is lost but its record kept, ``--search FOLDER --rebuild OBJECTIVE`` writes the
search.json its settings come from (:func:`rebuild_search`).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import search_transfer as st  # noqa: E402

#: what each run records: the theory score, its components and the search's probe-split kNN
KEYS = ("score", "score_rankme", "score_conditioning", "score_fisher_erank", "knn_backbone", "rankme_backbone_frac")


def search_runner(settings: dict[str, Any], backbone: str | None = None) -> Any:
    """A TrialRunner for the search of ``settings`` (a search.json's ``settings``: its data, probe
    sizes, orbits, seed, score), on ``backbone`` when given: the inputs its trials are measured on."""
    from geohead.search import SearchConfig
    from geohead.search.inputs import prepare_trial_inputs
    from geohead.search.trial import TrialRunner

    fields = {f.name for f in dataclasses.fields(SearchConfig)}
    kept = {k: tuple(v) if isinstance(v, list) else v for k, v in settings.items() if k in fields}
    cfg = SearchConfig(**{**kept, "backbone": backbone or kept.get("backbone")}, timeout=None, progress=False)
    return TrialRunner(cfg, prepare_trial_inputs(cfg, lambda s: None), lambda s: None)


def measure_run(checkpoint: Path, runner: Any) -> dict[str, float]:
    """The criteria (:data:`KEYS`, and every other the trials record) of the run that wrote
    ``checkpoint``, measured as the search's trials and verdict runs are."""
    from geohead.search.score import fisher_erank
    from geohead.training.model import load_trained

    tm = load_trained(checkpoint, runner.inputs.device)
    t0 = time.perf_counter()
    crit, comps = runner.criteria(tm.model, tm.teacher, tm.objective)
    comps["fisher_erank"] = fisher_erank(crit.get("fisher_effective_rank", float("nan")), crit["dim_backbone"])
    return {**crit, **{f"score_{k}": v for k, v in comps.items()}, "criteria_seconds": time.perf_counter() - t0}


def rebuild_search(folder: Path, objective: str, seed: int, score: str, data_dir: Path, scale: str = "cpu") -> dict[str, Any]:
    """Write ``folder/search.json`` with the settings (``SearchConfig.identity``) of
    search_transfer.py's search of ``objective`` at ``seed`` with ``score`` (its ``scale``), the
    search that wrote ``folder``: what :func:`search_runner` needs where only the search's record,
    not its folder, was kept. Its trials are not rerun; an existing search.json is never
    replaced. Returns the settings."""
    if (folder / "search.json").exists():
        raise FileExistsError(f"{folder / 'search.json'} exists; rebuild only a lost search's settings")
    cfg = st.search_config(objective, folder.parents[1], st.cifar_files(data_dir), seed, st.SCALES[scale], None, None, score=score)
    if Path(cfg.out) != folder:
        raise ValueError(f"--search must be <out>/{objective}/search, got {folder}")
    settings = cfg.identity()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "search.json").write_text(json.dumps({"settings": settings, "rebuilt": True}, indent=2) + "\n")
    return settings


def margins(measured: dict[str, dict[str, float]]) -> dict[str, float]:
    """Pick minus published for each of :data:`KEYS` both runs recorded."""
    a, b = measured["pick"], measured["published"]
    return {k: a[k] - b[k] for k in KEYS if k in a and k in b}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--search", required=True, help="a search folder: its search.json's settings")
    p.add_argument("--backbone", default=None, help="the runs' backbone (default: the search's)")
    p.add_argument("--run", action="append", default=[], metavar="LABEL=CHECKPOINT",
                   help="pick=... and published=... (each a run's last.safetensors)")
    p.add_argument("--results", default=None, help="write the measures here (JSON)")
    p.add_argument("--rebuild", default=None, metavar="OBJECTIVE", help="instead: write --search's lost search.json, "
                   "the settings of search_transfer.py's search of OBJECTIVE (--seed, --score, --scale)")
    p.add_argument("--seed", type=int, default=2, help="with --rebuild (default 2, runs/search_transfer34's)")
    p.add_argument("--scale", choices=sorted(st.SCALES), default="cpu", help="with --rebuild")
    p.add_argument("--score", default="theory", help="with --rebuild")
    p.add_argument("--data-dir", default=str(st.SHARED), help="with --rebuild")
    args = p.parse_args(argv)
    if args.rebuild:
        rebuild_search(Path(args.search), args.rebuild, args.seed, args.score, Path(args.data_dir), args.scale)
        return 0
    runs = dict(r.split("=", 1) for r in args.run)
    if set(runs) != {"pick", "published"}:
        p.error(f"--run needs pick=... and published=..., got {sorted(runs)}")
    settings = json.loads((Path(args.search) / "search.json").read_text())["settings"]
    runner = search_runner(settings, args.backbone)
    measured = {label: measure_run(Path(path), runner) for label, path in runs.items()}
    rec = {"search": args.search, "backbone": args.backbone, "runs": runs, "measured": measured,
           "margin": margins(measured)}
    if args.results:
        Path(args.results).write_text(json.dumps(rec, indent=2) + "\n")
    print("| measure | pick | published | pick - published |\n|---|---|---|---|")
    for k, m in rec["margin"].items():
        print(f"| {k} | {measured['pick'][k]:.4f} | {measured['published'][k]:.4f} | {m:+.4f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
