"""Nothing lost, nothing silently wrong (issue 24): faults a real run meets, simulated.

A flipped bit in a checkpoint, a metrics line torn by a kill, a finished run rerun, two searches
started together on a new SQLite study, exports killed mid-write and between their two renames,
and a search whose timeout passes while a trial trains.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tiny_runs import ROOT, TINY, tiny_run

RECIPE = str(ROOT / "recipes" / "barlow_shapes_cpu.toml")


@pytest.fixture()
def run_copy(tmp_path_factory, tmp_path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(tiny_run(tmp_path_factory, "barlow"), out)
    return out


def _train(out: Path, *extra: str):
    from geohead.cli import main

    args = ["train", RECIPE, "--out", str(out)]
    for item in (*TINY, *extra):
        args += ["--set", item]
    return CliRunner().invoke(main, args)


def _strict_json(text: str):
    def refuse(name: str):
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_a_flipped_data_bit_stops_the_resume_and_rewrites_nothing(run_copy) -> None:
    ckpt = run_copy / "last.ckpt"
    data = bytearray(ckpt.read_bytes())
    data[-3] ^= 0x01  # one mantissa bit of a stored value: before, the run resumed from it with exit 0
    ckpt.write_bytes(bytes(data))
    before = {p.name: p.read_bytes() for p in run_copy.iterdir() if p.is_file()}
    res = _train(run_copy, "optim.max_steps=3")
    assert res.exit_code == 2, res.output
    assert "fails its checksum" in res.output and "Traceback" not in res.output
    assert {p.name: p.read_bytes() for p in run_copy.iterdir() if p.is_file()} == before


def test_a_torn_metrics_line_is_dropped_and_the_run_resumes(run_copy) -> None:
    metrics = run_copy / "metrics.jsonl"
    with open(metrics, "a") as f:
        f.write('{"step": 3, "epoch": 0.75, "lo')  # a kill in the middle of a write
    res = _train(run_copy, "optim.max_steps=3")
    assert res.exit_code == 0, res.output
    assert "dropped 1 torn line" in res.output
    records = [_strict_json(line) for line in metrics.read_text().splitlines()]
    steps = [r["step"] for r in records if "loss" in r]
    assert steps == sorted(set(steps)) and steps[-1] == 3


def test_rerunning_a_finished_run_keeps_a_valid_summary(run_copy) -> None:
    from geohead.training.checkpoint import load_checkpoint

    last_loss = load_checkpoint(run_copy).meta["last_loss"]
    res = _train(run_copy)  # nothing left to train
    assert res.exit_code == 0, res.output
    summary = _strict_json((run_copy / "summary.json").read_text())  # before: "final_loss": NaN
    assert summary["final_loss"] == pytest.approx(last_loss)


RACE = """
import sys, time
from pathlib import Path
import optuna
from geohead.search.storage import open_storage
optuna.logging.set_verbosity(optuna.logging.WARNING)
go = Path(sys.argv[2])
Path(sys.argv[3]).write_text("ready")
while not go.exists():
    time.sleep(0.002)
optuna.create_study(study_name="s", storage=open_storage(sys.argv[1], 20), load_if_exists=True)
print("opened")
"""


def test_searches_started_together_on_a_new_sqlite_study_both_run(tmp_path) -> None:
    """Before: one of two processes failed (IntegrityError on alembic_version, or "table studies
    already exists") when both created the new database's tables at once."""
    url, go = f"sqlite:///{tmp_path / 'study.db'}", tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", RACE, url, str(go), str(tmp_path / f"ready{i}")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
    deadline = time.time() + 120
    while not all((tmp_path / f"ready{i}").exists() for i in range(3)) and time.time() < deadline:
        time.sleep(0.05)
    go.write_text("go")
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [r[1][-800:] for r in results]
    assert all(r[0].strip() == "opened" for r in results)


KILL = """
import os, signal, sys
from pathlib import Path
import geohead.export.write as w
run, out, when = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
real_replace, real_save = w.os.replace, w.save_safetensors

def replace(src, dst):
    if when == "between" and Path(dst) == out and ".tmp-" in Path(src).name:
        os.kill(os.getpid(), signal.SIGKILL)  # the old export is aside, the new one not yet in place
    return real_replace(src, dst)

def save(path, *a, **k):
    if when == "writing":
        os.kill(os.getpid(), signal.SIGKILL)
    return real_save(path, *a, **k)

w.os.replace, w.save_safetensors = replace, save
w.export_backbone(run, out, overwrite=True)
"""


def _killed_export(run: Path, out: Path, when: str) -> None:
    res = subprocess.run([sys.executable, "-c", KILL, str(run), str(out), when], env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == -9, res.stderr[-2000:]


def test_an_export_killed_between_its_renames_is_recovered(run_copy, tmp_path) -> None:
    from geohead.export import export_backbone, load_backbone

    out = tmp_path / "exp"
    first = export_backbone(run_copy, out)
    _killed_export(run_copy, out, "between")
    assert not out.exists() and [p.name for p in tmp_path.glob(".exp.old-*")]  # before: left like this for good
    res = export_backbone(run_copy, out, overwrite=True)
    assert any("restored the previous export" in line for line in res.recovered)
    assert any("removed .exp.tmp-" in line for line in res.recovered)
    assert load_backbone(out) is not None and res.checksum == first.checksum
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".exp")) == []


def test_an_export_killed_while_writing_leaves_a_folder_the_next_call_removes(run_copy, tmp_path) -> None:
    from geohead.export import export_backbone

    out = tmp_path / "exp"
    _killed_export(run_copy, out, "writing")
    assert [p.name for p in tmp_path.glob(".exp.tmp-*")] and not out.exists()
    live = tmp_path / f".exp.tmp-{os.getppid()}-live"  # an export still running elsewhere: left alone
    live.mkdir()
    res = export_backbone(run_copy, out)
    assert any("removed .exp.tmp-" in line for line in res.recovered)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".exp")) == [live.name]


@pytest.mark.usefixtures("one_thread", "tiny_whitening")
def test_the_search_timeout_stops_the_trial_in_flight(tmp_path) -> None:
    """Before: the trial in flight ran to its end (a --timeout 480 search took 604 s)."""
    from geohead.search import SearchConfig, run_search
    from geohead.search.outputs import read_trials_csv

    cfg = SearchConfig(out=str(tmp_path / "s"), n_train=64, batch_size=16, steps=4000, trials=3, probe_train=64,
                       probe_test=32, orbit_images=8, families=("hue",), screen_batch=16, timeout=6, progress=False,
                       heartbeat=2, device="cpu")
    t0 = time.perf_counter()
    run_search(cfg, echo=lambda s: None)
    elapsed = time.perf_counter() - t0
    rows = read_trials_csv(tmp_path / "s" / "trials.csv")
    assert rows and rows[0]["state"] == "PRUNED", rows
    study_attrs = _trial_attrs(tmp_path / "s", 0)
    assert "timeout" in study_attrs["pruned_by"] and study_attrs["steps_trained"] < 4000
    assert elapsed < 90, elapsed  # 4000 steps would take minutes


def _trial_attrs(out: Path, number: int) -> dict:
    import optuna

    study = optuna.load_study(study_name="barlow-shapes-default", storage=f"sqlite:///{out / 'study.db'}")
    return study.trials[number].user_attrs


@pytest.mark.slow
def test_two_geohead_search_commands_started_together_both_finish(tmp_path) -> None:
    """The whole command, twice at once on one new study (default storage OUT/study.db)."""
    args = [sys.executable, "-m", "geohead.cli", "search", "--out", str(tmp_path / "s"), "--steps", "2", "--trials", "2",
            "--n-train", "64", "--batch-size", "16", "--probe-train", "32", "--probe-test", "32", "--timeout", "120",
            "--no-progress", "--device", "cpu"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [r[1][-1500:] for r in results]
    assert (tmp_path / "s" / "best_head.json").is_file()
