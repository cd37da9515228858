"""Every bad input is clean: a table of bad inputs over every command and the public API.

Each CLI case must exit with code 2, print no traceback, name the bad value in its message and
leave the folder it ran in exactly as it was (no file written, none changed). Each API case must
raise geohead's error type (or the documented ValueError) naming the value, and write nothing.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from tiny_runs import ROOT, TINY, tiny_run

RECIPE = str(ROOT / "geohead" / "recipes" / "barlow_shapes_cpu.toml")
TRAIN_TINY = [a for item in TINY for a in ("--set", item)]
SEARCH_TINY = ["--steps", "2", "--trials", "1", "--n-train", "64", "--batch-size", "16", "--probe-train", "32",
               "--probe-test", "32", "--timeout", "30", "--no-progress", "--device", "cpu"]
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
NOT_ROOT = pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes to any folder")


def _spec(**fields: Any) -> str:
    return json.dumps({"in_dim": 8, "out_dim": 4, **fields})


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """A folder of bad inputs beside a copy of a tiny run: every case runs in it."""
    from geohead.training.checkpoint import load_checkpoint, save_checkpoint

    w = tmp_path_factory.mktemp("bad_inputs")
    run = w / "run"
    shutil.copytree(tiny_run(tmp_path_factory, "barlow"), run)
    (w / "file.txt").write_text("not a folder\n")
    (w / "folder").mkdir()
    (w / "locked").mkdir(mode=0o555)
    (w / "empty.toml").write_text("# nothing\n")
    (w / "latin1.toml").write_bytes('objective = "barlow"  # caf\xe9\n'.encode("latin-1"))
    for name, text in {"pwn.json": _spec(activation="pwn_geohead:Evil"), "list.json": "[1, 2]",
                       "v99.json": _spec(version=99), "freeze.json": _spec(freeze_prototype_norm="no"),
                       "huge.json": _spec(hidden_dim=2 ** 40)}.items():
        (w / name).write_text(text)
    (w / "binary.json").write_bytes(bytes(range(256)) * 4)
    (w / "pwn_geohead.py").write_text("import pathlib\npathlib.Path(__file__).with_name('PWNED').write_text('x')\n")
    rng = np.random.default_rng(0)
    images = rng.integers(0, 255, (32, 8, 8, 3), dtype=np.uint8)
    np.savez(w / "huge_label.npz", images=images, labels=np.full(32, 2 ** 40, dtype=np.int64))
    # 1,400 one-pixel images: 4 KB, above 4 GiB of pixels once resized to 1024 x 1024
    np.savez(w / "npz_many.npz", images=np.zeros((1400, 1, 1, 3), np.uint8), labels=np.zeros(1400, np.int64))
    np.savez(w / "npz_classes.npz", images=images, labels=np.zeros(32, np.int64), classes=np.zeros(200_000, np.int8))
    data = bytearray((run / "last.safetensors").read_bytes())
    data[-3] ^= 1
    (w / "bitflip.ckpt").write_bytes(bytes(data))
    ck = load_checkpoint(run)
    meta = {**ck.meta, "head_spec": {**ck.meta["head_spec"], "activation": "pwn_geohead:Evil"}}
    save_checkpoint(w / "pwnspec.ckpt", ck.tensors, meta)
    from geohead.io import save_safetensors, tensor_checksum
    from geohead.training.checkpoint import FORMAT

    header = {"format": FORMAT, "config": "[" * 100_000 + "]" * 100_000}  # its checksum holds: the parser is what fails
    header["checksum"] = tensor_checksum(dict(ck.tensors), header)
    save_safetensors(w / "deep_meta.ckpt", dict(ck.tensors), header)
    save_checkpoint(w / "no_norm.ckpt", ck.tensors, {**ck.meta, "data": {"name": "shapes"}})  # no mean / std recorded
    shutil.copytree(run, w / "run_no_optim")  # this run's folder, its checkpoint without the optimiser's state
    save_checkpoint(w / "run_no_optim" / "last.safetensors", ck.tensors, {k: v for k, v in ck.meta.items() if k != "optimizer"})
    save_checkpoint(w / "config_list.ckpt", ck.tensors, {**ck.meta, "config": [1]})
    save_checkpoint(w / "probe_text.ckpt", ck.tensors, {**ck.meta, "config": {**ck.meta["config"], "probe": "x"}})
    shutil.copytree(run, w / "run_bad_optim")  # an optimiser state of another shape, under a checksum that holds
    optim = next(k for k, v in ck.tensors.items() if k.startswith("optim.") and v.numel() > 1)
    save_checkpoint(w / "run_bad_optim" / "last.safetensors", {**ck.tensors, optim: torch.zeros(7)}, ck.meta)
    shutil.copytree(run, w / "run_bad_loss")
    save_checkpoint(w / "run_bad_loss" / "last.safetensors", ck.tensors, {**ck.meta, "last_loss": [1]})
    (w / "junk.log").write_text('{"op_code": 0, "worker_id": "x"}\n')  # JSON lines a journal does not hold
    (w / "run_stray").mkdir()  # another program's metrics.jsonl, no config.json: a run would read and append to it
    (w / "run_stray" / "metrics.jsonl").write_text(json.dumps({f"k{i}": i for i in range(500)}) + "\n")
    shutil.copytree(run, w / "run_bad_step")  # a step this run cannot reach, under a checksum that holds
    save_checkpoint(w / "run_bad_step" / "last.safetensors", ck.tensors, {**ck.meta, "step": -10 ** 12})
    shutil.copytree(run, w / "run_sparse_metrics")
    os.truncate(w / "run_sparse_metrics" / "metrics.jsonl", 5 << 30)  # 5 GiB that take no disk
    shared: list = []
    for _ in range(40):  # 2 KB that reach one list 2^40 times
        shared = [shared, shared]
    torch.save({"state_dict": ck.section("model.backbone"), "hyper_parameters": {"x": shared}}, w / "shared.pt")
    import zipfile

    torch.save({"state_dict": {"w": torch.zeros(1 << 18)}}, w / "plain.pt")
    with zipfile.ZipFile(w / "plain.pt") as zi, zipfile.ZipFile(w / "inflating.pt", "w", zipfile.ZIP_DEFLATED) as zo:
        for info in zi.infolist():  # the same entries, compressed: 1 MiB of zeros from about 2 KB
            zo.writestr(info.filename, zi.read(info.filename))
    # a loss sized by the checkpoint's metadata: DINO's prototypes (a 4 TiB centre), a Barlow Twins k x k matrix
    save_checkpoint(w / "dino_huge.ckpt", ck.tensors, {**ck.meta, "objective": "dino", "objective_hparams": {"out_dim": 2 ** 40}})
    save_checkpoint(w / "barlow_wide.ckpt", ck.tensors, {**ck.meta, "head_spec": {**ck.meta["head_spec"], "out_dim": 40_000}})
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in ck.section("model.backbone").items()}, str(w / "weights.safetensors"))
    diag = w / "run_bad_diag"
    shutil.copytree(run, diag)
    (diag / "diagnose.json").write_text("[1, 2, 3]")
    diag2 = w / "run_bad_diag2"
    shutil.copytree(run, diag2)
    (diag2 / "diagnose.json").write_text(json.dumps({"orbits": 7, "probes": "x", "hessian": [1], "collapse": None}))
    shutil.copytree(run, w / "run_density_huge")  # more Lanczos nodes than diagnose writes: a P x m x grid kernel
    (w / "run_density_huge" / "diagnose.json").write_text(json.dumps(
        {"density": {"nodes": [[0.0] * 1001], "weights": [[0.0] * 1001], "dim": 4, "n_matvec": 0}}))
    shutil.copytree(run, w / "run_density_weights")  # weights that do not match the nodes: broadcast to any size
    (w / "run_density_weights" / "diagnose.json").write_text(json.dumps(
        {"density": {"nodes": [[0.0]], "weights": [[0.0] * 100_000], "dim": 4, "n_matvec": 0}}))
    shutil.copytree(run, w / "run_probes_many")  # a panel width per target
    (w / "run_probes_many" / "probes.json").write_text(json.dumps(
        {"probes": ["knn"], "targets": {f"t{i}": {"backbone": {"knn": 0.5}, "head": {"knn": 0.5}, "chance": 0.1}
                                        for i in range(300)}}))
    (w / "deep.toml").write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")  # deeper than tomllib recurses
    (w / "search_bad").mkdir()
    (w / "search_bad" / "trials.csv").write_text("hello\nworld\n")
    (w / "search_long_field").mkdir()  # a field above the csv module's 128 KiB
    (w / "search_long_field" / "trials.csv").write_text("number,x\n0," + "a" * 200_000 + "\n")
    (w / "search_huge_trials").mkdir()
    (w / "search_huge_trials" / "trials.csv").write_text("number,x\n")
    os.truncate(w / "search_huge_trials" / "trials.csv", 300 << 20)  # 300 MiB that take no disk
    (w / "search_wide_trials").mkdir()  # 100,000 columns: a 2-byte row would be a 100,000-key dict
    (w / "search_wide_trials" / "trials.csv").write_text("number," + ",".join(f"c{i}" for i in range(100_000)) + "\n" + "0\n" * 1000)
    (w / "search_ragged_trials").mkdir()
    (w / "search_ragged_trials" / "trials.csv").write_text("number,value\n0,0.5\n1,0.5,7,8\n")
    (w / "not_utf8_search").mkdir()
    (w / "not_utf8_search" / "trials.csv").write_bytes(b"\xff\xfe\x00number")
    return w


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(folder))] = (st.st_size, st.st_mtime_ns if p.is_file() else 0)
    return out


@pytest.fixture()
def inside(world, monkeypatch):
    """Run in ``world``; afterwards nothing in it may have been written or changed."""
    monkeypatch.chdir(world)
    monkeypatch.syspath_prepend(str(world))
    before = _snapshot(world)
    yield world
    after = _snapshot(world)
    assert after == before, {k: after.get(k) for k in set(after) ^ set(before) | {k for k in after if after.get(k) != before.get(k)}}
    assert not (world / "PWNED").exists()


# ---------------------------------------------------------------------- the command line
CLI: list[tuple[str, list[str], str]] = [
    # train
    ("train-missing-recipe", ["train", "missing.toml"], "missing.toml"),
    ("train-recipe-not-utf8", ["train", "latin1.toml"], "UTF-8"),
    ("train-empty-recipe", ["train", "empty.toml"], "empty"),
    ("train-huge-recipe", ["train", "huge.toml"], "MiB"),
    ("train-lr-inf", ["train", RECIPE, *TRAIN_TINY, "--set", "optim.lr=inf"], "optim.lr"),
    ("train-lr-nan", ["train", RECIPE, *TRAIN_TINY, "--set", "optim.lr=nan"], "optim.lr"),
    ("train-lr-negative", ["train", RECIPE, *TRAIN_TINY, "--set", "optim.lr=-1"], "optim.lr"),
    ("train-huge-hidden-dim", ["train", RECIPE, *TRAIN_TINY, "--set", "head.spec.hidden_dim=1099511627776"], "hidden_dim"),
    ("train-negative-n-train", ["train", RECIPE, *TRAIN_TINY, "--set", "data.n_train=-5"], "n_train"),
    ("train-negative-probe-n-test", ["train", RECIPE, *TRAIN_TINY, "--set", "probe.n_test=0"], "probe.n_test"),
    ("train-backbone-args-path", ["train", RECIPE, *TRAIN_TINY, "--set", 'backbone.args={checkpoint_path="/etc/passwd"}'], "checkpoint_path"),
    ("train-backbone-args-pretrained", ["train", RECIPE, *TRAIN_TINY, "--set", "backbone.args={pretrained=true}"], "pretrained"),
    ("train-unknown-key", ["train", RECIPE, *TRAIN_TINY, "--set", "nokey=1"], "nokey"),
    ("train-out-is-file", ["train", RECIPE, *TRAIN_TINY, "--out", "file.txt"], "file.txt"),
    ("train-out-through-file", ["train", RECIPE, *TRAIN_TINY, "--out", "file.txt/run"], "file.txt"),
    ("train-head-missing", ["train", RECIPE, *TRAIN_TINY, "--head", "missing.json"], "missing.json"),
    ("train-head-imports", ["train", RECIPE, *TRAIN_TINY, "--head", "pwn.json"], "pwn_geohead:Evil"),
    ("train-head-not-object", ["train", RECIPE, *TRAIN_TINY, "--head", "list.json"], "object"),
    ("train-head-binary", ["train", RECIPE, *TRAIN_TINY, "--head", "binary.json"], "binary.json"),
    ("train-head-version-99", ["train", RECIPE, *TRAIN_TINY, "--head", "v99.json"], "99"),
    ("train-head-freeze-no", ["train", RECIPE, *TRAIN_TINY, "--head", "freeze.json"], "freeze_prototype_norm"),
    ("train-head-huge", ["train", RECIPE, *TRAIN_TINY, "--head", "huge.json"], "hidden_dim"),
    ("train-huge-label", ["train", RECIPE, *TRAIN_TINY, "--set", 'data.name="huge_label.npz"'], "1099511627776"),
    ("train-resume-bitflip", ["train", RECIPE, *TRAIN_TINY, "--out", "run_flip"], "checksum"),
    ("train-test-missing", ["train", RECIPE, *TRAIN_TINY, "--set", 'data.test="missing.npz"'], "missing.npz"),
    ("train-test-unknown-name", ["train", RECIPE, *TRAIN_TINY, "--set", 'data.test="cifar11"'], "cifar10"),
    # search
    ("search-lr-inf", ["search", *SEARCH_TINY, "--set", "optim.lr=inf"], "optim.lr"),
    ("search-lr-nan", ["search", *SEARCH_TINY, "--set", "optim.lr=nan"], "optim.lr"),
    ("search-out-is-file", ["search", *SEARCH_TINY, "--out", "file.txt"], "file.txt"),
    ("search-out-through-file", ["search", *SEARCH_TINY, "--out", "file.txt/s"], "file.txt"),
    ("search-storage-through-file", ["search", *SEARCH_TINY, "--out", "s", "--storage", "sqlite:///file.txt/x.db"], "file.txt"),
    ("search-journal-not-optunas", ["search", *SEARCH_TINY, "--out", "s_new", "--storage", "journal:junk.log"], "cannot be read"),
    ("search-journal-through-file", ["search", *SEARCH_TINY, "--out", "s", "--storage", "journal:file.txt/j.log"], "file.txt"),
    ("search-storage-is-folder", ["search", *SEARCH_TINY, "--out", "s", "--storage", "sqlite:///folder"], "folder"),
    ("search-timeout-word", ["search", *SEARCH_TINY, "--out", "s", "--timeout", "soon"], "soon"),
    ("search-trials-negative", ["search", *SEARCH_TINY, "--out", "s", "--trials", "-3"], "-3"),
    ("search-img-size-negative", ["search", *SEARCH_TINY, "--out", "s", "--img-size", "-32"], "-32"),
    ("search-unknown-objective", ["search", *SEARCH_TINY, "--out", "s", "--objective", "nope"], "nope"),
    ("search-fix-activation-import", ["search", *SEARCH_TINY, "--out", "s", "--fix", "activation=pwn_geohead:Evil"], "pwn_geohead:Evil"),
    ("search-huge-label", ["search", *SEARCH_TINY, "--out", "s", "--data", "huge_label.npz"], "1099511627776"),
    ("search-missing-data", ["search", *SEARCH_TINY, "--out", "s", "--data", "nodata.npz"], "nodata.npz"),
    ("search-storage-fails-nested-out", ["search", *SEARCH_TINY, "--out", "new/s", "--storage", "postgresql://nohost:1/db"],
     "postgresql"),
    # export
    ("export-out-is-file", ["export", "run", "--out", "file.txt"], "file.txt"),
    ("export-out-through-file", ["export", "run", "--out", "file.txt/x"], "file.txt"),
    ("export-architecture-on-ckpt", ["export", "run/last.safetensors", "--out", "exp", "--architecture", "resnet18"], "is a geohead run"),
    ("export-missing-source", ["export", "missing.ckpt", "--out", "exp"], "missing.ckpt"),
    ("export-model-arg-alone", ["export", "run", "--out", "exp", "--model-arg", "img_size=32"], "--model-arg describes"),
    ("export-model-arg-path", ["export", "weights.safetensors", "--out", "exp", "--architecture", "resnet18",
                               "--model-arg", "checkpoint_path=/etc/passwd"], "checkpoint_path"),
    ("export-model-arg-pretrained", ["export", "weights.safetensors", "--out", "exp", "--architecture", "resnet18",
                                     "--model-arg", "pretrained=true"], "pretrained"),
    ("export-bitflip", ["export", "bitflip.ckpt", "--out", "exp"], "checksum"),
    ("export-head-imports", ["export", "pwnspec.ckpt", "--out", "exp", "--with-head"], "pwn_geohead:Evil"),
    ("export-source-not-ckpt", ["export", "file.txt", "--out", "exp"], "file.txt"),
    ("export-occupied-out", ["export", "run", "--out", "folder_full"], "folder_full"),
    # report
    ("report-out-is-file", ["report", "run", "--out", "file.txt"], "file.txt"),
    ("report-out-through-file", ["report", "run", "--out", "file.txt/r"], "file.txt"),
    ("report-diagnose-not-object", ["report", "run_bad_diag"], "diagnose.json"),
    ("report-fails-nested-out", ["report", "run_bad_diag2", "--out", "new/r"], "diagnose.json"),
    ("report-diagnose-wrong-shapes", ["report", "run_bad_diag2"], "diagnose.json"),
    ("report-trials-garbage", ["report", "search_bad"], "trials.csv"),
    ("report-trials-not-utf8", ["report", "not_utf8_search"], "trials.csv"),
    ("report-trials-wide", ["report", "search_wide_trials", "--out", "r"], "100,001 columns, above 512"),
    ("report-trials-ragged", ["report", "search_ragged_trials", "--out", "r"], "row 2 has 4 cells, the header 2"),
    ("report-not-a-run", ["report", "folder"], "folder"),
    ("report-missing", ["report", "nowhere"], "nowhere"),
    # diagnose
    ("diagnose-export-config-deeply-nested", ["diagnose", "exp_deep", "--json", "d.json"], "config.json"),
    ("diagnose-export-config-huge", ["diagnose", "exp_huge", "--json", "d.json"], "MiB"),
    ("diagnose-ckpt-config-list", ["diagnose", "config_list.ckpt", "--json", "d.json"], "config is not a table"),
    ("diagnose-ckpt-probe-text", ["diagnose", "probe_text.ckpt", "--json", "d.json"], "config.probe is not a table"),
    ("diagnose-export-pretrained-cfg-list", ["diagnose", "exp_cfg_list", "--json", "d.json"], "pretrained_cfg is a list"),
    ("diagnose-export-files-list", ["diagnose", "exp_files_list", "--json", "d.json"], "geohead.files is a list"),
    ("diagnose-export-input-size-dict", ["diagnose", "exp_size_dict", "--json", "d.json"], "not [3, H, W]: pass --img-size"),
    ("diagnose-json-through-file", ["diagnose", "run", "--json", "file.txt/d.json"], "file.txt"),
    ("diagnose-json-is-folder", ["diagnose", "run", "--json", "folder"], "folder"),
    ("diagnose-missing", ["diagnose", "nowhere"], "nowhere"),
    ("diagnose-bitflip", ["diagnose", "bitflip.ckpt", "--json", "d.json"], "checksum"),
    ("diagnose-head-imports", ["diagnose", "pwnspec.ckpt", "--json", "d.json"], "pwn_geohead:Evil"),
    ("diagnose-unknown-family", ["diagnose", "run", "--json", "d.json", "--families", "nope"], "nope"),
    ("diagnose-negative-n-test", ["diagnose", "run", "--json", "d.json", "--n-test", "-5"], "-5"),
]
CLI_MARKED = [pytest.param(*c, id=c[0]) for c in CLI] + [
    pytest.param("search-cuda", ["search", *SEARCH_TINY[:-2], "--out", "s", "--device", "cuda"], "cuda", marks=NO_CUDA, id="search-cuda"),
    pytest.param("train-cuda", ["train", RECIPE, *TRAIN_TINY, "--device", "cuda"], "cuda", marks=NO_CUDA, id="train-cuda"),
    pytest.param("diagnose-cuda", ["diagnose", "run", "--json", "d.json", "--device", "cuda"], "cuda", marks=NO_CUDA, id="diagnose-cuda"),
    pytest.param("train-out-unwritable", ["train", RECIPE, *TRAIN_TINY, "--out", "locked/run"], "locked", marks=NOT_ROOT, id="train-out-unwritable"),
    pytest.param("search-out-unwritable", ["search", *SEARCH_TINY, "--out", "locked/s"], "locked", marks=NOT_ROOT, id="search-out-unwritable"),
    pytest.param("export-out-unwritable", ["export", "run", "--out", "locked/e"], "locked", marks=NOT_ROOT, id="export-out-unwritable"),
    pytest.param("report-out-unwritable", ["report", "run", "--out", "locked/r"], "locked", marks=NOT_ROOT, id="report-out-unwritable"),
    pytest.param("diagnose-json-unwritable", ["diagnose", "run", "--json", "locked/d.json"], "locked", marks=NOT_ROOT, id="diagnose-json-unwritable"),
]


@pytest.fixture(scope="module")
def prepared(world) -> Path:
    """The few inputs a CLI case needs beyond the world: a run folder whose checkpoint is flipped,
    an occupied export folder."""
    flip = world / "run_flip"
    if not flip.exists():
        from geohead.export import export_backbone

        (world / "huge.toml").write_text('objective = "barlow"\n' + "# padding\n" * 120_000)
        for name, text in {"exp_deep": "[" * 100_000 + "]" * 100_000, "exp_huge": " " * (1 << 20) + "{}"}.items():
            export_backbone(world / "run", world / name)
            (world / name / "config.json").write_text(text)
        for name, edit in {"exp_cfg_list": lambda c: c.update(pretrained_cfg=[1]),
                           "exp_files_list": lambda c: c["geohead"].update(files=[1]),
                           "exp_size_dict": lambda c: c["pretrained_cfg"].update(input_size={"a": 1})}.items():
            export_backbone(world / "run", world / name, with_head=True)
            config = json.loads((world / name / "config.json").read_text())
            edit(config)
            (world / name / "config.json").write_text(json.dumps(config))
        shutil.copytree(world / "run", flip)
        shutil.copy(world / "bitflip.ckpt", flip / "last.safetensors")
        (world / "folder_full").mkdir()
        (world / "folder_full" / "keep.txt").write_text("mine\n")
        (world / "folder_hf").mkdir()  # another program's model folder: its config.json is not a run's
        (world / "folder_hf" / "config.json").write_text('{"model_type": "bert", "hidden_size": 768}\n')
    return world


@pytest.mark.parametrize("case, args, needle", CLI_MARKED)
def test_cli_bad_input_is_clean(prepared, inside, case: str, args: list[str], needle: str) -> None:
    from geohead.cli import main

    res = CliRunner().invoke(main, args)
    out = res.output
    assert res.exit_code == 2, f"{case}: exit {res.exit_code}\n{out}\n{res.exc_info}"
    assert "Traceback" not in out and isinstance(res.exception, SystemExit), out
    assert needle in out, f"{case}: {needle!r} not in the message: {out}"


UNWRITABLE = [c for c in CLI_MARKED if c.id.endswith("unwritable")]


@pytest.mark.parametrize("case, args, needle", [pytest.param(*c.values, id=c.id) for c in UNWRITABLE])
def test_cli_unwritable_folder_is_clean_even_as_root(prepared, inside, monkeypatch, case, args, needle) -> None:
    """The unwritable-folder cases where the tests run as root (who may write anywhere): the
    folder ``locked`` is reported unwritable by os.access, as it is to any other user."""
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p).name == "locked" else real(p, mode, **kw))
    test_cli_bad_input_is_clean(prepared, inside, case, args, needle)
    assert "not writable" in CliRunner().invoke(__import__("geohead.cli").cli.main, args).output


# ---------------------------------------------------------------------- the Python API
def _api_cases() -> list[tuple[str, Callable[[Path], Any], str, str]]:
    """(case, call(world), error class name, needle)."""
    from geohead.heads import HeadSpec

    def recipe(over: list[str]) -> Callable[[Path], Any]:
        from geohead.training.config import load_recipe

        return lambda w: load_recipe(RECIPE, TINY + over)

    def search(**kw: Any) -> Callable[[Path], Any]:
        from geohead.search import SearchConfig

        return lambda w: SearchConfig(**{"out": "s", "device": "cpu", **kw}).validate()

    return [
        ("spec-text-list", lambda w: HeadSpec.from_json("[1, 2]"), "SpecError", "list"),
        ("spec-text-number", lambda w: HeadSpec.from_json("42"), "SpecError", "42"),
        ("spec-freeze-no", lambda w: HeadSpec.from_json(_spec(freeze_prototype_norm="no")), "SpecError", "'no'"),
        ("spec-version-99", lambda w: HeadSpec.from_json(_spec(version=99)), "SpecError", "99"),
        ("spec-deep-nesting", lambda w: HeadSpec.from_json("{\"a\": " + "[" * 100_000 + "]" * 100_000 + "}"), "SpecError", "nested"),
        ("spec-binary-file", lambda w: HeadSpec.from_json(w / "binary.json"), "SpecError", "binary.json"),
        ("spec-folder", lambda w: HeadSpec.from_json(w / "folder"), "SpecError", "folder"),
        ("spec-missing-file", lambda w: HeadSpec.from_json(w / "nope.json"), "FileNotFoundError", "nope.json"),
        ("spec-huge-hidden", lambda w: HeadSpec(8, 4, hidden_dim=2 ** 40), "SpecError", "1099511627776"),
        ("spec-huge-depth", lambda w: HeadSpec(8, 4, depth=10 ** 6), "SpecError", "1000000"),
        ("spec-huge-prototypes", lambda w: HeadSpec(8, 4, prototypes=2 ** 30), "SpecError", "1073741824"),
        ("spec-weights-overflow", lambda w: HeadSpec(2 ** 20, 2 ** 20, depth=1), "SpecError", "weights"),
        ("spec-import-string", lambda w: HeadSpec(8, 4, activation="os:system"), "SpecError", "os:system"),
        ("spec-activation-number", lambda w: HeadSpec(8, 4, activation=3), "SpecError", "3"),
        ("spec-lacks-out-dim", lambda w: HeadSpec.from_dict({"in_dim": 8}), "SpecError", "out_dim"),
        ("spec-string-dim", lambda w: HeadSpec.from_dict({"in_dim": "8", "out_dim": 4}), "SpecError", "'8'"),
        ("spec-unknown-key", lambda w: HeadSpec.from_dict({"in_dim": 8, "out_dim": 4, "evil": 1}), "SpecError", "evil"),
        ("spec-other-format", lambda w: HeadSpec.from_dict({"format": "x", "in_dim": 8, "out_dim": 4}), "SpecError", "'x'"),
        ("recipe-empty", lambda w: __import__("geohead.training.config").training.config.load_recipe(w / "empty.toml"), "ConfigError", "empty.toml"),
        ("recipe-not-utf8", lambda w: __import__("geohead.training.config").training.config.load_recipe(w / "latin1.toml"), "ConfigError", "UTF-8"),
        ("recipe-lr-inf", recipe(["optim.lr=inf"]), "ConfigError", "optim.lr"),
        ("recipe-objective-arg-nan", recipe(["objective_args.lambda_offdiag=nan"]), "ConfigError", "lambda_offdiag"),
        ("recipe-backbone-args-network", recipe(["backbone.args={pretrained_cfg_overlay={file=\"x\"}}"]), "ConfigError", "pretrained_cfg_overlay"),
        ("dataset-npz-resized-too-many-pixels", lambda w: __import__("geohead.data").data.load_dataset(
            str(w / "npz_many.npz"), img_size=1024), "ValueError", "image count of"),
        ("dataset-npz-classes-huge", lambda w: __import__("geohead.data").data.load_dataset(str(w / "npz_classes.npz")),
         "ValueError", "'classes' holds 200,000 names"),
        ("dataset-huge-label", lambda w: __import__("geohead.data").data.load_dataset(str(w / "huge_label.npz")), "ValueError", "1099511627776"),
        ("load-backbone-missing", lambda w: _export().load_backbone(w / "nope"), "ExportError", "nope"),
        ("load-backbone-file", lambda w: _export().load_backbone(w / "file.txt"), "ExportError", "file.txt"),
        ("load-head-not-export", lambda w: _export().load_head(w / "run"), "ExportError", "config.json"),
        ("checkpoint-bitflip", lambda w: _ckpt().load_checkpoint(w / "bitflip.ckpt"), "CheckpointError", "bitflip.ckpt"),
        ("checkpoint-not-safetensors", lambda w: _ckpt().load_checkpoint(w / "file.txt"), "CheckpointError", "file.txt"),
        ("load-trained-bitflip", lambda w: __import__("geohead.training.model").training.model.load_trained(w / "bitflip.ckpt"), "CheckpointError", "checksum"),
        ("load-trained-head-imports", lambda w: __import__("geohead.training.model").training.model.load_trained(w / "pwnspec.ckpt"), "SpecError", "pwn_geohead:Evil"),
        ("export-out-is-file", lambda w: _export().export_backbone(w / "run", w / "file.txt"), "ExportError", "file.txt"),
        ("export-bitflip", lambda w: _export().export_backbone(w / "bitflip.ckpt", w / "e"), "CheckpointError", "checksum"),
        ("export-head-imports", lambda w: _export().export_backbone(w / "pwnspec.ckpt", w / "e", with_head=True), "ExportError", "pwn_geohead"),
        ("report-out-is-file", lambda w: _report().make_report(w / "run", w / "file.txt"), "ReportError", "file.txt"),
        ("report-diagnose-not-object", lambda w: _report().make_report(w / "run_bad_diag"), "ReportError", "diagnose.json"),
        ("search-cuda", search(device="cuda") if not torch.cuda.is_available() else search(device="nope"), "SearchError", "cuda" if not torch.cuda.is_available() else "nope"),
        ("search-out-is-file", search(out="file.txt"), "SearchError", "file.txt"),
        ("search-storage-through-file", search(storage="sqlite:///file.txt/x.db"), "SearchError", "file.txt"),
        ("search-lr-nan", search(overrides=("optim.lr=nan",)), "SearchError", "optim.lr"),
        ("backbone-unknown", lambda w: __import__("geohead.backbones").backbones.create_backbone("nope_net"), "ValueError", "nope_net"),
        ("backbone-config-path", lambda w: __import__("geohead.backbones").backbones.rebuild_backbone(
            {"architecture": "resnet18", "model_args": {"checkpoint_path": "/etc/passwd"}, "img_size": 32, "cifar_stem": False}),
         "UntrustedInputError", "checkpoint_path"),
        ("backbone-config-hub", lambda w: __import__("geohead.backbones").backbones.rebuild_backbone(
            {"architecture": "hf-hub:timm/x", "model_args": {}, "img_size": 32, "cifar_stem": False}),
         "UntrustedInputError", "hf-hub:timm/x"),
        ("train-out-is-file", lambda w: _train(w, 'out="file.txt"'), "ConfigError", "file.txt"),
    ]


def _export():
    import geohead.export

    return geohead.export


def _ckpt():
    import geohead.training.checkpoint

    return geohead.training.checkpoint


def _report():
    import geohead.report.page

    return geohead.report.page


def _train(w: Path, out: str) -> Any:
    from geohead.training.config import load_recipe
    from geohead.training.loop import train

    return train(load_recipe(RECIPE, TINY + [out]))


API = _api_cases()


@pytest.mark.parametrize("case, call, error, needle", [pytest.param(*c, id=c[0]) for c in API])
def test_api_bad_input_raises_geoheads_error(inside, case: str, call, error: str, needle: str) -> None:
    with pytest.raises(Exception) as err:
        call(inside)
    names = {c.__name__ for c in type(err.value).__mro__}
    assert error in names, f"{case}: {type(err.value).__name__}: {err.value}"
    assert needle in str(err.value), f"{case}: {needle!r} not in {err.value}"


def test_the_table_is_large_enough() -> None:
    assert len(CLI) + len(API) >= 60


# ---------------------------------------------------------------------- trust, second pass
# Links planted in the folders geohead reads and writes, loader options at every entry, sizes past
# their bounds, and runtime failures that are the input's fault. The same promise as above: exit
# 2, no traceback, the bad value or file named, and nothing in the world written or changed (the
# targets of the links included: they live in world/outside).
HAS_PROC = pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")


def _png_header(width: int, height: int) -> bytes:
    """A PNG's signature and IHDR chunk claiming ``width`` x ``height`` pixels (no pixel data):
    what a decompression bomb looks like to a reader that checks the header."""
    import struct
    import zlib

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", len(ihdr)) + chunk + struct.pack(">I", zlib.crc32(chunk))


def _image_folder(root: Path, files: dict[str, bytes | None]) -> None:
    """Two class folders of 8x8 PNGs, plus ``files`` (class/name -> bytes) written as given."""
    from PIL import Image

    for c in ("a", "b"):
        (root / c).mkdir(parents=True, exist_ok=True)
        for i in range(2):
            Image.fromarray(np.full((8, 8, 3), 40 * i + (c == "b") * 100, np.uint8)).save(root / c / f"{i}.png")
    for name, data in files.items():
        if data is not None:
            (root / name).write_bytes(data)


def _npz_declaring(path: Path, shape: tuple[int, ...]) -> None:
    """An .npz of a few hundred bytes whose 'images' header declares ``shape`` (uint8): what a
    compressed archive of zeros looks like to a reader that allocates from the header."""
    import io
    import zipfile

    from numpy.lib import format as npy

    head, labels = io.BytesIO(), io.BytesIO()
    npy.write_array_header_1_0(head, {"descr": "|u1", "fortran_order": False, "shape": shape})
    np.save(labels, np.zeros(shape[0], np.int64))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("images.npy", head.getvalue() + bytes(64))
        zf.writestr("labels.npy", labels.getvalue())


def _link(folder: Path, name: str, target: Path) -> None:
    (folder / name).unlink(missing_ok=True)
    os.symlink(target, folder / name)


@pytest.fixture(scope="module")
def planted(prepared) -> Path:
    """Folders with links to world/outside at each name a command reads or writes, image folders
    with a bad image each, a checkpoint whose tensors do not fit its header, an export."""
    from geohead.export import export_backbone
    from geohead.training.checkpoint import load_checkpoint, save_checkpoint

    w = prepared
    if (w / "outside").exists():
        return w
    out = w / "outside"
    out.mkdir()
    for name in ("victim.txt", "victim.png", "secret.json"):
        (out / name).write_text("precious, outside every folder geohead was given\n")
    shutil.copy(w / "run" / "last.safetensors", out / "last.safetensors")
    shutil.copy(w / "run" / "metrics.jsonl", out / "metrics.jsonl")
    for name, target in {"metrics.jsonl": "metrics.jsonl", "last.safetensors": "last.safetensors", "summary.json": "secret.json",
                         "config.json": "secret.json", "diagnose.json": "secret.json"}.items():
        folder = w / f"run_link_{name.split('.')[0]}"
        shutil.copytree(w / "run", folder)
        _link(folder, name, out / target)
    shutil.copytree(w / "run", w / "run_link_monitor")  # a GeometryMonitor file, read by report when present
    _link(w / "run_link_monitor", "monitor.jsonl", out / "metrics.jsonl")
    shutil.copytree(w / "run", w / "run_link_legacy")  # a run written before checkpoints were named last.safetensors
    (w / "run_link_legacy" / "last.safetensors").unlink()
    _link(w / "run_link_legacy", "last.ckpt", out / "last.safetensors")
    for name, target in {"criteria_vs_knn.png": "victim.png", "trials.csv": "victim.txt", "search.json": "secret.json",
                         "study.db": "victim.txt", "other.png": "victim.png"}.items():
        folder = w / f"search_link_{name.split('.')[0]}"
        folder.mkdir()
        (folder / "trials.csv").write_text("number,state\n0,COMPLETE\n")
        _link(folder, name, out / target)
    for sub, name in (("trials", "0000"), ("confirm", "pick_s1")):  # a rerun would train into, and clear, the target
        folder = w / f"search_link_{sub}_run"
        (folder / sub).mkdir(parents=True)
        (folder / "trials.csv").write_text("number,state\n0,COMPLETE\n")
        _link(folder / sub, name, w / "run_victim")
    shutil.copytree(w / "run", w / "run_victim")
    export_backbone(w / "run", w / "exp_ok", with_head=True)
    for name in ("config.json", "head.json"):
        shutil.copytree(w / "exp_ok", w / f"exp_link_{name.split('.')[0]}")
        shutil.copy(w / "exp_ok" / name, out / f"exp_{name}")
        _link(w / f"exp_link_{name.split('.')[0]}", name, out / f"exp_{name}")
    shutil.copytree(w / "exp_ok", w / "exp_pretrained")
    cfg = json.loads((w / "exp_ok" / "config.json").read_text())
    cfg["geohead"]["backbone"]["model_args"]["pretrained"] = True
    (w / "exp_pretrained" / "config.json").write_text(json.dumps(cfg))
    (out / "img.png").write_bytes((w / "run" / "head.json").read_bytes())
    _image_folder(w / "images_link", {})
    _link(w / "images_link" / "a", "x.png", out / "img.png")
    _image_folder(w / "images_dir_link", {})  # a class folder that is a link out: refused before it is walked
    (out / "class_c").mkdir()
    shutil.copy(w / "images_dir_link" / "a" / "0.png", out / "class_c" / "0.png")
    _link(w / "images_dir_link", "c", out / "class_c")
    _image_folder(w / "images_corrupt", {"a/bad.png": b"this is not a PNG"})
    _image_folder(w / "images_big", {"a/big.png": _png_header(5000, 5000)})
    _image_folder(w / "images_bomb", {"b/bomb.png": _png_header(30000, 30000)})
    np.savez(w / "zero_pixels.npz", images=np.zeros((4, 0, 0, 3), np.uint8), labels=np.zeros(4, np.int64))
    _npz_declaring(w / "npz_bomb.npz", (2_000, 1024, 1024, 3))  # 5.9 GiB: allocatable, above the bound
    _image_folder(w / "images_many", {})  # 1,402 images: above 4 GiB of pixels at 1024 x 1024
    for i in range(2, 1400):
        shutil.copy(w / "images_many" / "a" / "0.png", w / "images_many" / "a" / f"{i}.png")
    ck = load_checkpoint(w / "run")
    name = next(k for k in ck.tensors if k.startswith("model.backbone.") and ck.tensors[k].ndim == 4)
    tensors = {**ck.tensors, name: torch.zeros(3, 3)}  # another shape under a checksum that holds
    shutil.copytree(w / "run", w / "run_shape")
    save_checkpoint(w / "run_shape" / "last.safetensors", tensors, ck.meta)
    save_checkpoint(w / "shape.ckpt", tensors, ck.meta)
    return w


BIG = "1000000000"
LONG = "a" * 300  # a file name above the system's 255 bytes
DEEP = "[" * 50_000 + "]" * 50_000  # a TOML value nested deeper than the parser recurses
TRUST_CLI: dict[str, list[tuple[str, list[str], str]]] = {
    "symlink": [
        ("train-metrics-link-out", ["train", RECIPE, *TRAIN_TINY, "--out", "run_link_metrics"], "metrics.jsonl"),
        ("train-ckpt-link-out", ["train", RECIPE, *TRAIN_TINY, "--out", "run_link_last"], "last.safetensors"),
        ("train-legacy-ckpt-link-out", ["train", RECIPE, *TRAIN_TINY, "--out", "run_link_legacy"], "last.ckpt"),
        ("train-summary-link-out", ["train", RECIPE, *TRAIN_TINY, "--out", "run_link_summary"], "summary.json"),
        ("train-config-link-out", ["train", RECIPE, *TRAIN_TINY, "--out", "run_link_config"], "config.json"),
        ("train-images-link-out", ["train", RECIPE, *TRAIN_TINY, "--set", 'data.name="images_link"'], "x.png"),
        ("search-plot-link-out", ["search", *SEARCH_TINY, "--out", "search_link_criteria_vs_knn"], "criteria_vs_knn.png"),
        ("search-trials-link-out", ["search", *SEARCH_TINY, "--out", "search_link_trials"], "trials.csv"),
        ("search-study-db-link-out", ["search", *SEARCH_TINY, "--out", "search_link_study"], "study.db"),
        ("search-trial-folder-link-out", ["search", *SEARCH_TINY, "--out", "search_link_trials_run"], "0000"),
        ("search-confirm-folder-link-out", ["search", *SEARCH_TINY, "--out", "search_link_confirm_run"], "pick_s1"),
        ("train-image-class-folder-link-out", ["train", RECIPE, *TRAIN_TINY, "--set", 'data.name="images_dir_link"'],
         "class folder"),
        ("search-images-link-out", ["search", *SEARCH_TINY, "--out", "s", "--data", "images_link"], "x.png"),
        ("report-summary-link-out", ["report", "run_link_summary", "--out", "r"], "summary.json"),
        ("report-config-link-out", ["report", "run_link_config", "--out", "r"], "config.json"),
        ("report-metrics-link-out", ["report", "run_link_metrics", "--out", "r"], "metrics.jsonl"),
        ("report-diagnose-link-out", ["report", "run_link_diagnose", "--out", "r"], "diagnose.json"),
        ("report-search-plot-link-out", ["report", "search_link_criteria_vs_knn", "--out", "r"], "criteria_vs_knn.png"),
        ("report-trials-link-out", ["report", "search_link_trials", "--out", "r"], "trials.csv"),
        ("report-search-json-link-out", ["report", "search_link_search", "--out", "r"], "search.json"),
        ("report-search-other-png-link-out", ["report", "search_link_other", "--out", "r"], "other.png"),
        ("report-monitor-jsonl-link-out", ["report", "run_link_monitor", "--out", "r"], "monitor.jsonl"),
        ("export-ckpt-link-out", ["export", "run_link_last", "--out", "e"], "last.safetensors"),
        ("export-legacy-ckpt-link-out", ["export", "run_link_legacy", "--out", "e"], "last.ckpt"),
        ("export-diagnose-of-export-config-link-out", ["diagnose", "exp_link_config", "--json", "d.json"], "config.json"),
        ("diagnose-ckpt-link-out", ["diagnose", "run_link_last", "--json", "d.json"], "last.safetensors"),
        ("diagnose-legacy-ckpt-link-out", ["diagnose", "run_link_legacy", "--json", "d.json"], "last.ckpt"),
    ],
    "loader-keys": [
        ("diagnose-model-arg-pretrained", ["diagnose", "weights.safetensors", "--architecture", "resnet18", "--model-arg",
                                           "pretrained=true", "--json", "d.json"], "pretrained"),
        ("diagnose-model-arg-checkpoint-path", ["diagnose", "weights.safetensors", "--architecture", "resnet18",
                                                "--model-arg", "checkpoint_path=/etc/passwd", "--json", "d.json"], "checkpoint_path"),
        ("export-model-arg-pretrained-cfg", ["export", "weights.safetensors", "--out", "e", "--architecture", "resnet18",
                                             "--model-arg", 'pretrained_cfg={"file": "/etc/passwd"}'], "pretrained_cfg"),
        ("export-model-arg-cache-dir", ["export", "weights.safetensors", "--out", "e", "--architecture", "resnet18",
                                        "--model-arg", "cache_dir=/tmp"], "cache_dir"),
        ("export-model-arg-file", ["export", "weights.safetensors", "--out", "e", "--architecture", "resnet18",
                                   "--model-arg", "file=x.pth"], "file"),
        ("export-model-arg-path-value", ["export", "weights.safetensors", "--out", "e", "--architecture", "resnet18",
                                         "--model-arg", "act_layer=../../etc/x"], "act_layer"),
        ("export-model-arg-nested-value", ["export", "weights.safetensors", "--out", "e", "--architecture", "resnet18",
                                           "--model-arg", "layers=[[1, 2]]"], "layers"),
        ("train-backbone-args-cache-dir", ["train", RECIPE, *TRAIN_TINY, "--set", 'backbone.args={cache_dir="/tmp"}'], "cache_dir"),
        ("train-backbone-args-features-only", ["train", RECIPE, *TRAIN_TINY, "--set", "backbone.args={features_only=true}"], "features_only"),
    ],
    "bounds": [
        ("search-n-train-huge", ["search", *SEARCH_TINY, "--out", "s", "--n-train", BIG], BIG),
        ("search-probe-test-huge", ["search", *SEARCH_TINY, "--out", "s", "--probe-test", BIG], BIG),
        ("search-probe-train-huge", ["search", *SEARCH_TINY, "--out", "s", "--probe-train", BIG], BIG),
        ("search-img-size-huge", ["search", *SEARCH_TINY, "--out", "s", "--img-size", "100000"], "1,024"),
        ("search-pixels-huge", ["search", *SEARCH_TINY, "--out", "s", "--img-size", "1024", "--probe-train", "2000"], "GiB"),
        ("search-workers-huge", ["search", *SEARCH_TINY, "--out", "s", "--workers", "1000"], "1000"),
        ("search-fix-hidden-dim-huge", ["search", *SEARCH_TINY, "--out", "s", "--fix", f"hidden_dim={BIG}"], "16384"),
        ("search-range-out-dim-huge", ["search", *SEARCH_TINY, "--out", "s", "--range", f"out_dim=8:{BIG}"], "16384"),
        ("search-seed-huge", ["search", *SEARCH_TINY, "--out", "s", "--seed", str(2 ** 65)], str(2 ** 65)),
        ("search-image-too-many-pixels", ["search", *SEARCH_TINY, "--out", "s", "--data", "images_big"], "big.png"),
        ("search-image-bomb", ["search", *SEARCH_TINY, "--out", "s", "--data", "images_bomb"], "bomb.png"),
        ("search-npz-bomb", ["search", *SEARCH_TINY, "--out", "s", "--data", "npz_bomb.npz"], "above the bound of 4 GiB"),
        ("train-npz-bomb", ["train", RECIPE, *TRAIN_TINY, "--set", 'data.name="npz_bomb.npz"'], "above the bound of 4 GiB"),
        ("train-image-folder-too-many-pixels", ["train", RECIPE, *TRAIN_TINY, "--set", 'data.name="images_many"', "--set",
                                                "data.img_size=1024", "--set", "probe.n_train=64", "--set", "probe.n_test=64"],
         "image count of"),
        ("train-n-train-huge", ["train", RECIPE, *TRAIN_TINY, "--set", f"data.n_train={BIG}"], "data.n_train"),
        ("train-n-test-huge", ["train", RECIPE, *TRAIN_TINY, "--set", f"data.n_test={BIG}"], "data.n_test"),
        ("train-probe-n-test-huge", ["train", RECIPE, *TRAIN_TINY, "--set", f"probe.n_test={BIG}"], "probe.n_test"),
        ("train-img-size-huge", ["train", RECIPE, *TRAIN_TINY, "--set", "data.img_size=100000"], "data.img_size"),
        ("train-seed-huge", ["train", RECIPE, *TRAIN_TINY, "--set", f"seed={2 ** 65}"], "seed"),
        ("train-view-size-huge", ["train", RECIPE, *TRAIN_TINY, "--set", "data.view_args={size=1000.0}"], "size <= 32"),
        ("train-view-count-huge", ["train", RECIPE, *TRAIN_TINY, "--set", "data.view_args={count=100000}"], "count <= 64"),
        ("diagnose-n-test-huge", ["diagnose", "run", "--json", "d.json", "--n-test", BIG], BIG),
        ("train-epochs-huge", ["train", RECIPE, *TRAIN_TINY, "--set", "optim.epochs=1e308"], "optim.epochs"),
        ("train-warmup-huge", ["train", RECIPE, *TRAIN_TINY, "--set", "optim.warmup_epochs=1e308"], "optim.warmup_epochs"),
        ("train-max-steps-huge", ["train", RECIPE, *TRAIN_TINY, "--set", f"optim.max_steps={BIG}0"], "optim.max_steps"),
        ("train-batch-huge", ["train", RECIPE, *TRAIN_TINY, "--set", "optim.batch_size=1000000"], "optim.batch_size"),
        ("train-factor-bins-one", ["train", RECIPE, *TRAIN_TINY, "--set", "probe.enabled=true", "--set", "probe.factor_bins=1"], "probe.factor_bins"),
        ("train-factor-bins-huge", ["train", RECIPE, *TRAIN_TINY, "--set", "probe.enabled=true", "--set", "probe.factor_bins=1000000"], "probe.factor_bins"),
        ("train-grad-clip-negative", ["train", RECIPE, *TRAIN_TINY, "--set", "optim.grad_clip=-1.0"], "optim.grad_clip"),
        ("train-momentum-above-one", ["train", RECIPE, *TRAIN_TINY, "--set", "optim.momentum=1.5"], "optim.momentum"),
        ("train-betas-strings", ["train", RECIPE, *TRAIN_TINY, "--set", 'optim.betas=["a", "b"]'], "optim.betas"),
        ("train-betas-one", ["train", RECIPE, *TRAIN_TINY, "--set", "optim.betas=[0.9]"], "optim.betas"),
        ("train-blur-sigma-huge", ["train", RECIPE, *TRAIN_TINY, "--set", "data.view_args={blur_p=1.0, blur_sigma=[0.1, 1e308]}"], "blur_sigma"),
        ("train-blur-sigma-reversed", ["train", RECIPE, *TRAIN_TINY, "--set", "data.view_args={blur_sigma=[2.0, 1.0]}"], "blur_sigma"),
        ("train-blur-sigma-one-number", ["train", RECIPE, *TRAIN_TINY, "--set", "data.view_args={blur_sigma=[2.0]}"], "blur_sigma"),
        ("train-crop-ratio-one-number", ["train", RECIPE, *TRAIN_TINY, "--set", "data.view_args={crop_ratio=[0.5]}"], "crop_ratio"),
        ("train-rotation-huge", ["train", RECIPE, *TRAIN_TINY, "--set", "data.view_args={rotation=1e308}"], "rotation"),
        ("search-steps-huge", ["search", *SEARCH_TINY, "--out", "s", "--steps", "1" + "0" * 400], "--steps"),
        ("search-max-steps-huge", ["search", *SEARCH_TINY, "--out", "s", "--max-steps", BIG + "0"], "--max-steps"),
        ("search-steps-too-many-epochs", ["search", *SEARCH_TINY, "--out", "s", "--steps", "500000"], "epochs, above the bound"),
        ("search-trials-huge", ["search", *SEARCH_TINY, "--out", "s", "--trials", BIG], "--trials"),
        ("search-heartbeat-huge", ["search", *SEARCH_TINY, "--out", "s", "--heartbeat", BIG + "0"], "--heartbeat"),
        ("train-out-name-too-long", ["train", RECIPE, *TRAIN_TINY, "--out", LONG], "longer than the system allows"),
        ("train-data-name-too-long", ["train", RECIPE, *TRAIN_TINY, "--set", f'data.name="{LONG}"'], "longer than the system"),
        ("search-out-name-too-long", ["search", *SEARCH_TINY, "--out", LONG], "longer than the system allows"),
        ("report-run-name-too-long", ["report", LONG], "longer than the system allows"),
        ("export-run-name-too-long", ["export", LONG, "--out", "e"], "longer than the system allows"),
        ("diagnose-run-name-too-long", ["diagnose", LONG], "longer than the system allows"),
        ("report-trials-field-huge", ["report", "search_long_field", "--out", "r"], "not the trials table"),
        ("report-trials-file-huge", ["report", "search_huge_trials", "--out", "r"], "above the 256 MiB"),
        ("report-density-nodes-huge", ["report", "run_density_huge", "--out", "r"], "more than 1,000"),
        ("report-density-weights-mismatch", ["report", "run_density_weights", "--out", "r"], "do not match its nodes"),
        ("report-probe-targets-many", ["report", "run_probes_many", "--out", "r"], "300 targets"),
        ("train-override-nested-deep", ["train", RECIPE, *TRAIN_TINY, "--set", "seed=" + DEEP], "nests deeper than 16"),
        ("train-override-nested-17", ["train", RECIPE, *TRAIN_TINY, "--set", "seed=" + "[" * 17 + "]" * 17], "deeper than 16"),
        ("train-recipe-nested-deep", ["train", "deep.toml", *TRAIN_TINY], "deeper than 16"),
        ("search-override-nested-deep", ["search", *SEARCH_TINY, "--out", "s", "--set", "data.view_args=" + DEEP],
         "nests deeper than 16"),
        ("search-override-long-named-short", ["search", *SEARCH_TINY, "--out", "s", "--set", "seed=" + "1" * 100_000],
         "(100,005 characters)"),
        ("train-out-nul", ["train", RECIPE, *TRAIN_TINY, "--set", 'out="o\\u0000x"'], "holds a NUL character"),
        ("search-fix-value-long-named-short", ["search", *SEARCH_TINY, "--out", "s", "--fix", "activation=" + "x" * 100_000],
         "(100,011 characters)"),
        ("search-timeout-inf", ["search", *SEARCH_TINY, "--out", "s", "--timeout", "inf"], "--timeout"),
        ("diagnose-n-train-huge", ["diagnose", "run", "--json", "d.json", "--n-train", BIG], BIG),
        ("diagnose-seed-huge", ["diagnose", "run", "--json", "d.json", "--seed", str(2 ** 65)], "seed"),
        ("diagnose-pt-shared-lists", ["diagnose", "shared.pt", "--json", "d.json"], "more than 10,000,000 dicts, lists and entries"),
        ("diagnose-pt-inflating", ["diagnose", "inflating.pt", "--json", "d.json"], "compressed entries"),
        ("train-out-another-programs-config", ["train", RECIPE, *TRAIN_TINY, "--out", "folder_hf"], "not this run's"),
        ("train-resume-no-optimiser-state", ["train", RECIPE, *TRAIN_TINY, "--out", "run_no_optim"], "optimiser state"),
        ("train-resume-optimiser-state-misshapen", ["train", RECIPE, *TRAIN_TINY, "--out", "run_bad_optim"],
         "has shape (7,), its parameter"),
        ("train-resume-last-loss-not-a-number", ["train", RECIPE, *TRAIN_TINY, "--out", "run_bad_loss"], "TypeError"),
        ("train-out-holds-stray-run-files", ["train", RECIPE, *TRAIN_TINY, "--out", "run_stray"],
         "holds metrics.jsonl but no config.json or checkpoint"),
        ("train-resume-step-outside-the-run", ["train", RECIPE, *TRAIN_TINY, "--out", "run_bad_step"], "step -1000000000000"),
        ("diagnose-ckpt-no-normalisation", ["diagnose", "no_norm.ckpt", "--json", "d.json"], "no training normalisation"),
        ("diagnose-ckpt-metadata-deep", ["diagnose", "deep_meta.ckpt", "--json", "d.json"], "nested too deeply"),
        ("report-metrics-huge", ["report", "run_sparse_metrics", "--out", "r"], "above the 4 GiB"),
        ("diagnose-ckpt-prototypes-huge", ["diagnose", "dino_huge.ckpt", "--json", "d.json"], "objective_args.out_dim=1099511627776"),
        ("diagnose-ckpt-out-dim-huge", ["diagnose", "barlow_wide.ckpt", "--json", "d.json"], "out_dim 40,000 needs 6 GiB"),
        ("diagnose-img-size-zero", ["diagnose", "weights.safetensors", "--architecture", "resnet18_w16", "--img-size", "0",
                                    "--json", "d.json"], "--img-size"),
        ("export-img-size-zero", ["export", "weights.safetensors", "--out", "e", "--architecture", "resnet18_w16",
                                  "--img-size", "0"], "--img-size"),
        ("export-img-size-huge", ["export", "weights.safetensors", "--out", "e", "--architecture", "resnet18_w16",
                                  "--img-size", "100000"], "1024"),
    ],
    "runtime": [
        ("diagnose-device-tpu", ["diagnose", "run", "--json", "d.json", "--device", "tpu"], "tpu"),
        ("train-device-tpu", ["train", RECIPE, *TRAIN_TINY, "--device", "tpu"], "tpu"),
        ("search-device-tpu", ["search", *SEARCH_TINY[:-2], "--out", "s", "--device", "tpu"], "tpu"),
        ("search-corrupt-image", ["search", *SEARCH_TINY, "--out", "s", "--data", "images_corrupt"], "bad.png"),
        ("train-corrupt-image", ["train", RECIPE, *TRAIN_TINY, "--set", 'data.name="images_corrupt"'], "bad.png"),
        ("search-zero-pixel-images", ["search", *SEARCH_TINY, "--out", "s", "--data", "zero_pixels.npz"], "zero_pixels.npz"),
        ("train-resume-wrong-shape", ["train", RECIPE, *TRAIN_TINY, "--out", "run_shape"], "do not fit"),
        ("diagnose-wrong-shape", ["diagnose", "shape.ckpt", "--json", "d.json"], "do not fit"),
        ("export-wrong-shape", ["export", "shape.ckpt", "--out", "e"], "shape.ckpt"),
        ("export-std-nan", ["export", "run", "--out", "e", "--std", "nan,nan,nan"], "nan"),
        ("export-mean-inf", ["export", "run", "--out", "e", "--mean", "inf,0,0"], "inf"),
        ("diagnose-no-families", ["diagnose", "run", "--json", "d.json", "--families", ","], "no orbit families"),
        ("diagnose-families-repeated", ["diagnose", "run", "--json", "d.json", "--families", "rotate,hue,rotate"],
         "named more than once"),
        ("diagnose-std-zero", ["diagnose", "weights.safetensors", "--architecture", "resnet18_w16", "--std", "0,0,0",
                               "--json", "d.json"], "--std"),
    ],
}
TRUST_CLI_MARKED = [pytest.param(*c, id=f"{kind}:{c[0]}") for kind, cases in TRUST_CLI.items() for c in cases] + [
    pytest.param(*c, marks=HAS_PROC, id=f"runtime:{c[0]}") for c in [
        ("export-out-proc", ["export", "run", "--out", "/proc/x"], "/proc"),
        ("report-out-proc", ["report", "run", "--out", "/proc/x"], "/proc"),
        ("diagnose-json-proc", ["diagnose", "run", "--json", "/proc/x/d.json"], "/proc"),
        ("train-out-proc", ["train", RECIPE, *TRAIN_TINY, "--out", "/proc/x"], "/proc"),
        ("search-out-proc", ["search", *SEARCH_TINY, "--out", "/proc/x"], "/proc"),
    ]]


@pytest.mark.parametrize("case, args, needle", TRUST_CLI_MARKED)
def test_cli_trust_case_is_clean(planted, inside, case: str, args: list[str], needle: str) -> None:
    """Exit 2, no traceback, the bad value named; ``inside`` checks that nothing in the world (the
    links' targets in world/outside included) was written or changed."""
    test_cli_bad_input_is_clean(planted, inside, case, args, needle)


def _trust_api_cases() -> dict[str, list[tuple[str, Callable[[Path], Any], str, str]]]:
    """(case, call(world), error class name, needle) by class."""
    import geohead.backbones as bb
    from geohead.data import load_dataset
    from geohead.io import path_in

    def search(**kw: Any) -> Callable[[Path], Any]:
        from geohead.search import SearchConfig

        return lambda w: SearchConfig(**{"out": "s", "device": "cpu", **kw}).validate()

    def timm_model() -> Any:
        import timm

        return timm.create_model("resnet18", pretrained=False, num_classes=0, channels=[16, 32, 64, 128], stem_width=16)

    def diagnose_model(backbone: Any, head: Any, **kw: Any) -> Callable[[Path], Any]:
        from geohead.pretrained.diagnose import diagnose_model as run

        return lambda w: run(backbone, head, "barlow", data="shapes", **kw)


    from torch import nn

    return {
        "symlink": [
            ("load-backbone-config-link-out", lambda w: _export().load_backbone(w / "exp_link_config"), "ExportError", "config.json"),
            ("load-head-spec-link-out", lambda w: _export().load_head(w / "exp_link_head"), "ExportError", "head.json"),
            ("load-checkpoint-link-out", lambda w: _ckpt().load_checkpoint(w / "run_link_last"), "CheckpointError", "last.safetensors"),
            ("load-checkpoint-legacy-link-out", lambda w: _ckpt().load_checkpoint(w / "run_link_legacy"), "CheckpointError", "last.ckpt"),
            ("load-dataset-image-link-out", lambda w: load_dataset(w / "images_link"), "ValueError", "symbolic link"),
            ("path-in-parent", lambda w: path_in(w, "../x", "file"), "OutsideFolderError", "../x"),
            ("report-summary-link-out", lambda w: _report().make_report(w / "run_link_summary", w / "r"), "ReportError", "summary.json"),
        ],
        "loader-keys": [
            ("build-backbone-pretrained", lambda w: __import__("geohead.pretrained.backbone").pretrained.backbone.build_backbone(
                _ckpt().load_checkpoint(w / "run").section("model.backbone"), "resnet18_w16", {"pretrained": True}),
             "PretrainedError", "pretrained"),
            ("load-pretrained-checkpoint-path", lambda w: __import__("geohead.pretrained").pretrained.load_pretrained(
                w / "weights.safetensors", architecture="resnet18_w16", model_args={"checkpoint_path": "/etc/passwd"}),
             "PretrainedError", "checkpoint_path"),
            ("foreign-backbone-overlay", lambda w: __import__("geohead.export.foreign").export.foreign.foreign_backbone(
                timm_model(), architecture="resnet18", model_args={"pretrained_cfg_overlay": {"file": "x"}}),
             "ExportError", "pretrained_cfg_overlay"),
            ("export-module-model-args-pretrained", lambda w: _export().export_backbone(
                timm_model(), w / "e", architecture="resnet18", model_args={"pretrained": True}), "ExportError", "pretrained"),
            ("check-model-args-file", lambda w: bb.check_model_args({"file": "weights.pth"}), "UntrustedInputError", "file"),
            ("check-model-args-object", lambda w: bb.check_model_args({"act_layer": {"name": "x"}}), "UntrustedInputError", "act_layer"),
            # even unverified (verify=False), a loader key in config.json never reaches timm
            ("config-json-pretrained-unverified", lambda w: _export().load_backbone(w / "exp_pretrained", verify=False),
             "ExportError", "pretrained"),
            ("config-json-pretrained-verified", lambda w: _export().load_backbone(w / "exp_pretrained"), "ExportError",
             "config.json"),
        ],
        "bounds": [
            ("load-dataset-n-huge", lambda w: load_dataset("shapes", n=10 ** 9), "ValueError", "2,000,000"),
            ("load-dataset-img-size-huge", lambda w: load_dataset("shapes", n=4, img_size=100_000), "ValueError", "1,024"),
            ("load-dataset-pixels-huge", lambda w: load_dataset("shapes", n=10 ** 6, img_size=64), "ValueError", "GiB"),
            ("load-dataset-seed-huge", lambda w: load_dataset("shapes", n=4, seed=2 ** 65), "ValueError", str(2 ** 65)),
            ("load-dataset-image-bomb", lambda w: load_dataset(w / "images_bomb"), "ValueError", "bomb.png"),
            ("pretrained-objective-out-dim-huge", lambda w: __import__("geohead.pretrained.diagnose").pretrained.diagnose._objective(
                "barlow", __import__("geohead.heads").heads.GeometricHead(8, 40_000, hidden_dim=16)), "ValueError", "40,000"),
            ("search-config-workers-huge", search(workers=1000), "SearchError", "1000"),
            ("search-config-n-train-huge", search(n_train=10 ** 9), "SearchError", "1000000000"),
            ("search-config-seed-negative", search(seed=-1), "SearchError", "-1"),
            ("recipe-n-train-huge", lambda w: __import__("geohead.training.config").training.config.load_recipe(
                RECIPE, TINY + [f"data.n_train={BIG}"]), "ConfigError", "data.n_train"),
            ("space-fix-hidden-dim-huge", lambda w: __import__("geohead.search.space").search.space.parse_constraints(
                [f"hidden_dim={BIG}"]), "SpaceError", BIG),
            ("monitor-every-fraction", lambda w: __import__("geohead.monitor").monitor.GeometryMonitor(
                nn.Linear(2, 2), nn.Linear(2, 2), every=2.5), "ValueError", "2.5"),
            ("monitor-hessian-every-fraction", lambda w: __import__("geohead.monitor").monitor.GeometryMonitor(
                nn.Linear(2, 2), nn.Linear(2, 2), hessian_every=1.5), "ValueError", "1.5"),
        ],
        "runtime": [
            ("diagnose-model-none", diagnose_model(None, nn.Identity()), "PretrainedError", "NoneType"),
            ("diagnose-model-string-head", diagnose_model(nn.Identity(), "GeometricHead"), "PretrainedError", "GeometricHead"),
            ("diagnose-model-std-zero", diagnose_model(nn.Identity(), nn.Identity(), std=[0, 0, 0]), "PretrainedError", "std"),
            ("diagnose-model-mean-nan", diagnose_model(nn.Identity(), nn.Identity(), mean=[float("nan")] * 3), "PretrainedError", "mean"),
            ("load-dataset-zero-pixels", lambda w: load_dataset(w / "zero_pixels.npz"), "ValueError", "zero_pixels.npz"),
            ("load-dataset-corrupt-image", lambda w: load_dataset(w / "images_corrupt"), "ValueError", "bad.png"),
            ("load-dataset-number", lambda w: load_dataset(123), "TypeError", "pathlib.Path"),
            ("spec-from-none", lambda w: __import__("geohead.heads").heads.HeadSpec.from_json(None), "SpecError", "pathlib.Path"),
            ("export-source-none", lambda w: _export().export_backbone(None, w / "e"), "ExportError", "NoneType"),
            ("load-backbone-none", lambda w: _export().load_backbone(None), "ExportError", "NoneType"),
            ("export-std-nan", lambda w: _export().export_backbone(w / "run", w / "e", std=[float("nan")] * 3), "ExportError", "std"),
            ("export-std-zero", lambda w: _export().export_backbone(w / "run", w / "e", std=[0.0] * 3), "ExportError", "std"),
            ("resolve-device-tpu", lambda w: __import__("geohead.training.model").training.model.resolve_device("tpu"), "ValueError", "tpu"),
            ("load-trained-wrong-shape", lambda w: __import__("geohead.training.model").training.model.load_trained(
                w / "shape.ckpt"), "CheckpointError", "do not fit"),
        ],
    }


TRUST_API = _trust_api_cases()


@pytest.mark.parametrize("case, call, error, needle",
                         [pytest.param(*c, id=f"{kind}:{c[0]}") for kind, cases in TRUST_API.items() for c in cases])
def test_api_trust_case_raises_geoheads_error(planted, inside, case: str, call, error: str, needle: str) -> None:
    test_api_bad_input_raises_geoheads_error(inside, case, call, error, needle)


def test_the_trust_tables_are_large_enough() -> None:
    """The second pass adds at least 60 cases over the four classes."""
    counts = {kind: len(TRUST_CLI[kind]) + len(TRUST_API[kind]) for kind in TRUST_CLI}
    assert all(n >= 8 for n in counts.values()), counts
    assert sum(counts.values()) + 5 >= 60, counts
