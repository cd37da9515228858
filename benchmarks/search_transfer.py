"""Does the head `geohead search` finds train a better backbone at full budget? (issue 15, item 4)

For each objective, on CIFAR-10 (../shared/data: the 10k training images -> the 10k test images):

1. the search: ``run_search`` on the training images, label-free score (the default settings
   and budget, or ``--search-timeout``), probe test images from the test file;
2. full-budget training (``--epochs`` of the search's backbone, resnet18_w16 by default, with the
   search's own training settings: seed, views, optimiser, warm-up fraction; only longer) of
   * ``found``: the search's best head (``best_head.json``), with every ``--seeds``;
   * ``published``: the method's preset with ReLU (the paper's head), with every ``--seeds``;
   * ``preset_silu``: the same preset with SiLU;
   * ``best_deep``: the best-scored completed head of depth >= 2;
   * ``top_i``: the search's top ``--top-k`` distinct heads (in its ``rank``: the score at the
     highest rung they share);
   the preset's widths are the shapes recipe's (narrowed for the CPU) at scales smoke/cpu and the
   paper's at scale full (``--published-widths``);
3. backbone kNN (k=20, T=0.07) and linear-probe accuracy of each run on the test file, wall time;
4. the table: found vs published (mean over seeds, the difference in linear-probe points), the
   Spearman correlation between the search's ranking (and its score at the first rung) and
   full-budget kNN over the re-trained top-k heads, and the same for every recorded criterion,
   so a criterion that misled shows as a negative ρ.

Goals (issue 22): per objective, found >= published + 1 point of linear probe, or, where no head
of the re-trained top-k beats the published head by 1 point, the search's verdict recommends the
published head; ρ >= 0.6 on at least 4 of the 6 objectives. The search's verdict (search.json:
margin over its own published-head trial at a fresh seed, the noise, the recommended head) is
recorded in every summary.

``--reuse FILE``: take the runs and summaries of the objectives FILE measured (e.g. issue 15's
benchmarks/results/search_transfer_cpu.json for barlow and simclr: the same data, backbone,
training settings and search budget; those searches predate the published-head trial and the
verdict) instead of measuring them again.

Scales: ``smoke`` (a tiny search and 1-epoch runs on 512 images, ~2 minutes: checks the
pipeline), ``cpu`` (issue 22's specification at the CPU recipe's widths: the six objectives,
20 epochs, seeds 0 and 1, top 6; about 30 minutes per objective on 2 idle cores: a 10-minute
search and ~10 runs of 90-200 s), ``full`` (barlow and simclr with the paper's widths, a GPU job). Any
flag overrides its scale's default. Results are written after every run to OUT/results.json and
OUT/table.md; a rerun skips the runs (and the search) already finished, and ``--time-budget``
stops starting new runs after that many seconds, so a partial run still reports what it measured.

Run: ``python benchmarks/search_transfer.py --scale cpu`` (measured: docs/results.md; the results
of that run are benchmarks/results/search_transfer_cpu.json)
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

if str(Path(__file__).resolve().parent) not in sys.path:  # its sibling transfer_table, however it is imported
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import transfer_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
SCALES: dict[str, dict[str, Any]] = {
    "smoke": {"objectives": ["barlow"], "epochs": 1, "seeds": [0], "top_k": 2, "n_train": 512, "n_test": 256,
              "published_widths": "recipe", "search": {"n_train": 512, "batch_size": 64, "steps": 2, "probe_train": 128,
                                                         "probe_test": 64, "orbit_images": 8, "families": ("hue",),
                                                         "screen_batch": 64, "trials": 3, "timeout": None}},
    "cpu": {"objectives": ["barlow", "simclr", "byol", "simsiam", "vicreg", "dino"], "epochs": 20, "seeds": [0, 1],
            "top_k": 6, "n_train": None, "n_test": None, "published_widths": "recipe", "search": {}},
    "full": {"objectives": ["barlow", "simclr"], "epochs": 20, "seeds": [0, 1], "top_k": 8, "n_train": None,
             "n_test": None, "published_widths": "paper", "search": {}},
}

#: The table's half (transfer_table.py), reachable here under its old names: st.summarise, st.table, ...
CRITERIA, spearman, summarise, table = (transfer_table.CRITERIA, transfer_table.spearman, transfer_table.summarise,
                                        transfer_table.table)


def cifar_files(data_dir: str | Path) -> dict[str, str]:
    """``{"train", "test"}``: the CIFAR-10 10k training and the test file in ``data_dir``."""
    return {"train": str(Path(data_dir) / "cifar10_train_10k.npz"), "test": str(Path(data_dir) / "cifar10_test.npz")}


# ---------------------------------------------------------------------- the search
def run_the_search(objective: str, out: Path, data: dict[str, str], seed: int, scale: dict[str, Any],
                   timeout: float | None, backbone: str | None, trials: int | None = None, **settings: Any) -> Path:
    """Run (or reuse, when its search.json exists) the search of :func:`search_config`; return its folder."""
    from geohead.search import run_search

    folder = out / objective / "search"
    if (folder / "search.json").is_file():
        print(f"[{objective}] reusing the search in {folder}", flush=True)
        return folder
    cfg = search_config(objective, out, data, seed, scale, timeout, backbone, trials, **settings)
    t0 = time.perf_counter()
    res = run_search(cfg)
    print(res.table, flush=True)
    print(f"[{objective}] search: {time.perf_counter() - t0:.0f} s", flush=True)
    return folder


def search_config(objective: str, out: Path, data: dict[str, str], seed: int, scale: dict[str, Any],
                  timeout: float | None, backbone: str | None, trials: int | None = None, **settings: Any) -> Any:
    """The SearchConfig of the search in ``out/<objective>/search``. ``trials``: stop at that many
    distinct heads instead of at the timeout (a result that does not depend on how busy the
    machine is); ``settings``: other SearchConfig fields (e.g. ``escape=False``)."""
    from geohead.search import SearchConfig

    kw = dict(scale["search"]) | settings
    if timeout is not None:
        kw["timeout"] = timeout
    if trials is not None:
        kw.update(trials=trials, timeout=None)
    return SearchConfig(objective=objective, data=data["train"], test=data["test"], out=str(out / objective / "search"),
                        seed=seed, backbone=backbone, progress=False, **kw).validate()


def candidates(folder: Path, top_k: int) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The search's ranking of distinct trained heads (its ``rank``: the score at the highest rung
    they share, :func:`geohead.search.results.add_ranks`), the first ``top_k`` of it, and the best
    completed head of depth >= 2."""
    from geohead.search.results import add_ranks, read_trials_csv

    rows = read_trials_csv(folder / "trials.csv")
    rung_path = folder / "rungs.csv"
    add_ranks(rows, read_trials_csv(rung_path) if rung_path.is_file() else [])
    rows = [r for r in rows if r.get("rank") is not None]
    rungs = _first_rung_scores(folder)
    for r in rows:
        r["rung_score"] = rungs.get(r["number"])
    ranked = sorted(rows, key=lambda r: r["rank"])
    for i, r in enumerate(ranked):
        r["search_rank"] = i + 1
    deep = next((r for r in ranked if r["state"] == "COMPLETE" and int(r["depth"]) >= 2), None)
    return ranked[:top_k], deep


def _first_rung_scores(folder: Path) -> dict[int, float]:
    from geohead.search.results import read_trials_csv

    path = folder / "rungs.csv"
    if not path.is_file():
        return {}
    rows = read_trials_csv(path)
    if not rows:
        return {}
    first = min(r["step"] for r in rows)
    return {r["number"]: r["score"] for r in rows if r["step"] == first}


def head_of_trial(folder: Path, number: int) -> dict[str, Any]:
    """The HeadSpec dict of trial ``number`` of the search in ``folder``."""
    import optuna

    study_name = json.loads((folder / "search.json").read_text())["study"]
    study = optuna.load_study(study_name=study_name, storage=f"sqlite:///{(folder / 'study.db').resolve()}")
    return study.trials[number].user_attrs["head"]


def run_head(spec: Any) -> dict[str, Any]:
    """The ``head`` of a run record (for :func:`train_config`) training the HeadSpec ``spec``: its
    fields but the input width, which the run's backbone sets."""
    return {"spec": {k: v for k, v in dataclasses.asdict(spec).items() if k != "in_dim"}}


# ---------------------------------------------------------------------- full-budget training
def train_config(objective: str, data: dict[str, str], seed: int, epochs: int, n_train: int | None, n_test: int | None,
                 head: dict[str, Any], out: Path, backbone: str | None, checkpoints: int = 4) -> Any:
    """The search's training config for ``objective`` (seed, views, optimiser, warm-up fraction)
    run ``epochs`` full epochs, with ``head`` ({"spec": dict} or {"preset", "smooth", "spec"}) and
    the probes on the test file; ``checkpoints`` evenly spaced checkpoints to resume from."""
    from geohead.training.config import config_from_dict
    from geohead.data import load_dataset
    from geohead.search.config import SearchConfig, base_train_config

    n = len(load_dataset(data["train"], train=True, n=n_train))
    steps = epochs * (n // 256)
    scfg = SearchConfig(objective=objective, data=data["train"], test=data["test"], n_train=n_train, seed=seed,
                        steps=steps, backbone=backbone)
    d, _ = base_train_config(scfg, n)
    d["out"] = str(out)
    d["data"].update(test=data["test"], n_test=n_test)
    d["track"].update(log_every=max(1, steps // 20), ckpt_every=max(1, steps // checkpoints))
    d["probe"] = {"enabled": True, "n_train": n_train, "n_test": n_test, "factors": False, "linear": True}
    d["head"] = head
    return config_from_dict(d)


def preset_head(objective: str, smooth: bool, widths: str) -> dict[str, Any]:
    """The method's preset (``smooth``: ReLU -> SiLU) with the shapes recipe's widths or the paper's."""
    import tomllib

    spec: dict[str, Any] = {}
    if widths == "recipe":
        recipe = tomllib.loads((ROOT / "geohead" / "recipes" / f"{objective}_shapes_cpu.toml").read_text())
        spec = dict(recipe.get("head", {}).get("spec", {}))
    return {"preset": objective, "smooth": smooth, "spec": spec}


def train_one(cfg: Any, keep: bool = False) -> dict[str, Any]:
    """Train ``cfg`` (or read its finished run): probes, wall time; its checkpoint deleted unless ``keep``."""
    from geohead.training.loop import train

    out = Path(cfg.out)
    done = out / "transfer.json"
    if done.is_file():
        return json.loads(done.read_text())
    t0 = time.perf_counter()
    res = train(cfg, overwrite=False)
    cls = res.probes["targets"]["class"]
    rec = {"steps": res.steps, "wall_s": time.perf_counter() - t0, "final_loss": res.final_loss,
           "knn_backbone": cls["backbone"]["knn"], "linear_backbone": cls["backbone"].get("linear"),
           "knn_head": cls["head"]["knn"], "linear_head": cls["head"].get("linear")}
    (out / "transfer.json").write_text(json.dumps(rec, indent=2) + "\n")
    if not keep:
        (out / "last.safetensors").unlink(missing_ok=True)
    return rec


# ---------------------------------------------------------------------- main
def plan(objective: str, folder: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The runs of one objective, most important first (found and published at the first seed,
    the SiLU preset, the best deep head, the other seeds, then the rest of the top-k)."""
    from geohead.heads import HeadSpec

    top, deep = candidates(folder, args.top_k)
    best = json.loads((folder / "search.json").read_text())["best"]
    by_number = {r["number"]: r for r in top}
    if deep is not None:
        by_number.setdefault(deep["number"], deep)

    def trial_run(label: str, row: dict[str, Any], seed: int) -> dict[str, Any]:
        spec = HeadSpec.from_dict(head_of_trial(folder, row["number"]))
        return {"label": label, "seed": seed, "trial": row["number"], "search_rank": row.get("search_rank"),
                "rung_score": row.get("rung_score"), "search": row, "head": run_head(spec), "desc": spec.describe()}

    def preset_run(label: str, smooth: bool, seed: int) -> dict[str, Any]:
        from geohead.heads import preset_spec

        head = preset_head(objective, smooth, args.published_widths)
        act = preset_spec(objective, 8, smooth=smooth).activation  # DINO's preset is GELU either way
        return {"label": label, "seed": seed, "trial": None, "search": {}, "head": head,
                "desc": f"{objective} preset, {act}, widths {head['spec'] or 'paper'}"}

    s0 = args.seeds[0]
    found_row = by_number.get(best["number"]) or {"number": best["number"], "search_rank": 1}
    runs = [trial_run("found", found_row, s0), preset_run("published", False, s0), preset_run("preset_silu", True, s0)]
    runs = [r for r in runs if r["label"] not in args.skip]
    if deep is not None and "best_deep" not in args.skip:
        runs.append(trial_run("best_deep", deep, s0))
    for s in args.seeds[1:]:
        runs += [trial_run("found", found_row, s), preset_run("published", False, s)]
    for i, row in enumerate(top):
        if row["number"] != best["number"]:
            runs.append(trial_run(f"top_{i + 1}", row, s0))
    return runs


def measure_objective(objective: str, folder: Path, args: argparse.Namespace, data: dict[str, str], out: Path,
                      prior: dict[tuple[str, str], dict[str, Any]], runs: list[dict[str, Any]],
                      summaries: list[dict[str, Any]], t0: float) -> str | None:
    """Train the :func:`plan` of ``objective`` (its search in ``folder``), each head and seed once
    (a run with the same head and seed under another label, or one of ``prior``, is not trained
    again), appending each run to ``runs`` and rewriting the results after it; then append the
    objective's summary to ``summaries``. Returns why it stopped early (``--time-budget`` spent
    since ``t0``), or None."""
    scale = SCALES[args.scale]
    stopped = None
    verdict = json.loads((folder / "search.json").read_text()).get("verdict")
    mine: list[dict[str, Any]] = []
    trained: dict[str, dict[str, Any]] = {}
    for run in plan(objective, folder, args):
        if args.time_budget is not None and time.perf_counter() - t0 > args.time_budget:
            stopped = f"time budget of {args.time_budget:.0f} s spent before {objective} {run['label']} seed {run['seed']}"
            break
        tag = f"{run['label']}_s{run['seed']}"
        key = json.dumps([run["head"], run["seed"]], sort_keys=True)
        if key in trained:  # the same head and seed under another label (e.g. the best deep head is the best)
            rec = trained[key]
        elif (objective, key) in prior:  # measured in an earlier sitting (its run folder may be gone)
            rec = trained[key] = prior[(objective, key)]
        else:
            cfg = train_config(objective, data, run["seed"], args.epochs, scale["n_train"], scale["n_test"],
                               run["head"], out / objective / "runs" / tag, args.backbone)
            print(f"[{objective}] {tag}: {run['desc']} ({args.epochs} epochs)", flush=True)
            rec = trained[key] = train_one(cfg)
        run.update(rec, objective=objective)
        mine.append(run)
        runs.append(run)
        print(f"[{objective}] {tag}: backbone kNN {rec['knn_backbone']:.3f}, linear {rec['linear_backbone']:.3f} "
              f"in {rec['wall_s']:.0f} s", flush=True)
        summaries_now = summaries + [summarise(objective, mine, args.seeds, verdict)]
        _write(out, args, runs, summaries_now, stopped, time.perf_counter() - t0)
    summaries.append(summarise(objective, mine, args.seeds, verdict))
    return stopped


def parser() -> argparse.ArgumentParser:
    """The command line of :func:`main`; a flag left out takes its ``--scale``'s default."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=sorted(SCALES), default="cpu")
    ap.add_argument("--objective", nargs="+", default=None, help="objectives (default: the scale's)")
    ap.add_argument("--epochs", type=int, default=None, help="full-budget epochs (default: the scale's)")
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="seeds of found vs published (first: every run)")
    ap.add_argument("--top-k", type=int, default=None, help="distinct search heads re-trained in full")
    ap.add_argument("--published-widths", choices=("recipe", "paper"), default=None)
    ap.add_argument("--search-timeout", type=float, default=None, help="seconds (default: the search's own, 390)")
    ap.add_argument("--search-trials", type=int, default=None,
                    help="distinct heads per search and no timeout: a result independent of the machine's load")
    ap.add_argument("--backbone", default=None, help="backbone of search and runs (default resnet18_w16)")
    ap.add_argument("--score", choices=("geometry", "theory"), default=None,
                    help="the search's label-free score (default: the search's own default, geometry)")
    ap.add_argument("--data-dir", default=str(SHARED), help="folder of cifar10_train_10k.npz and cifar10_test.npz")
    ap.add_argument("--time-budget", type=float, default=None, help="start no run after this many seconds")
    ap.add_argument("--skip", nargs="*", default=[], choices=("preset_silu", "best_deep"),
                    help="extra runs left out of the plan (e.g. to fit a sitting; found, published and the top-k stay)")
    ap.add_argument("--out", default="runs/search_transfer")
    ap.add_argument("--reuse", default=None, help="results.json whose objectives are taken as measured")
    ap.add_argument("--results", default=None,
                    help="a tracked copy of results.json, written after every run; its finished runs are not trained again")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    scale = SCALES[args.scale]
    for key in ("objectives", "epochs", "seeds", "top_k", "published_widths"):
        name = "objective" if key == "objectives" else key
        if getattr(args, name, None) is None:
            setattr(args, name, scale[key])
    data_dir = Path(args.data_dir)
    data = cifar_files(data_dir)
    if not all(Path(p).is_file() for p in data.values()):
        print(f"error: {data_dir} lacks cifar10_train_10k.npz / cifar10_test.npz (see ../shared/data/README.md)", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    earlier = earlier_results(args.results, args.epochs)
    prior = prior_runs(earlier)
    # the objectives this sitting does not measure keep their earlier runs and summaries
    runs = [r for r in earlier["runs"] if r["objective"] not in args.objective]
    summaries = [s for s in earlier["summaries"] if s["objective"] not in args.objective]
    stopped = None
    reused = json.loads(Path(args.reuse).read_text()) if args.reuse else {"runs": [], "summaries": []}
    for objective in args.objective:
        old = [r for r in reused["runs"] if r["objective"] == objective]
        if old:
            print(f"[{objective}] reusing the runs of {args.reuse}", flush=True)
            runs += old
            summaries.append({**summarise(objective, old, args.seeds), "reused_from": args.reuse})
            continue
        folder = run_the_search(objective, out, data, args.seeds[0], scale, args.search_timeout, args.backbone,
                                args.search_trials, **({"score": args.score} if args.score else {}))
        stopped = measure_objective(objective, folder, args, data, out, prior, runs, summaries, t0)
        if stopped:
            break
    _write(out, args, runs, summaries, stopped, time.perf_counter() - t0)
    print(table(summaries, runs))
    if stopped:
        print(f"stopped: {stopped}")
    return 0


#: What a finished run's record holds (train_one's output).
RUN_FIELDS = ("steps", "wall_s", "final_loss", "knn_backbone", "linear_backbone", "knn_head", "linear_head")


def earlier_results(path: str | None, epochs: int) -> dict[str, Any]:
    """The results file ``path`` of an earlier sitting at the same epochs (``runs`` and
    ``summaries``; both empty when there is none)."""
    old = json.loads(Path(path).read_text()) if path is not None and Path(path).is_file() else {}
    if old.get("settings", {}).get("epochs") != epochs:
        return {"runs": [], "summaries": []}
    return {"runs": old.get("runs", []), "summaries": old.get("summaries", [])}


def prior_runs(earlier: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """(objective, [head, seed] key) -> the record of a run the ``earlier`` results hold, so a
    plan spanning several sittings trains each run once even when its folder is gone."""
    return {(r["objective"], json.dumps([r["head"], r["seed"]], sort_keys=True)): {k: r.get(k) for k in RUN_FIELDS}
            for r in earlier["runs"] if r.get("knn_backbone") is not None}


def _write(out: Path, args: argparse.Namespace, runs: list[dict[str, Any]], summaries: list[dict[str, Any]],
           stopped: str | None, wall: float) -> None:
    from geohead.io import atomic_write_text

    settings = {k: v for k, v in vars(args).items()}
    rec = {"settings": settings, "wall_s": wall, "stopped": stopped, "summaries": summaries,
           "runs": [{k: v for k, v in r.items() if k != "search"} | {"search": {c: (r.get("search") or {}).get(c)
                                                                                for c in CRITERIA}}
                    for r in runs]}
    atomic_write_text(out / "results.json", json.dumps(rec, indent=2, default=str) + "\n")
    if args.results:
        atomic_write_text(Path(args.results), json.dumps(rec, indent=2, default=str) + "\n")
    atomic_write_text(out / "table.md", table(summaries, runs))


if __name__ == "__main__":
    sys.exit(main())
