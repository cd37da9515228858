"""Normal runs print no FutureWarning or DeprecationWarning: every command of a short pipeline,
and training under torchrun, run with those warnings turned into errors (for child processes too)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_runs import TINY

ROOT = Path(__file__).resolve().parents[1]
ERRORS = "error::FutureWarning,error::DeprecationWarning"


def run(args: list[str], cwd: Path, module: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS=ERRORS)
    cmd = [sys.executable, "-W", "error::FutureWarning", "-W", "error::DeprecationWarning"]
    cmd += (["-m", "geohead.cli"] if module else []) + args
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=cwd)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "FutureWarning" not in out and "DeprecationWarning" not in out, out[-4000:]
    return proc


def sets(items: list[str]) -> list[str]:
    return [a for s in items for a in ("--set", s)]


def test_search_train_export_diagnose_report_are_quiet(tmp_path):
    search = run(["search", "--objective", "barlow", "--n-train", "256", "--batch-size", "64", "--steps", "2",
                  "--trials", "1", "--timeout", "0", "--probe-train", "128", "--probe-test", "64", "--no-progress",
                  "--out", str(tmp_path / "search")], ROOT)
    assert "0 failed" in search.stdout  # a warning turned error inside a trial would fail the trial
    recipe = str(ROOT / "geohead" / "recipes" / "barlow_shapes_cpu.toml")
    run(["train", recipe, "--out", str(tmp_path / "run"), *sets(TINY + ["probe.enabled=true", "probe.n_train=64",
                                                                         "probe.n_test=64"])], ROOT)
    run(["export", str(tmp_path / "run"), "--out", str(tmp_path / "export")], ROOT)
    run(["diagnose", str(tmp_path / "run")], ROOT)
    run(["report", str(tmp_path / "run")], ROOT)
    assert (tmp_path / "run" / "report.html").is_file()


@pytest.mark.skipif(sys.platform == "win32", reason="torchrun with gloo")
def test_train_under_torchrun_is_quiet(tmp_path):
    recipe = str(ROOT / "geohead" / "recipes" / "barlow_shapes_cpu.toml")
    args = ["-m", "torch.distributed.run", "--nproc_per_node", "2", "--rdzv_backend", "c10d",
            "--rdzv_endpoint", "127.0.0.1:0", "-m", "geohead.cli", "train", recipe, "--out", str(tmp_path / "dist")]
    args += sets(["data.n_train=128", "optim.batch_size=32", "optim.max_steps=2", "head.spec.hidden_dim=32",
                  "track.log_every=1", "track.monitor_every=1", "track.progress=false", "probe.enabled=false",
                  'backbone.name="vit_tiny_cifar"', "backbone.args={depth=1, embed_dim=32, num_heads=2}",
                  'head.spec.norm="layer"'])
    try:
        run(args, ROOT, module=False)
    except AssertionError as e:
        # gloo aborting one rank at exit after both finished (seen once in a clean-clone CI run on 2 cores,
        # before train() gained its closing barrier): launch once more, then judge; any other failure counts
        if "terminate called without an active exception" not in str(e):
            raise
        run(args + ["--overwrite"], ROOT, module=False)
    assert (tmp_path / "dist" / "last.safetensors").is_file()
