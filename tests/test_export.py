"""Export of head-free backbones: timm-only loading bit for bit, geohead.load_backbone, errors."""
from __future__ import annotations

import copy
import functools
import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import geohead
from geohead.backbones import create_backbone, rebuild_backbone
from geohead.training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from geohead.cli import main
from geohead.export import ExportError, export_backbone, load_backbone, load_head, read_metadata, tensor_checksum
from tiny_runs import tiny_run

WORKER = Path(__file__).parent / "workers" / "timm_load.py"
FORBIDDEN = ("head.", "predictor.", "teacher.", "model.", "objective.", "optim.")


@pytest.fixture(scope="module")
def vit_run(tmp_path_factory) -> Path:
    """Barlow Twins with a ViT-Tiny at 32 px (4x4 patches)."""
    return tiny_run(tmp_path_factory, "barlow", "vit_tiny_cifar", ("optim.batch_size=8", "optim.max_steps=1"))


@pytest.fixture(scope="module")
def resnet_run(tmp_path_factory) -> Path:
    """BYOL with the standard-stem ResNet-18 at 1/4 width (timm-expressible): student, EMA
    teacher, head and predictor in the checkpoint."""
    return tiny_run(tmp_path_factory, "byol")


def batch(n: int = 6, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


@functools.lru_cache(maxsize=None)
def _backbone(run: Path, branch: str) -> torch.nn.Module:
    ck = load_checkpoint(run)
    model = rebuild_backbone(ck.meta["backbone"])  # built and initialised for real, then loaded
    model.load_state_dict(ck.section(f"{branch}.backbone"), strict=True)
    return model.eval()


def backbone_of(run: Path, branch: str = "model", round_to: torch.dtype | None = None) -> torch.nn.Module:
    """The exporting model's backbone, rebuilt from the checkpoint (weights optionally rounded)."""
    model = copy.deepcopy(_backbone(run, branch))
    if round_to is not None:
        with torch.no_grad():
            for t in [*model.parameters(), *model.buffers()]:
                if t.is_floating_point():
                    t.copy_(t.to(round_to).to(t.dtype))
    return model


def features(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the worker, so both sides run the same kernels
    try:
        with torch.no_grad():
            return model(x)
    finally:
        torch.set_num_threads(threads)


def timm_only(tmp_path: Path, x: torch.Tensor, dirs: list[Path]) -> tuple[list, list, dict]:
    """Load ``dirs`` in a fresh ``python -I`` process that imports timm and cannot import geohead.

    Returns the features in timm's default (contiguous) memory format, those in channels-last,
    and the worker's report."""
    inp, out = tmp_path / "x.safetensors", tmp_path / "feats.safetensors"
    save_file({"x": x.contiguous()}, str(inp))
    res = subprocess.run([sys.executable, "-I", str(WORKER), str(inp), str(out), *map(str, dirs)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout.strip().splitlines()[-1])
    assert info["geohead_imported"] is False
    feats = load_file(str(out))
    return [feats.get(f"f{i}") for i in range(len(dirs))], [feats.get(f"c{i}") for i in range(len(dirs))], info


def file_keys(path: Path) -> set[str]:
    with safe_open(str(path), framework="pt") as f:
        return set(f.keys())


def file_meta(path: Path) -> dict[str, str]:
    """Raw safetensors metadata (every geohead.* value is JSON text)."""
    with safe_open(str(path), framework="pt") as f:
        return f.metadata()


# ---------------------------------------------------------------------- timm-only round trips
def test_timm_loads_exports_alone_bit_for_bit(vit_run, resnet_run, tmp_path) -> None:
    x = batch()
    dirs = {
        "vit": export_backbone(vit_run, tmp_path / "vit").out_dir,
        "vit_bf16": export_backbone(vit_run, tmp_path / "vit_bf16", dtype="bf16").out_dir,
        "resnet": export_backbone(resnet_run, tmp_path / "resnet").out_dir,
        "resnet_teacher": export_backbone(resnet_run, tmp_path / "resnet_teacher", teacher=True).out_dir,
        "resnet_fp16": export_backbone(resnet_run, tmp_path / "resnet_fp16", dtype="fp16").out_dir,
    }
    cifar = create_backbone("resnet18_cifar", channels=[8, 16, 32, 64], stem_width=8)
    dirs["cifar"] = export_backbone(cifar, tmp_path / "cifar").out_dir
    got, got_cl, info = timm_only(tmp_path, x, list(dirs.values()))
    got, got_cl = dict(zip(dirs, got)), dict(zip(dirs, got_cl))
    errors = info["errors"]
    assert set(errors) == {str(dirs["cifar"])}, errors

    # fp32: the exporting model's backbone features, bit for bit (atol 0), in the same memory
    # format: the ViT trained contiguous, the ResNet channels-last (the format changes the CPU
    # kernels and so the last bits; weights are the same either way)
    assert backbone_of(vit_run).geohead_config["channels_last"] is False
    ref_vit = features(backbone_of(vit_run), x)
    assert got["vit"].shape == (6, 192) and torch.equal(got["vit"], ref_vit)
    resnet = backbone_of(resnet_run)
    assert resnet.geohead_config["channels_last"] is True and resnet.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    ref_resnet = features(resnet, x)
    assert got_cl["resnet"].shape == (6, 128) and torch.equal(got_cl["resnet"], ref_resnet)
    assert torch.equal(got["resnet"], features(resnet.to(memory_format=torch.contiguous_format), x))
    # the EMA teacher's backbone, not the student's
    ref_teacher = features(backbone_of(resnet_run, "teacher"), x)
    assert torch.equal(got_cl["resnet_teacher"], ref_teacher) and not torch.equal(ref_teacher, ref_resnet)
    # bf16 / fp16 storage: exactly the features of the backbone with its weights rounded to that
    # dtype (timm casts them back into its float32 parameters), close to the float32 features
    for key, run, dt, ref in (("vit_bf16", vit_run, torch.bfloat16, ref_vit), ("resnet_fp16", resnet_run, torch.float16, ref_resnet)):
        rounded = features(backbone_of(run, round_to=dt), x)
        mine = got_cl[key] if key.startswith("resnet") else got[key]
        assert torch.equal(mine, rounded), key
        rel = float((mine - ref).norm() / ref.norm())
        assert 0 < rel < (3e-2 if dt == torch.bfloat16 else 3e-3), (key, rel)
    # timm reads the training normalisation and size from pretrained_cfg
    mean = load_checkpoint(resnet_run).meta["data"]["mean"]
    cfg = info["data_config"][str(dirs["resnet"])]
    assert cfg["mean"] == pytest.approx(mean, abs=0) and cfg["input_size"] == [3, 32, 32] and cfg["crop_pct"] == 1.0
    # the CIFAR stem is not timm-expressible: timm refuses the 3x3 conv1 loudly, never loads wrong weights
    assert "conv1.weight" in errors[str(dirs["cifar"])] and "size mismatch" in errors[str(dirs["cifar"])]
    assert json.loads((dirs["cifar"] / "config.json").read_text())["geohead"]["timm_loadable"] is False


def test_files_hold_the_backbone_only_and_provenance(resnet_run, tmp_path) -> None:
    ck = load_checkpoint(resnet_run)
    res = export_backbone(resnet_run, tmp_path / "e", with_head=True)
    keys = file_keys(res.weights)
    assert keys == set(ck.section("model.backbone"))  # exactly the backbone's state_dict keys
    assert not any(k.startswith(FORBIDDEN) for k in keys)
    for part in ("model.head", "model.predictor", "teacher.backbone", "teacher.head"):
        assert ck.section(part), part  # the checkpoint does hold them ...
    head_keys = set(ck.section("model.head"))
    assert not keys & {f"head.{k}" for k in head_keys} and not keys & head_keys
    assert file_keys(res.head_weights) == head_keys  # ... and the head goes to its own file
    assert sorted(p.name for p in res.out_dir.iterdir()) == ["config.json", "head.json", "head.safetensors", "model.safetensors"]
    assert not list(tmp_path.glob(".e.*"))  # no temporary folder left behind

    meta = file_meta(res.weights)
    assert meta["format"] == "pt" and json.loads(meta["geohead.format"]) == "geohead.backbone/1"
    assert {f"geohead.{k}": json.dumps(v, sort_keys=True) for k, v in read_metadata(res.weights).items()} == {
        k: v for k, v in meta.items() if k != "format"}
    assert json.loads(meta["geohead.geohead_version"]) == geohead.__version__ == ck.meta["geohead_version"]
    assert json.loads(meta["geohead.objective"]) == "byol"
    assert json.loads(meta["geohead.head_spec"]) == ck.meta["head_spec"]
    assert json.loads(meta["geohead.predictor_spec"]) == ck.meta["predictor_spec"]
    assert json.loads(meta["geohead.data"]) == ck.meta["data"]
    assert json.loads(meta["geohead.step"]) == ck.meta["step"] == 2
    assert json.loads(meta["geohead.branch"]) == "student"
    # the checksum is sha256 of the stored tensors (names, dtypes, shapes, bytes)
    stored = load_file(str(res.weights))
    assert json.loads(meta["geohead.checksum"]) == res.checksum == tensor_checksum(stored)
    assert res.checksum.startswith("sha256:") and len(res.checksum) == 7 + 64
    name = sorted(stored)[0]
    flipped = dict(stored)
    flipped[name] = stored[name].clone()
    flipped[name].view(-1)[0] = torch.nextafter(flipped[name].view(-1)[0], torch.tensor(float("inf")))
    assert tensor_checksum(flipped) != res.checksum  # one ulp changes it
    cfg = json.loads(res.config.read_text())
    assert cfg["architecture"] == "resnet18" and cfg["num_classes"] == 0 and cfg["num_features"] == 128
    assert cfg["model_args"] == {"channels": [16, 32, 64, 128], "stem_width": 16, "num_classes": 0}
    assert cfg["geohead"]["checksum"] == res.checksum and cfg["geohead"]["timm_loadable"] is True

    # the head round-trips through its own file
    head = load_head(res.out_dir)
    from geohead.heads import GeometricHead

    ref = GeometricHead.from_spec(ck.meta["head_spec"])
    ref.load_state_dict(ck.section("model.head"))
    z = torch.randn(5, 128, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(head(z), ref.eval()(z))


def test_load_backbone_round_trips_every_kind(vit_run, resnet_run, tmp_path) -> None:
    x = batch(4, seed=3)
    # the CIFAR stem (not timm-expressible) through the Python API, bit for bit
    cifar = create_backbone("resnet18_cifar", channels=[8, 16, 32, 64], stem_width=8).eval()
    geohead.export_backbone(cifar, tmp_path / "cifar")
    back = geohead.load_backbone(tmp_path / "cifar")
    assert isinstance(back.maxpool, torch.nn.Identity) and back.conv1.kernel_size == (3, 3) and back.conv1.stride == (1, 1)
    assert not back.training and torch.equal(features(back, x), features(cifar, x))
    # a ViT export written in bf16 comes back as the bf16-rounded weights in float32
    export_backbone(vit_run, tmp_path / "vit", dtype="bf16")
    vit = load_backbone(tmp_path / "vit")
    assert next(vit.parameters()).dtype == torch.float32
    assert torch.equal(features(vit, x), features(backbone_of(vit_run, round_to=torch.bfloat16), x))
    # a whole SSLModel: its backbone, and its head with with_head
    from geohead.training.config import config_from_dict
    from geohead.training.model import build_models

    model = build_models(config_from_dict(load_checkpoint(resnet_run).meta["config"]))[0]
    res = export_backbone(model, tmp_path / "ssl", with_head=True)
    assert file_keys(res.weights) == set(model.backbone.state_dict())
    assert file_keys(res.head_weights) == set(model.head.state_dict())
    assert json.loads(file_meta(res.weights)["geohead.data"]) is None


# ---------------------------------------------------------------------- errors (never a pickle)
@pytest.fixture
def no_pickle(monkeypatch):
    """Any torch.load / pickle.load(s) call fails the test."""
    def boom(*a, **k):
        raise AssertionError("a pickle load was attempted")

    monkeypatch.setattr(torch, "load", boom)
    monkeypatch.setattr(pickle, "load", boom)
    monkeypatch.setattr(pickle, "loads", boom)


def test_bad_files_give_clear_errors_never_a_pickle(resnet_run, vit_run, tmp_path, no_pickle) -> None:
    good = export_backbone(resnet_run, tmp_path / "good").out_dir
    data = (good / "model.safetensors").read_bytes()

    def variant(name: str, blob: bytes) -> Path:
        d = tmp_path / name
        shutil.copytree(good, d)
        (d / "model.safetensors").write_bytes(blob)
        (d / "pytorch_model.bin").write_bytes(b"decoy: never to be unpickled")
        return d

    truncated = variant("truncated", data[: len(data) // 2])
    with pytest.raises(ExportError, match="truncated or corrupted"):
        load_backbone(truncated)
    header = variant("bad_header", data[:8] + b"\x00garbage" + data[17:])
    with pytest.raises(ExportError, match="truncated or corrupted"):
        load_backbone(header)
    body = bytearray(data)
    body[-100] ^= 0xFF  # a flipped byte in the tensor data: only the checksum can see it
    flipped = variant("flipped", bytes(body))
    with pytest.raises(ExportError, match="checksum"):
        load_backbone(flipped)
    with pytest.raises(ExportError, match="does not exist"):
        load_backbone(tmp_path / "no_such_folder")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ExportError, match="no config.json"):
        load_backbone(tmp_path / "empty")

    # weights of another architecture under this config (checksum check off to reach the shape check)
    vit_dir = export_backbone(vit_run, tmp_path / "vit").out_dir
    other = tmp_path / "other"
    shutil.copytree(good, other)
    shutil.copy(vit_dir / "model.safetensors", other / "model.safetensors")
    with pytest.raises(ExportError, match="checksum"):
        load_backbone(other)
    with pytest.raises(ExportError, match="another architecture.*unexpected.*blocks.0.attn"):
        load_backbone(other, verify=False)

    # a checkpoint whose backbone tensors belong to another architecture than it records
    ck = load_checkpoint(resnet_run)
    vit_cfg = load_checkpoint(vit_run).meta["backbone"]
    save_checkpoint(tmp_path / "mixed.ckpt", ck.tensors, {**ck.meta, "backbone": vit_cfg})
    with pytest.raises(ExportError, match="another architecture"):
        export_backbone(tmp_path / "mixed.ckpt", tmp_path / "mixed_out")
    assert not (tmp_path / "mixed_out").exists()
    # truncated / foreign checkpoints and missing run folders
    raw = (resnet_run / "last.safetensors").read_bytes()
    (tmp_path / "cut.ckpt").write_bytes(raw[: len(raw) // 3])
    with pytest.raises(CheckpointError, match="truncated or corrupted"):
        export_backbone(tmp_path / "cut.ckpt", tmp_path / "cut_out")
    with pytest.raises(CheckpointError, match="not a geohead checkpoint"):
        export_backbone(good / "model.safetensors", tmp_path / "foreign_out")
    with pytest.raises(CheckpointError, match="does not exist"):
        export_backbone(tmp_path / "no_run", tmp_path / "x")
    with pytest.raises(ExportError, match="no EMA teacher"):
        export_backbone(vit_run, tmp_path / "t", teacher=True)
    with pytest.raises(ExportError, match="unknown dtype 'int8'"):
        export_backbone(resnet_run, tmp_path / "t", dtype="int8")
    for name in ("mixed_out", "cut_out", "foreign_out", "x", "t"):
        assert not (tmp_path / name).exists(), name


def test_nothing_half_written_and_overwrite(resnet_run, tmp_path, monkeypatch) -> None:
    out = tmp_path / "exp"
    first = export_backbone(resnet_run, out)
    with pytest.raises(ExportError, match="already holds files"):
        export_backbone(resnet_run, out, dtype="bf16")
    assert load_file(str(out / "model.safetensors"))["conv1.weight"].dtype == torch.float32  # untouched

    import geohead.export.write as ex

    real_save = ex.save_safetensors
    calls = []

    def failing_save(path, tensors, metadata):
        calls.append(path.name)
        if path.name == "head.safetensors":
            raise OSError("disk full (simulated)")
        return real_save(path, tensors, metadata)

    monkeypatch.setattr(ex, "save_safetensors", failing_save)
    with pytest.raises(OSError, match="disk full"):
        export_backbone(resnet_run, tmp_path / "new", with_head=True)
    with pytest.raises(OSError, match="disk full"):
        export_backbone(resnet_run, out, with_head=True, overwrite=True)
    assert calls == ["model.safetensors", "head.safetensors"] * 2
    assert not (tmp_path / "new").exists()
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]  # the old export stays whole
    assert tensor_checksum(load_file(str(out / "model.safetensors"))) == first.checksum
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp"]  # no temporary folders left
    monkeypatch.setattr(ex, "save_safetensors", real_save)
    second = export_backbone(resnet_run, out, dtype="bf16", overwrite=True)
    assert load_file(str(out / "model.safetensors"))["conv1.weight"].dtype == torch.bfloat16
    assert second.checksum != first.checksum


def test_overwrite_replaces_an_export_and_nothing_else(resnet_run, tmp_path) -> None:
    out = tmp_path / "models"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "config.json").write_text("{}")
    with pytest.raises(ExportError, match=r"holds files an export does not write \(notes.txt\); --overwrite replaces"):
        export_backbone(resnet_run, out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "notes.txt"]  # untouched
    assert (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models"]  # no temporary folder was made
    (out / "notes.txt").unlink()
    export_backbone(resnet_run, out, overwrite=True)  # an export's own file names are replaced
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    res = CliRunner().invoke(main, ["export", str(resnet_run), "--out", str(tmp_path), "--overwrite"])
    assert res.exit_code == 2 and "holds files an export does not write (models)" in res.output, res.output
    assert (out / "model.safetensors").is_file()


def test_cli_export(resnet_run, vit_run, tmp_path) -> None:
    runner = CliRunner()
    res = runner.invoke(main, ["export", str(resnet_run), "--out", str(tmp_path / "e"), "--dtype", "bf16", "--with-head"])
    assert res.exit_code == 0, res.output
    assert "local-dir:" in res.output and "pretrained=True" in res.output and "sha256:" in res.output
    assert load_file(str(tmp_path / "e" / "model.safetensors"))["conv1.weight"].dtype == torch.bfloat16
    assert (tmp_path / "e" / "head.safetensors").is_file()
    for args, needle in (
        ([str(tmp_path / "missing"), "--out", str(tmp_path / "m")], "does not exist"),
        ([str(resnet_run), "--out", str(tmp_path / "e")], "--overwrite"),
        ([str(vit_run), "--out", str(tmp_path / "t"), "--teacher"], "no EMA teacher"),
    ):
        res = runner.invoke(main, ["export", *args])
        assert res.exit_code == 2 and needle in res.output and "Traceback" not in res.output, res.output
        assert len(res.output.strip().splitlines()) == 1


def test_package_namespace_is_lazy() -> None:
    code = ("import sys, geohead; before = 'geohead.export' in sys.modules or 'timm' in sys.modules; "
            "f = geohead.export_backbone; g = geohead.load_backbone; "
            "import geohead.export as ex; print(before, f is ex.export_backbone, g is ex.load_backbone)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "True"]
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        geohead.nope  # noqa: B018


def test_an_out_under_tilde_goes_to_the_home_folder_it_was_checked_in(resnet_run, tmp_path, monkeypatch) -> None:
    """`--out '~/e'` (quoted: the shell did not expand it) was checked in the home folder and written
    to a folder named '~' in the working directory; export and report now write where they checked."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    res = CliRunner().invoke(main, ["export", str(resnet_run), "--out", "~/e"])
    assert res.exit_code == 0, res.output
    assert (home / "e" / "model.safetensors").is_file() and not (work / "~").exists()
    assert export_backbone(resnet_run, "~/e2").out_dir == home / "e2"
    res = CliRunner().invoke(main, ["report", str(resnet_run), "--out", "~/r"])
    assert res.exit_code == 0, res.output
    assert (home / "r" / "report.html").is_file() and not (work / "~").exists()
