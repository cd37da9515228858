"""Every seed the bounds admit (0 to 2^62) trains and searches: the seeds mixed from it (with the
step, the epoch, the worker) are folded into what torch (64 bits) and Optuna (32 bits) take, and a
seed that was already valid draws exactly what it drew before."""
from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from tiny_runs import ROOT, TINY

RECIPE = str(ROOT / "geohead" / "recipes" / "barlow_shapes_cpu.toml")
TOP = 2 ** 62  # MAX_SEED


def test_fold_seed_keeps_valid_seeds_and_folds_the_rest() -> None:
    from geohead.data.loaders import fold_seed

    assert fold_seed(12345) == 12345 and fold_seed(2 ** 64 - 1) == 2 ** 64 - 1
    assert fold_seed(2 ** 64 + 7) == 7 and fold_seed(2 ** 32 + 5, bits=32) == 5
    assert fold_seed(TOP * 1_000_003 + 9) < 2 ** 64
    torch.Generator().manual_seed(fold_seed(TOP * 1_000_003 + 9))  # accepted: the unfolded value overflows
    with pytest.raises((RuntimeError, ValueError), match="Overflow"):
        torch.Generator().manual_seed(TOP * 1_000_003 + 9)


def test_training_at_the_largest_seed_runs(tmp_path) -> None:
    from geohead.cli import main

    res = CliRunner().invoke(main, ["train", RECIPE, *[a for t in TINY for a in ("--set", t)], "--set", f"seed={TOP}",
                                    "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "run" / "config.json").read_text())["seed"] == TOP
    assert (tmp_path / "run" / "last.safetensors").is_file()


def test_searching_at_the_largest_seed_runs(tmp_path) -> None:
    from geohead.cli import main

    args = ["search", "--steps", "2", "--trials", "1", "--n-train", "64", "--batch-size", "16", "--probe-train", "32",
            "--probe-test", "32", "--no-progress", "--device", "cpu", "--confirm-seeds", "0", "--seed", str(TOP),
            "--out", str(tmp_path / "s")]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "s" / "search.json").read_text())["settings"]["seed"] == TOP
