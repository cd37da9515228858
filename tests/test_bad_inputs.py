"""Every bad input is clean (issue 24): a table of bad inputs over every command and the public API.

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

RECIPE = str(ROOT / "recipes" / "barlow_shapes_cpu.toml")
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
    data = bytearray((run / "last.ckpt").read_bytes())
    data[-3] ^= 1
    (w / "bitflip.ckpt").write_bytes(bytes(data))
    ck = load_checkpoint(run)
    meta = {**ck.meta, "head_spec": {**ck.meta["head_spec"], "activation": "pwn_geohead:Evil"}}
    save_checkpoint(w / "pwnspec.ckpt", ck.tensors, meta)
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in ck.section("model.backbone").items()}, str(w / "weights.safetensors"))
    diag = w / "run_bad_diag"
    shutil.copytree(run, diag)
    (diag / "diagnose.json").write_text("[1, 2, 3]")
    diag2 = w / "run_bad_diag2"
    shutil.copytree(run, diag2)
    (diag2 / "diagnose.json").write_text(json.dumps({"orbits": 7, "probes": "x", "hessian": [1], "collapse": None}))
    (w / "search_bad").mkdir()
    (w / "search_bad" / "trials.csv").write_text("hello\nworld\n")
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
    # search
    ("search-lr-inf", ["search", *SEARCH_TINY, "--set", "optim.lr=inf"], "optim.lr"),
    ("search-lr-nan", ["search", *SEARCH_TINY, "--set", "optim.lr=nan"], "optim.lr"),
    ("search-out-is-file", ["search", *SEARCH_TINY, "--out", "file.txt"], "file.txt"),
    ("search-out-through-file", ["search", *SEARCH_TINY, "--out", "file.txt/s"], "file.txt"),
    ("search-storage-through-file", ["search", *SEARCH_TINY, "--out", "s", "--storage", "sqlite:///file.txt/x.db"], "file.txt"),
    ("search-journal-through-file", ["search", *SEARCH_TINY, "--out", "s", "--storage", "journal:file.txt/j.log"], "file.txt"),
    ("search-storage-is-folder", ["search", *SEARCH_TINY, "--out", "s", "--storage", "sqlite:///folder"], "folder"),
    ("search-timeout-word", ["search", *SEARCH_TINY, "--out", "s", "--timeout", "soon"], "soon"),
    ("search-trials-negative", ["search", *SEARCH_TINY, "--out", "s", "--trials", "-3"], "-3"),
    ("search-img-size-negative", ["search", *SEARCH_TINY, "--out", "s", "--img-size", "-32"], "-32"),
    ("search-unknown-objective", ["search", *SEARCH_TINY, "--out", "s", "--objective", "nope"], "nope"),
    ("search-fix-activation-import", ["search", *SEARCH_TINY, "--out", "s", "--fix", "activation=pwn_geohead:Evil"], "pwn_geohead:Evil"),
    ("search-huge-label", ["search", *SEARCH_TINY, "--out", "s", "--data", "huge_label.npz"], "1099511627776"),
    ("search-missing-data", ["search", *SEARCH_TINY, "--out", "s", "--data", "nodata.npz"], "nodata.npz"),
    # export
    ("export-out-is-file", ["export", "run", "--out", "file.txt"], "file.txt"),
    ("export-out-through-file", ["export", "run", "--out", "file.txt/x"], "file.txt"),
    ("export-architecture-on-ckpt", ["export", "run/last.ckpt", "--out", "exp", "--architecture", "resnet18"], "is a geohead run"),
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
    ("report-diagnose-wrong-shapes", ["report", "run_bad_diag2"], "diagnose.json"),
    ("report-trials-garbage", ["report", "search_bad"], "trials.csv"),
    ("report-trials-not-utf8", ["report", "not_utf8_search"], "trials.csv"),
    ("report-not-a-run", ["report", "folder"], "folder"),
    ("report-missing", ["report", "nowhere"], "nowhere"),
    # diagnose
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
        shutil.copytree(world / "run", flip)
        shutil.copy(world / "bitflip.ckpt", flip / "last.ckpt")
        (world / "folder_full").mkdir()
        (world / "folder_full" / "keep.txt").write_text("mine\n")
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
