"""Nothing lost, nothing silently wrong: faults a real run meets, simulated.

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

RECIPE = str(ROOT / "geohead" / "recipes" / "barlow_shapes_cpu.toml")


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


def test_a_run_killed_before_its_first_checkpoint_starts_its_records_afresh(run_copy) -> None:
    """Its folder holds config.json and metrics.jsonl but no checkpoint: the rerun trains from step 0
    and metrics.jsonl holds that run's lines alone (before: the killed run's lines, then the new ones)."""
    (run_copy / "last.safetensors").unlink()
    before = [json.loads(ln) for ln in (run_copy / "metrics.jsonl").read_text().splitlines()]
    res = _train(run_copy)
    assert res.exit_code == 0, res.output
    lines = [json.loads(ln) for ln in (run_copy / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in lines if "loss" in r]
    assert steps == sorted(set(steps)) and len(lines) == len(before)


def test_a_flipped_data_bit_stops_the_resume_and_rewrites_nothing(run_copy) -> None:
    ckpt = run_copy / "last.safetensors"
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


def test_a_report_skips_run_records_nested_too_deeply_with_a_note(run_copy, tmp_path) -> None:
    """config.json and probes.json nested 10^5 deep (a RecursionError inside the json module, a
    traceback before): the page is written without them, a note naming each."""
    from geohead.report.page import make_report

    for name in ("config.json", "probes.json"):
        (run_copy / name).write_text("[" * 100_000 + "]" * 100_000)
    res = make_report(run_copy, tmp_path / "r")
    assert res.html.is_file()
    assert sorted(n.split(" is not")[0] for n in res.notes if "nested too deeply" in n) == [
        f"config {str(run_copy / 'config.json')!r}", f"probes {str(run_copy / 'probes.json')!r}"]


def test_a_report_makes_nothing_beside_its_out_folder(run_copy, tmp_path, monkeypatch) -> None:
    """Its temporary folder is made inside --out (before: in --out's parent, the folder above the
    run with no --out), and the page lands in --out."""
    import tempfile

    from geohead.report.page import make_report

    made: list[Path] = []
    real = tempfile.mkdtemp
    monkeypatch.setattr(tempfile, "mkdtemp", lambda *a, **k: made.append(Path(real(*a, **k))) or made[-1])
    out = tmp_path / "r"
    before = sorted(p.name for p in tmp_path.iterdir())
    res = make_report(run_copy, out)
    drawn = [p for p in made if p.name.startswith(".report.tmp-")]  # not folder_problem's probe, removed at once
    assert [p.parent for p in drawn] == [out] and not drawn[0].exists() and res.html == out / "report.html"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, "r"])


def test_a_killed_overwrite_puts_back_a_previous_out_folder_with_files_of_its_own(tmp_path) -> None:
    """--out, set aside by --overwrite with a README of the user's in it, is put back whole when the
    export was killed before the new folder took its place."""
    from geohead.export.write import recover_interrupted

    old = tmp_path / f".exp.old-{2 ** 31 - 1}"
    old.mkdir()
    for name in ("model.safetensors", "README.md"):
        (old / name).write_text("mine")
    assert recover_interrupted(tmp_path / "exp") == [
        f"restored the previous export {tmp_path / 'exp'} from {old.name} (an export was killed while replacing it)"]
    assert sorted(p.name for p in (tmp_path / "exp").iterdir()) == ["README.md", "model.safetensors"] and not old.exists()


def test_the_sweep_of_killed_exports_removes_only_export_files(tmp_path) -> None:
    """Folders named like a killed export's but holding anything else are left as they are
    (before: removed whole, or moved into --out's place)."""
    from geohead.export.write import recover_interrupted

    dead = 2 ** 31 - 1  # no such process
    theirs, old = tmp_path / f".exp.tmp-{dead}-notes", tmp_path / f".exp.old-{dead}"
    for folder, name in ((theirs, "notes.txt"), (old, "model.safetensors")):
        folder.mkdir()
        (folder / name).write_text("kept")
    (old / "sub").mkdir()
    (tmp_path / "exp").mkdir()  # --out is in place: the old folder is not put back, and not removed either
    ours = tmp_path / f".exp.tmp-{dead}-x"
    ours.mkdir()
    (ours / "config.json").write_text("{}")
    (ours / ".model.safetensors.tmpab12").write_bytes(b"")
    done = recover_interrupted(tmp_path / "exp")
    assert (theirs / "notes.txt").read_text() == "kept" and (old / "model.safetensors").read_text() == "kept"
    assert not ours.exists() and not any((tmp_path / "exp").iterdir())
    assert sorted(done) == [f"left {old.name} as it is: it holds files an export does not write",
                            f"left {theirs.name} as it is: it holds files an export does not write",
                            f"removed {ours.name}, left by a killed export"]


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


# ---------------------------------------------------------------------- trust, second pass
# Ctrl-C during a search, a full or read-only disk, flipped format tags and header bytes, edited
# config.json fields, non-finite weights, links at the names geohead writes.
@pytest.mark.usefixtures("one_thread", "tiny_whitening")
def test_ctrl_c_during_a_search_is_one_line_and_the_trial_is_retried(tmp_path, monkeypatch, capfd) -> None:
    """Before: Optuna's KeyboardInterrupt traceback; the stopped trial stayed FAIL, counted towards
    --trials and was never retried."""
    import optuna

    from geohead.cli import main
    from geohead.search.storage import count_trials
    from geohead.search.trial import TrialRunner

    out = tmp_path / "s"
    args = ["search", "--out", str(out), "--steps", "2", "--trials", "1", "--n-train", "64", "--batch-size", "16",
            "--probe-train", "32", "--probe-test", "32", "--timeout", "60", "--no-progress", "--device", "cpu",
            "--confirm-seeds", "0"]
    real = TrialRunner._train_and_measure

    def interrupted(self, trial, spec):
        raise KeyboardInterrupt

    monkeypatch.setattr(TrialRunner, "_train_and_measure", interrupted)
    res = CliRunner().invoke(main, args)
    captured = capfd.readouterr()
    text = res.output + captured.out + captured.err
    assert res.exit_code == 130, text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert "interrupted: writing the outputs" in text and "rerun the same command" in text
    storage = f"sqlite:///{out / 'study.db'}"
    study = optuna.load_study(study_name="barlow-shapes-default", storage=storage)
    assert [t.state.name for t in study.trials] == ["FAIL"] and study.trials[0].user_attrs["interrupted"]
    assert count_trials(study)["done"] == 0  # not counted towards --trials
    monkeypatch.setattr(TrialRunner, "_train_and_measure", real)
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    study = optuna.load_study(study_name="barlow-shapes-default", storage=storage)
    retry = study.trials[1]
    assert retry.state.name in ("COMPLETE", "PRUNED") and retry.user_attrs["retry_of"] == 0
    assert retry.params == study.trials[0].params and retry.user_attrs.get("reference") == study.trials[0].user_attrs.get("reference")
    assert count_trials(study)["done"] == 1


DISK_FULL = "disk full / read-only: nothing was lost, free space and rerun"


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_full_disk_during_export_is_exit_2_and_the_old_export_stays(run_copy, tmp_path, monkeypatch) -> None:
    """Before: a raw SafetensorError traceback (the data was safe)."""
    import safetensors.torch
    from safetensors import SafetensorError

    from geohead.cli import main

    out = tmp_path / "exp"
    assert CliRunner().invoke(main, ["export", str(run_copy), "--out", str(out)]).exit_code == 0
    before = _files(out)

    def full(*a, **k):
        raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })')

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    res = CliRunner().invoke(main, ["export", str(run_copy), "--out", str(out), "--overwrite"])
    assert res.exit_code == 2 and DISK_FULL in res.output and "full" in res.output, res.output
    assert "Traceback" not in res.output
    assert _files(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp", "run"]  # no temporary folder left


def test_a_read_only_disk_at_a_checkpoint_is_exit_2_and_the_last_checkpoint_stays(run_copy, monkeypatch) -> None:
    """Before: a raw OSError traceback from the checkpoint write."""
    import errno

    import geohead.io as gio

    before = (run_copy / "last.safetensors").read_bytes()
    real = os.replace

    def read_only(src, dst):
        if Path(dst).name == "last.safetensors":
            raise OSError(errno.EROFS, "Read-only file system", str(dst))
        return real(src, dst)

    monkeypatch.setattr(gio.os, "replace", read_only)
    res = _train(run_copy, "optim.max_steps=3")
    assert res.exit_code == 2 and DISK_FULL in res.output and "read-only" in res.output, res.output
    assert (run_copy / "last.safetensors").read_bytes() == before
    assert not [p.name for p in run_copy.iterdir() if p.name.startswith(".last.safetensors.tmp")]


@pytest.mark.parametrize("code, word", [(28, "full"), (30, "read-only"), (122, "full")])
def test_disk_errors_become_one_error_type(code: int, word: str) -> None:
    from geohead.io import DiskFullError, disk_error

    err = disk_error(OSError(code, os.strerror(code)), "x/last.safetensors")
    assert isinstance(err, DiskFullError) and isinstance(err, ValueError) and err.errno == code
    assert word in str(err) and DISK_FULL in str(err) and "last.safetensors" in str(err)
    other = OSError(13, "Permission denied")
    assert disk_error(other, "x") is other


def _flip(path: Path, pos: int, bit: int = 1) -> None:
    data = bytearray(path.read_bytes())
    data[pos] ^= bit
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("offset", [0, 3, 8, 16, 24, 28])
def test_a_flipped_format_tag_does_not_switch_the_checksum_off(run_copy, offset: int) -> None:
    """Before: a flipped bit in the tag made `export file.ckpt` read it as a foreign file and
    skip the checksum."""
    from geohead.cli import main

    ckpt = run_copy / "last.safetensors"
    pos = ckpt.read_bytes().index(b"geohead.training.checkpoint/1") + offset
    _flip(ckpt, pos)
    out = run_copy.parent / "exp"
    res = CliRunner().invoke(main, ["export", str(ckpt), "--out", str(out)])
    assert res.exit_code == 2 and "checksum" in res.output, res.output
    assert not out.exists()


def test_a_flipped_format_tag_stops_diagnose_and_the_resume(run_copy) -> None:
    from geohead.cli import main

    ckpt = run_copy / "last.safetensors"
    _flip(ckpt, ckpt.read_bytes().index(b"geohead.training.checkpoint/1") + 5)
    before = _files(run_copy)
    res = CliRunner().invoke(main, ["diagnose", str(ckpt), "--json", str(run_copy.parent / "d.json")])
    assert res.exit_code == 2 and "checksum" in res.output, res.output
    res = _train(run_copy, "optim.max_steps=3")
    assert res.exit_code == 2 and "checksum" in res.output, res.output
    assert _files(run_copy) == before and not (run_copy.parent / "d.json").exists()


@pytest.fixture()
def export_dir(run_copy, tmp_path) -> Path:
    from geohead.export import export_backbone

    out = tmp_path / "exp"
    export_backbone(run_copy, out, with_head=True)
    return out


def _header_positions(path: Path, step: int) -> list[int]:
    import struct

    n = struct.unpack("<Q", path.read_bytes()[:8])[0]
    return list(range(8, 8 + n, step))


@pytest.mark.parametrize("name, step", [("model.safetensors", 37), ("head.safetensors", 1)])
def test_every_flipped_header_byte_is_refused(export_dir, name: str, step: int) -> None:
    """Before: 7 of 152 flipped positions in model.safetensors and 19 of 82 in head.safetensors
    loaded (metadata the checksum did not cover). Now config.json and both headers are covered."""
    import warnings

    from geohead.export import load_backbone, load_head

    path = export_dir / name
    clean = path.read_bytes()
    passed = []
    for pos in _header_positions(path, step):
        _flip(path, pos)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                (load_backbone if name == "model.safetensors" else load_head)(export_dir)
            passed.append(pos)
        except ValueError:
            pass
        path.write_bytes(clean)
    assert passed == [], f"{len(passed)} flipped header bytes of {name} loaded: {passed[:10]}"


EDITS = {
    "mean": lambda c: c["pretrained_cfg"].__setitem__("mean", [0.5, 0.5, 0.5]),
    "std": lambda c: c["pretrained_cfg"].__setitem__("std", [0.1, 0.1, 0.1]),
    "input_size": lambda c: c["pretrained_cfg"].__setitem__("input_size", [3, 64, 64]),
    "interpolation": lambda c: c["pretrained_cfg"].__setitem__("interpolation", "nearest"),
    "channels_last": lambda c: c["geohead"]["backbone"].__setitem__("channels_last", False),
    "integrity-removed": lambda c: c["geohead"].pop("integrity"),
}


@pytest.mark.parametrize("field", list(EDITS))
def test_an_edited_config_json_field_is_refused(export_dir, field: str) -> None:
    """Before: config.json (mean/std, input size, architecture) had no checksum: an edit loaded."""
    from geohead.export import load_backbone, load_head

    cfg_path = export_dir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    EDITS[field](cfg)
    cfg_path.write_text(json.dumps(cfg, indent=2))
    for load in (load_backbone, load_head):
        with pytest.raises(ValueError, match="config.json or a file's header changed"):
            load(export_dir)


def test_non_finite_weights_are_refused_at_export_and_load(run_copy, tmp_path, monkeypatch) -> None:
    """Before: an all-NaN backbone exported and loaded without a word."""
    import torch

    import geohead.export.write as write
    from geohead.cli import main
    from geohead.export import export_backbone, load_backbone
    from geohead.training.checkpoint import load_checkpoint, save_checkpoint

    ck = load_checkpoint(run_copy)
    name = next(k for k in ck.tensors if k.startswith("model.backbone.") and ck.tensors[k].is_floating_point())
    save_checkpoint(run_copy / "last.safetensors", {**ck.tensors, name: torch.full_like(ck.tensors[name], float("nan"))}, ck.meta)
    res = CliRunner().invoke(main, ["export", str(run_copy), "--out", str(tmp_path / "e")])
    assert res.exit_code == 2 and "NaN" in res.output and name[len("model.backbone."):] in res.output, res.output
    assert not (tmp_path / "e").exists()
    monkeypatch.setattr(write, "nonfinite_problem", lambda *a, **k: None)  # an export written by a geohead that did not check
    export_backbone(run_copy, tmp_path / "e")
    with pytest.raises(ValueError, match="NaN"):
        load_backbone(tmp_path / "e")


def test_writers_replace_a_planted_link_and_appenders_refuse_it(tmp_path) -> None:
    """Whole-file writes replace a link at their name (the target is untouched); appends
    (metrics.jsonl) refuse it; readers refuse a link out of the folder."""
    from geohead.io import OutsideFolderError, append_text, atomic_write_text, path_in

    folder, target = tmp_path / "run", tmp_path / "victim.txt"
    folder.mkdir()
    target.write_text("precious\n")
    os.symlink(target, folder / "summary.json")
    os.symlink(target, folder / "metrics.jsonl")
    atomic_write_text(folder / "summary.json", "{}\n")
    assert not (folder / "summary.json").is_symlink() and (folder / "summary.json").read_text() == "{}\n"
    with pytest.raises(OutsideFolderError, match="symbolic link"):
        append_text(folder / "metrics.jsonl", '{"step": 1}\n')
    with pytest.raises(OutsideFolderError, match="victim.txt"):
        path_in(folder, "metrics.jsonl", "run file")
    assert target.read_text() == "precious\n"
    (folder / "inner.json").write_text("{}")
    os.symlink(folder / "inner.json", folder / "alias.json")
    assert path_in(folder, "alias.json") == folder / "alias.json"  # a link that stays inside is fine


@pytest.mark.usefixtures("one_thread")
def test_the_search_plots_replace_a_planted_link(tmp_path) -> None:
    """Before: a rerun of geohead search (and geohead report) saved its PNGs through a link
    already in the folder, overwriting the link's target."""
    from geohead.search import write_search_plots

    folder, target = tmp_path / "s", tmp_path / "victim.png"
    folder.mkdir()
    target.write_text("precious\n")
    header = "number,state,score,knn_backbone,rankme_backbone,orbit_compression,depth,hidden_dim,out_dim,activation,norm"
    rows = [f"{i},COMPLETE,{0.1 * i},{0.2 + 0.05 * i},{10 + i},{0.3 - 0.01 * i},{2 + i % 2},{64 * (1 + i % 3)},64,silu,batch"
            for i in range(6)]
    (folder / "trials.csv").write_text("\n".join([header, *rows]) + "\n")
    for name in ("criteria_vs_knn.png", "pareto_front.png", "param_importances.png"):
        os.symlink(target, folder / name)
    written = write_search_plots(folder)
    assert written and all(not p.is_symlink() and p.read_bytes()[:4] == b"\x89PNG" for p in written)
    assert target.read_text() == "precious\n"


@pytest.mark.usefixtures("one_thread")
def test_a_search_report_elsewhere_leaves_the_search_folder_as_it_was(tmp_path) -> None:
    """Before: ``geohead report SEARCH --out R`` redrew the plots inside SEARCH (replacing the
    search's own PNGs; a traceback where SEARCH was read-only). Now it draws them into R and
    only reads SEARCH; with no --out (R = SEARCH) the plots there are replaced as before."""
    from geohead.cli import main

    folder = tmp_path / "s"
    folder.mkdir()
    header = "number,state,score,knn_backbone,rankme_backbone,orbit_compression,depth,hidden_dim,out_dim,activation,norm"
    rows = [f"{i},COMPLETE,{0.1 * i},{0.2 + 0.05 * i},{10 + i},{0.3 - 0.01 * i},{2 + i % 2},{64 * (1 + i % 3)},64,silu,batch"
            for i in range(6)]
    (folder / "trials.csv").write_text("\n".join([header, *rows]) + "\n")
    (folder / "param_importances.png").write_bytes(b"the search's own plot, older than the trials")
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()}
    res = CliRunner().invoke(main, ["report", str(folder), "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()} == before
    drawn = sorted(p.name for p in (tmp_path / "r").glob("*.png"))
    assert "param_importances.png" in drawn and (tmp_path / "r" / "param_importances.png").read_bytes()[:4] == b"\x89PNG"
    html_text = (tmp_path / "r" / "report.html").read_text()
    assert html_text.count("data:image/png;base64,") == len(drawn)  # the stale copy in the folder is not embedded
    assert CliRunner().invoke(main, ["report", str(folder)]).exit_code == 0
    assert (folder / "param_importances.png").read_bytes()[:4] == b"\x89PNG"


def test_export_backbone_takes_torchvision_resnets_as_the_cli_does(tmp_path) -> None:
    """lightly's docs build ``nn.Sequential(*list(resnet.children())[:-1])``; the CLI exported its
    state_dict, the Python API refused the module itself (pointing at model_args)."""
    import warnings

    import torch
    import torchvision
    from torch import nn

    from geohead.export import ExportError, export_backbone, load_backbone

    resnet = torchvision.models.resnet18().eval()
    seq = nn.Sequential(*list(resnet.children())[:-1]).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        want = seq(x).flatten(1)
    for i, module in enumerate((resnet, seq)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # the img_size default
            export_backbone(module, tmp_path / f"e{i}", img_size=32)
        with torch.no_grad():
            got = load_backbone(tmp_path / f"e{i}")(x)
        assert torch.equal(got, want)
    with pytest.raises(ExportError) as err:
        export_backbone(nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten()), tmp_path / "e2")
    assert "architecture" in str(err.value) and "model_args" not in str(err.value)


def test_an_export_with_head_loads_its_head(run_copy, tmp_path) -> None:
    """Before: --with-head could write a head that load_head then refused."""
    import torch

    from geohead.cli import main
    from geohead.export import load_backbone, load_head
    from geohead.training.model import load_trained

    out = tmp_path / "e"
    res = CliRunner().invoke(main, ["export", str(run_copy), "--out", str(out), "--with-head"])
    assert res.exit_code == 0, res.output
    head, trained = load_head(out), load_trained(run_copy)
    z = load_backbone(out)(torch.rand(2, 3, 32, 32))
    assert torch.allclose(head(z), trained.model.head.eval()(z), atol=1e-5)
