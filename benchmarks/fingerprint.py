"""Numbers that a refactor must not move (issue 25): a search's trials and a training run's losses.

Prints (and writes to ``--out``) a JSON fingerprint:

* ``search``: every trial of ``geohead search --objective barlow --trials 6 --timeout 0 --seed 0``
  (``--tiny``: the test suite's tiny search, 4 trials of 2 steps) with its number, state, value,
  head and every recorded criterion (floats as exact hex), and the verdict;
* ``train``: the losses of ``geohead train barlow_shapes_cpu --set optim.max_steps=40``
  (``--tiny``: 4 steps on 256 images), as exact hex.

Compare two commits: run it in a worktree of each (``PYTHONPATH=<worktree>``) and diff the files.
Keys renamed on purpose (issue 25: ``heff_isotropy`` -> ``heff_spread``, mapped when the print is
made; the search's scaled ``std_backbone``/``std_head`` -> ``std_ratio_*``, mapped by
``--compare BEFORE AFTER`` where AFTER has ``std_ratio_*``) so values compare;
``--compare`` prints how many values are identical and every one that is not (exit 1 then).
Keys only AFTER has (new records) are listed, not compared.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

RENAMED = {"heff_isotropy": "heff_spread", "screen_heff_isotropy": "screen_heff_spread"}
TINY = dict(n_train=256, batch_size=64, steps=2, probe_train=128, probe_test=64, orbit_images=8, families=("hue",),
            screen_batch=64)


def _hex(v: Any) -> Any:
    return float(v).hex() if isinstance(v, float) else v


def search_print(tmp: Path, tiny: bool) -> dict[str, Any]:
    import optuna

    from geohead.search import SearchConfig, run_search

    kw = dict(TINY, trials=4) if tiny else dict(trials=6)
    cfg = SearchConfig(objective="barlow", out=str(tmp / "search"), timeout=None, seed=0, progress=False, **kw)
    res = run_search(cfg, echo=lambda s: None)
    study = optuna.load_study(study_name=res.study_name, storage=f"sqlite:///{tmp / 'search' / 'study.db'}")
    trials = []
    for t in study.trials:
        ua = {RENAMED.get(k, k): _hex(v) for k, v in sorted(t.user_attrs.items())
              if k not in ("worker", "train_seconds", "screen_seconds", "eval_seconds", "rungs")}
        trials.append({"number": t.number, "state": t.state.name, "values": [_hex(v) for v in (t.values or [])], **ua})
    return {"trials": trials, "verdict": res.summary.get("verdict")}


def train_print(tmp: Path, tiny: bool) -> list[str]:
    from geohead.training.config import load_recipe
    from geohead.training.loop import train

    root = Path(__file__).resolve().parents[1]
    sets = [f'out="{tmp / "train"}"', "optim.max_steps=40", "track.progress=false", "track.log_every=1"]
    if tiny:
        sets = [f'out="{tmp / "train"}"', "optim.max_steps=4", "data.n_train=256", "optim.batch_size=64",
                "probe.enabled=false", "track.progress=false", "track.log_every=1"]
    train(load_recipe(root / "geohead" / "recipes" / "barlow_shapes_cpu.toml", sets))
    lines = [json.loads(x) for x in (tmp / "train" / "metrics.jsonl").read_text().splitlines()]
    return [_hex(r["loss"]) for r in lines if "loss" in r and r.get("kind") is None]


def _flat(x: Any, path: str = "") -> dict[str, Any]:
    if isinstance(x, dict):
        return {k2: v2 for k, v in x.items() for k2, v2 in _flat(v, f"{path}.{k}").items()}
    if isinstance(x, list):
        return {k2: v2 for i, v in enumerate(x) for k2, v2 in _flat(v, f"{path}[{i}]").items()}
    return {path: x}


def compare(before: Path, after: Path) -> int:
    """Every value of ``before`` against ``after`` (the search's ``std_*`` under ``std_ratio_*``
    where ``after`` has those); 0 when all are identical."""
    a, b = _flat(json.loads(before.read_text())), _flat(json.loads(after.read_text()))
    ratio = {"std_backbone": "std_ratio_backbone", "std_head": "std_ratio_head"}
    differ = []
    for key, value in a.items():
        head, _, leaf = key.rpartition(".")
        other = f"{head}.{ratio[leaf]}" if leaf in ratio and f"{head}.{ratio[leaf]}" in b else key
        if b.get(other) != value:
            differ.append((key, value, b.get(other)))
    new = sorted({k.rpartition(".")[2] for k in b} - {k.rpartition(".")[2] for k in a} - set(ratio.values()))
    print(f"{len(a) - len(differ)} of {len(a)} values identical; keys only in {after.name}: {new}")
    for key, x, y in differ:
        print(f"  {key}: {x} -> {y}")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), default=None,
                    help="compare two prints instead of making one")
    args = ap.parse_args(argv)
    if args.compare:
        return compare(Path(args.compare[0]), Path(args.compare[1]))
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        fp = {"search": search_print(Path(tmp), args.tiny), "train": train_print(Path(tmp), args.tiny)}
    text = json.dumps(fp, indent=1, sort_keys=True, default=str)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(f"{len(fp['search']['trials'])} trials, {len(fp['train'])} losses")
    return 0


if __name__ == "__main__":
    sys.exit(main())
