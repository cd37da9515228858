"""Checkpoints trained anywhere: safe reading, the layouts of Lightning, lightly,
solo-learn and the official DINO / VICReg / Barlow Twins code, the rebuilt GeometricHead checked
against the original module, truthful errors, and the diagnosis of any backbone + head."""
from __future__ import annotations

import json
import os
import warnings

import pytest
import torch
from torch import nn

from geohead import GeometricHead
from geohead.heads.convert import HeadConversionError, layout_from_modules
from geohead.pretrained import PretrainedError, UnsafeCheckpointError, load_pretrained
from geohead.pretrained.synthetic import WRITERS

# no warnings at all: reading, rebuilding, diagnosing and exporting a foreign checkpoint is a normal run
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.filterwarnings("error")]


def _bn_stats_(module: nn.Module) -> nn.Module:
    g = torch.Generator().manual_seed(0)
    for m in module.modules():
        if isinstance(m, nn.BatchNorm1d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g))
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            if m.affine:
                m.weight.data.uniform_(0.5, 2.0, generator=g)
    return module.eval()


def _lightly_heads() -> list[nn.Module]:
    H = pytest.importorskip("lightly.models.modules.heads")
    torch.manual_seed(0)
    heads = [H.BarlowTwinsProjectionHead(8, 16, 6), H.SimCLRProjectionHead(8, 16, 6), H.VICRegProjectionHead(8, 16, 6),
             H.SimSiamProjectionHead(8, 16, 6), H.BYOLProjectionHead(8, 16, 6), H.MoCoProjectionHead(8, 16, 6),
             H.MSNProjectionHead(8, 16, 6), H.MMCRProjectionHead(8, 16, 6), H.VicRegLLocalProjectionHead(8, 16, 6)]
    with warnings.catch_warnings():  # lightly's DINO head calls the deprecated nn.utils.weight_norm
        warnings.simplefilter("ignore", FutureWarning)
        heads.append(H.DINOProjectionHead(8, 16, 6, 10))
        dino_free = H.DINOProjectionHead(8, 16, 6, 10, batch_norm=True, norm_last_layer=False)
    dino_free.last_layer.weight_g.data.uniform_(0.5, 2.0)
    return [_bn_stats_(h) for h in heads + [dino_free]]


def test_from_lightly_gives_bit_identical_outputs():
    """Every lightly head a GeometricHead can express: the same outputs, bit for bit, in eval mode."""
    x = torch.randn(7, 8, generator=torch.Generator().manual_seed(1))
    for lightly_head in _lightly_heads():
        head = GeometricHead.from_lightly(lightly_head)
        with torch.no_grad():
            assert torch.equal(head(x), lightly_head(x)), type(lightly_head).__name__
        assert head.spec.in_dim == 8 and head.out_dim == lightly_head(x).shape[1]


def test_from_lightly_records_the_structure():
    H = pytest.importorskip("lightly.models.modules.heads")
    barlow = GeometricHead.from_lightly(H.BarlowTwinsProjectionHead(8, 16, 6)).spec
    assert (barlow.depth, barlow.hidden_dim, barlow.activation, barlow.norm, barlow.bias) == (3, 16, "relu", "batch", "auto")
    simsiam = GeometricHead.from_lightly(H.SimSiamProjectionHead(8, 16, 6)).spec
    assert simsiam.last_norm == "batch_noaffine"


def test_unexpressible_heads_and_lightly_keywords_get_the_fix():
    with pytest.raises(HeadConversionError, match="hidden widths differ"):
        layout_from_modules([nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 3)]).spec()
    with pytest.raises(TypeError, match=r"input_dim -> in_dim, output_dim -> out_dim.*from_lightly"):
        GeometricHead(input_dim=8, hidden_dim=16, output_dim=6)


@pytest.mark.parametrize("name", list(WRITERS))
def test_layouts_rebuild_the_head_exactly(tmp_path, name):
    """Each layout, written exactly as its library writes it: the backbone loads strictly, the
    head is rebuilt from its weights and gives the original module's outputs."""
    writer, method = WRITERS[name]
    path, reference = writer(tmp_path)
    pt = load_pretrained(path)
    assert pt.method == (None if name.startswith("lightly") else method)
    assert pt.head_check["allclose"]
    x = torch.randn(9, pt.head.in_dim, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        got, want = pt.head(x), reference(x)
    if name == "dino":  # weight norm: g·v/|v| computed by torch's kernel vs the formula
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        assert pt.teacher_head is not None and pt.head.spec.prototypes == 32
        assert pt.layout.meta["arch"] == "vit_small"  # DINO's argparse.Namespace, read through the allowlist
    else:
        assert torch.equal(got, want)
        assert pt.head_check["exact"]
    feats = pt.backbone(torch.randn(2, 3, pt.img_size, pt.img_size))
    assert feats.shape == (2, pt.head.in_dim)


def test_layout_names_and_what_is_left_out(tmp_path):
    names = {n: load_pretrained(WRITERS[n][0](tmp_path)[0]).layout for n in ("barlowtwins", "solo-learn", "vicreg")}
    assert names["barlowtwins"].name == "barlowtwins" and any("loss BatchNorm" in n for n in names["barlowtwins"].notes)
    assert names["solo-learn"].name == "solo-learn" and any("classifier" in n for n in names["solo-learn"].notes)
    assert names["vicreg"].backbone_prefix == "backbone."  # DDP's module. removed
    assert load_pretrained(WRITERS["solo-learn"][0](tmp_path)[0]).backbone.geohead_config["cifar_stem"]


def test_a_pickle_that_needs_code_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.mkdir, (str(marker),))

    torch.save({"state_dict": {"w": torch.ones(1)}, "evil": Evil()}, tmp_path / "evil.ckpt")
    with pytest.raises(UnsafeCheckpointError, match=r"needs arbitrary code to load: its pickle references posix.mkdir"):
        load_pretrained(tmp_path / "evil.ckpt")
    assert not marker.exists()


def test_a_torch_or_lightning_file_is_named_as_such(tmp_path):
    from geohead.training.checkpoint import CheckpointError, load_checkpoint

    lightning, _ = WRITERS["lightly (Lightning .ckpt)"][0](tmp_path)
    torch.save({"w": torch.ones(2)}, tmp_path / "sd.pt")
    with pytest.raises(CheckpointError, match=r"is a Lightning checkpoint .*the file itself is fine.*geohead diagnose") as err:
        load_checkpoint(lightning)
    assert "corrupted" not in str(err.value)
    with pytest.raises(CheckpointError, match=r"is a torch file \(torch.save zip format"):
        load_checkpoint(tmp_path / "sd.pt")
    with pytest.raises(PretrainedError, match="no backbone found"):
        load_pretrained(tmp_path / "sd.pt")


SMALL = dict(n_test=48, n_train=48, n_orbit_images=6, hessian_samples=6, collapse_batch=4, refine=0, mode="fast",
             density_probes=1, density_steps=4, linear=False, families=("rotate", "hue", "crop"))


def test_diagnose_model_takes_any_modules_grayscale_and_own_normalisation():
    """A small custom CNN on grayscale 16 px inputs with its own normalisation."""
    from geohead import diagnose_model
    from geohead.diagnose import DiagnoseSettings, format_table

    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten())
    head = GeometricHead(32, 8, hidden_dim=16, depth=2)
    report = diagnose_model(backbone, head, "barlow", data="shapes", img_size=16, mean=[0.3], std=[0.2],
                            settings=DiagnoseSettings(**SMALL))
    assert report["data"]["in_chans"] == 1 and report["data"]["mean"] == pytest.approx([0.3])
    assert report["collapse"]["backbone"]["dim"] == 32 and report["collapse"]["head"]["dim"] == 8
    assert set(report["orbits"]) == {"rotate", "hue", "crop"}
    assert report["orbit_summary"]["head"] in ("compresses", "expands")
    assert {"class", "hue"} <= set(report["probes"]["targets"])  # the shapes data's nuisance factors probed too
    # the numbers are the library's on the adapted inputs: luma of [0, 1] RGB, (x - 0.3) / 0.2
    from geohead.data import load_dataset
    from geohead.data.functional import rgb_to_gray
    from geohead.geometry import collapse_monitors, rankme

    test = load_dataset("shapes", train=False, n=48, img_size=16, seed=0)
    with torch.no_grad():
        feats = backbone((rgb_to_gray(test.images.float() / 255) - 0.3) / 0.2)
        want = collapse_monitors(head(feats)).to_dict()
    assert report["collapse"]["head"]["rankme"] == pytest.approx(want["rankme"], rel=1e-5)
    assert report["collapse"]["backbone"]["rankme"] == pytest.approx(float(rankme(feats)), rel=1e-5)
    json.dumps(report)  # strict JSON
    assert "the head " in format_table(report)


def test_cli_diagnose_and_report_a_dino_checkpoint(tmp_path):
    from click.testing import CliRunner

    from geohead.cli import main

    path, _ = WRITERS["dino"][0](tmp_path)
    out = tmp_path / "d.json"
    args = ["diagnose", str(path), "--data", "shapes", "--json", str(out), "--n-test", "48", "--n-train", "48",
            "--orbit-images", "6", "--hessian-samples", "6", "--collapse-batch", "4", "--mode", "fast", "--no-linear",
            "--families", "rotate,crop"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    assert report["pretrained"]["layout"] == "dino" and report["source"]["objective"] == "dino"
    assert report["pretrained"]["head_check"]["allclose"] and report["data"]["img_size"] == 16
    assert any("dino_loss.center" in n for n in report["pretrained"]["notes"])
    assert "head check vs documented forward" in res.output
    res = CliRunner().invoke(main, ["report", str(out), "--out", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "rep" / "report.html").is_file() and (tmp_path / "rep" / "orbit_compression.png").is_file()
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "geohead report: dino_checkpoint.pth (dino, dino)" in html and "head check vs documented forward" in html


def test_cli_diagnose_errors_exit_2_without_traceback(tmp_path):
    from click.testing import CliRunner

    from geohead.cli import main

    path, _ = WRITERS["lightly (state_dict)"][0](tmp_path)
    res = CliRunner().invoke(main, ["diagnose", str(path), "--data", "shapes"])
    assert res.exit_code == 2 and "pass --method" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(main, ["diagnose", str(path), "--method", "nope"])
    assert res.exit_code == 2 and "unknown method 'nope'" in res.output
    assert not list(tmp_path.glob("*.diagnose.json"))
    from geohead.training.checkpoint import save_checkpoint

    own = save_checkpoint(tmp_path / "last.ckpt", {"x": torch.zeros(1)}, {"step": 1})  # geohead's own format
    for cmd in (["diagnose", str(own), "--method", "vicreg"], ["export", str(own), "--out", str(tmp_path / "o"), "--method", "vicreg"]):
        res = CliRunner().invoke(main, cmd)
        assert res.exit_code == 2 and "--method describes a checkpoint trained elsewhere" in res.output, res.output
    assert not (tmp_path / "o").exists()


def test_cli_export_records_what_was_used_and_the_head(tmp_path):
    """A lightly model saved by Lightning: --with-head writes the GeometricHead (same outputs as
    lightly's), config.json records the given mean/std/size/interpolation, the method and the head."""
    from click.testing import CliRunner

    from geohead.cli import main
    from geohead.export import load_backbone, load_head

    path, lightly_head = WRITERS["lightly (Lightning .ckpt)"][0](tmp_path)
    out = tmp_path / "e"
    res = CliRunner().invoke(main, ["export", str(path), "--out", str(out), "--with-head", "--method", "barlow",
                                    "--mean", "0.49,0.48,0.45", "--std", "0.25,0.24,0.26", "--img-size", "32",
                                    "--interpolation", "bicubic"])
    assert res.exit_code == 0, res.output
    assert "warning" not in res.output
    cfg = json.loads((out / "config.json").read_text())
    pc = cfg["pretrained_cfg"]
    assert pc["mean"] == [0.49, 0.48, 0.45] and pc["std"] == [0.25, 0.24, 0.26]
    assert pc["input_size"] == [3, 32, 32] and pc["interpolation"] == "bicubic"
    prov = cfg["geohead"]["provenance"]
    assert prov["objective"] == "barlow" and prov["head_spec"]["depth"] == 3
    assert prov["trained_elsewhere"]["head_check"]["exact"]
    z = torch.randn(4, 128, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert torch.equal(load_head(out)(z), lightly_head(z))
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(load_backbone(out)(x), load_pretrained(path, method="barlow").backbone(x))


def test_cli_export_warns_about_defaults_and_takes_geohead_names(tmp_path):
    from click.testing import CliRunner

    from geohead.backbones import create_backbone
    from geohead.cli import main

    path, _ = WRITERS["vicreg"][0](tmp_path)
    res = CliRunner().invoke(main, ["export", str(path), "--out", str(tmp_path / "v")])
    assert res.exit_code == 0, res.output
    assert "warning: the export records the architecture's timm default mean/std" in res.stderr and "--img-size" in res.stderr
    torch.manual_seed(0)
    bb = create_backbone("resnet18_w16", img_size=32)
    torch.save({f"encoder.{k}": v for k, v in bb.state_dict().items()}, tmp_path / "w.pt")
    for extra in ([], ["--prefix", "encoder."]):
        out = tmp_path / f"g{len(extra)}"
        res = CliRunner().invoke(main, ["export", str(tmp_path / "w.pt"), "--out", str(out), "--architecture", "resnet18_w16",
                                        "--mean", "0.5,0.5,0.5", "--std", "0.2,0.2,0.2", "--img-size", "32", *extra])
        assert res.exit_code == 0, res.output
        assert json.loads((out / "config.json").read_text())["geohead"]["backbone"]["name"] == "resnet18_w16"
    res = CliRunner().invoke(main, ["export", str(tmp_path / "w.pt"), "--out", str(tmp_path / "bad"), "--mean", "1,2"])
    assert res.exit_code == 2 and "--mean '1,2' has 2 values" in res.output and not (tmp_path / "bad").exists()


@pytest.mark.parametrize("name", list(WRITERS))
def test_every_layout_exports_backbone_and_head_exactly(tmp_path, name):
    """geohead export of each layout: the exported backbone gives the rebuilt backbone's features
    bit for bit, the exported head the original head's outputs (DINO: to weight-norm rounding)."""
    from click.testing import CliRunner

    from geohead.cli import main
    from geohead.export import load_backbone, load_head

    path, reference = WRITERS[name][0](tmp_path)
    out = tmp_path / "e"
    res = CliRunner().invoke(main, ["export", str(path), "--out", str(out), "--with-head", "--method", WRITERS[name][1],
                                    "--mean", "0.5,0.5,0.5", "--std", "0.25,0.25,0.25"])
    assert res.exit_code == 0, res.output
    pt = load_pretrained(path, method=WRITERS[name][1])
    x = torch.randn(2, 3, pt.img_size, pt.img_size, generator=torch.Generator().manual_seed(4))
    z = torch.randn(5, pt.head.in_dim, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert torch.equal(load_backbone(out)(x), pt.backbone(x))
        got, want = load_head(out)(z), reference(z)
    assert torch.equal(got, want) if name != "dino" else torch.allclose(got, want, rtol=1e-5, atol=1e-6)
    prov = json.loads((out / "config.json").read_text())["geohead"]["provenance"]
    assert prov["objective"] == WRITERS[name][1] and prov["trained_elsewhere"]["layout"] == pt.layout.name


def test_a_timm_backbone_file_exports_and_diagnoses(tmp_path):
    """A backbone alone (timm's key names, no head): export infers it; diagnose needs --method and
    then measures the backbone through the identity head."""
    from click.testing import CliRunner

    from geohead.backbones import create_backbone
    from geohead.cli import main
    from geohead.io import save_safetensors

    torch.manual_seed(0)
    bb = create_backbone("resnet18_cifar", img_size=32, channels=[8, 16, 32, 64], channels_last=False).eval()
    save_safetensors(tmp_path / "resnet.safetensors", bb.state_dict(), {"format": "pt"})
    res = CliRunner().invoke(main, ["export", str(tmp_path / "resnet.safetensors"), "--out", str(tmp_path / "e"),
                                    "--mean", "0.5,0.5,0.5", "--std", "0.25,0.25,0.25", "--img-size", "32"])
    assert res.exit_code == 0, res.output
    from geohead.export import load_backbone

    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(load_backbone(tmp_path / "e")(x), bb(x))
    res = CliRunner().invoke(main, ["diagnose", str(tmp_path / "resnet.safetensors")])
    assert res.exit_code == 2 and "holds a backbone only" in res.output and "pass --method" in res.output
    # with a method: the backbone alone, through the identity head (head numbers = backbone numbers)
    res = CliRunner().invoke(main, ["diagnose", str(tmp_path / "resnet.safetensors"), "--method", "barlow", "--data", "shapes",
                                    "--json", str(tmp_path / "d.json"), "--n-test", "48", "--n-train", "48",
                                    "--orbit-images", "6", "--hessian-samples", "6", "--collapse-batch", "4", "--mode", "fast",
                                    "--no-linear", "--families", "rotate", "--mean", "0.5,0.5,0.5", "--std", "0.25,0.25,0.25"])
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "d.json").read_text())
    assert report["orbit_summary"]["head"] is None and "identity head" in res.output
    assert report["collapse"]["head"]["rankme"] == pytest.approx(report["collapse"]["backbone"]["rankme"], rel=1e-5)
    assert report["orbits"]["rotate"]["compression"] == pytest.approx(1.0, abs=1e-6)


def test_export_backbone_takes_geohead_names_for_a_timm_model(tmp_path):
    """export_backbone(model, architecture="vit_tiny_cifar"): geohead's name stands for its timm
    architecture and arguments (no 'not a timm architecture')."""
    import timm

    from geohead.export import export_backbone, load_backbone

    torch.manual_seed(0)
    vit = timm.create_model("vit_tiny_patch16_224", patch_size=4, img_size=32, depth=1, dynamic_img_size=True,
                            num_classes=0).eval()
    res = export_backbone(vit, tmp_path / "v", architecture="vit_tiny_cifar", model_args={"depth": 1}, mean=[0.5] * 3,
                          std=[0.25] * 3)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(load_backbone(res.out_dir)(x), vit(x))


def test_export_of_an_in_memory_lightly_model_writes_its_head_as_a_geometric_head(tmp_path):
    """export_backbone(lightly_model, with_head=True): lightly's projection_head becomes a
    GeometricHead with the same outputs; the timm backbone is checked bit for bit as before."""
    import timm
    from lightly.models.modules import BarlowTwinsProjectionHead

    from geohead.export import export_backbone, load_head

    torch.manual_seed(0)
    model = nn.Module()
    model.backbone = timm.create_model("resnet18", channels=[8, 16, 32, 64], num_classes=0).eval()
    model.projection_head = _bn_stats_(BarlowTwinsProjectionHead(64, 32, 16))
    res = export_backbone(model, tmp_path / "e", with_head=True, img_size=32, mean=[0.5] * 3, std=[0.25] * 3)
    z = torch.randn(4, 64)
    with torch.no_grad():
        assert torch.equal(load_head(res.out_dir)(z), model.projection_head(z))


def test_report_names_a_checkpoint_and_says_what_to_run(tmp_path):
    from click.testing import CliRunner

    from geohead.cli import main

    path, _ = WRITERS["vicreg"][0](tmp_path)
    res = CliRunner().invoke(main, ["report", str(path)])
    assert res.exit_code == 2 and "is a torch file" in res.output and "vicreg_model.diagnose.json" in res.output
    assert "corrupted" not in res.output


def test_lightly_byol_and_dino_models_with_predictor_and_prototypes(tmp_path):
    """lightly's BYOL (projection + prediction head) and DINO (head with weight-normed prototypes)
    saved as state dicts: both heads rebuilt with the original outputs; BYOL diagnosed with its predictor."""
    import timm
    from lightly.models.modules import BYOLPredictionHead, BYOLProjectionHead, DINOProjectionHead

    from geohead.diagnose import DiagnoseSettings
    from geohead.pretrained.diagnose import diagnose_pretrained

    torch.manual_seed(0)
    bb = timm.create_model("resnet18", channels=[8, 16, 32, 64], num_classes=0)
    proj, pred = _bn_stats_(BYOLProjectionHead(64, 32, 16)), _bn_stats_(BYOLPredictionHead(16, 32, 16))
    state = {**{f"backbone.{k}": v for k, v in bb.state_dict().items()},
             **{f"projection_head.{k}": v for k, v in proj.state_dict().items()},
             **{f"prediction_head.{k}": v for k, v in pred.state_dict().items()}}
    torch.save(state, tmp_path / "byol.pt")
    pt = load_pretrained(tmp_path / "byol.pt", method="byol")
    z, e = torch.randn(4, 64), torch.randn(4, 16)
    with torch.no_grad():
        assert torch.equal(pt.head(z), proj(z)) and torch.equal(pt.predictor(e), pred(e))
    with pytest.warns(UserWarning, match="assumed: input size 32 pixels"):  # the file records neither size nor mean/std
        report = diagnose_pretrained(tmp_path / "byol.pt", method="byol", data="shapes", settings=DiagnoseSettings(**SMALL))
    assert report["source"]["predictor_spec"]["depth"] == 2 and report["source"]["objective"] == "byol"

    with warnings.catch_warnings():  # lightly's DINO head calls the deprecated nn.utils.weight_norm
        warnings.simplefilter("ignore", FutureWarning)
        dino = _bn_stats_(DINOProjectionHead(64, 32, 16, 24))
    torch.save({**{f"backbone.{k}": v for k, v in bb.state_dict().items()},
                **{f"projection_head.{k}": v for k, v in dino.state_dict().items()}}, tmp_path / "dino.pt")
    pt = load_pretrained(tmp_path / "dino.pt")
    assert pt.method == "dino" and pt.head.spec.prototypes == 24 and pt.head.spec.activation == "gelu"
    with torch.no_grad():
        torch.testing.assert_close(pt.head(z), dino(z), rtol=1e-5, atol=1e-6)


def test_lightly_docs_backbone_nn_sequential_of_torchvision_resnet(tmp_path):
    """lightly's docs build the backbone as nn.Sequential(*list(torchvision resnet18().children())[:-1]):
    its numbered keys are read as the ResNet's, and the rebuilt backbone gives the same features."""
    import torchvision
    from lightly.models.modules import SimCLRProjectionHead

    torch.manual_seed(0)
    resnet = torchvision.models.resnet18()
    resnet.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)  # the CIFAR stem, as lightly's CIFAR examples
    resnet.maxpool = nn.Identity()
    backbone = _bn_stats_(nn.Sequential(*list(resnet.children())[:-1]))
    head = _bn_stats_(SimCLRProjectionHead(512, 64, 32))
    torch.save({**{f"backbone.{k}": v for k, v in backbone.state_dict().items()},
                **{f"projection_head.{k}": v for k, v in head.state_dict().items()}}, tmp_path / "simclr.pt")
    pt = load_pretrained(tmp_path / "simclr.pt", method="simclr")
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(pt.backbone(x), backbone(x).flatten(1), rtol=1e-5, atol=1e-5)
        assert torch.equal(pt.head(pt.backbone(x)), head(pt.backbone(x)))
    assert pt.backbone.geohead_config["cifar_stem"] and any("children" in n for n in pt.layout.notes)


def test_dino_teacher_exports_with_teacher_flag(tmp_path):
    """DINO's released weights are the teacher's: --teacher exports its backbone and head."""
    from click.testing import CliRunner

    from geohead.cli import main
    from geohead.export import load_backbone, load_head

    path, _ = WRITERS["dino"][0](tmp_path)
    res = CliRunner().invoke(main, ["export", str(path), "--out", str(tmp_path / "t"), "--teacher", "--with-head",
                                    "--mean", "0.5,0.5,0.5", "--std", "0.25,0.25,0.25"])
    assert res.exit_code == 0 and "exported the teacher backbone" in res.output, res.output
    teacher, student = load_pretrained(path, teacher=True), load_pretrained(path)
    x, z = torch.randn(2, 3, 16, 16), torch.randn(3, 64)
    with torch.no_grad():
        assert torch.equal(load_backbone(tmp_path / "t")(x), teacher.backbone(x))
        assert not torch.equal(teacher.backbone(x), student.backbone(x))
        assert torch.equal(load_head(tmp_path / "t")(z), teacher.head(z)) and torch.equal(student.teacher_head(z), teacher.head(z))
    res = CliRunner().invoke(main, ["export", str(WRITERS["vicreg"][0](tmp_path)[0]), "--out", str(tmp_path / "v"), "--teacher"])
    assert res.exit_code == 2 and "only DINO's checkpoints do" in res.output


def test_diagnose_an_export_folder_with_its_head(tmp_path):
    """A timm backbone exported with its head (geohead export --with-head) is diagnosed from the
    folder alone: objective, mean/std and size from its config.json, the same head."""
    from click.testing import CliRunner

    from geohead.cli import main

    path, _ = WRITERS["lightly (state_dict)"][0](tmp_path)
    CliRunner().invoke(main, ["export", str(path), "--out", str(tmp_path / "e"), "--with-head", "--method", "barlow",
                              "--mean", "0.5,0.5,0.5", "--std", "0.25,0.25,0.25", "--img-size", "32"])
    out = tmp_path / "d.json"
    args = ["--data", "shapes", "--json", str(out), "--n-test", "48", "--n-train", "48", "--orbit-images", "6",
            "--hessian-samples", "6", "--collapse-batch", "4", "--mode", "fast", "--no-linear", "--families", "rotate"]
    res = CliRunner().invoke(main, ["diagnose", str(tmp_path / "e"), *args])
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    assert report["source"]["objective"] == "barlow" and report["data"]["mean"] == [0.5, 0.5, 0.5]
    assert report["pretrained"]["layout"] == "geohead export" and report["data"]["img_size"] == 32
    CliRunner().invoke(main, ["export", str(path), "--out", str(tmp_path / "nohead"), "--method", "barlow",
                              "--mean", "0.5,0.5,0.5", "--std", "0.25,0.25,0.25", "--img-size", "32"])
    res = CliRunner().invoke(main, ["diagnose", str(tmp_path / "nohead"), *args])
    assert res.exit_code == 2 and "export again with --with-head" in res.output
    res = CliRunner().invoke(main, ["diagnose", str(tmp_path / "nohead"), *args, "--method", "barlow"])
    assert res.exit_code == 0 and json.loads(out.read_text())["orbit_summary"]["head"] is None, res.output


def test_every_torch_load_in_geohead_is_weights_only():
    """The one place geohead unpickles, pretrained/read.py, passes weights_only=True; no other
    torch.load call exists in the package."""
    import ast
    from pathlib import Path as _Path

    import geohead

    calls = []
    for path in _Path(geohead.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"):
                safe = any(k.arg == "weights_only" and isinstance(k.value, ast.Constant) and k.value.value is True
                           for k in node.keywords)
                calls.append((path.name, safe))
    assert calls == [("read.py", True)]


def test_lightly_dino_example_student_and_teacher_names(tmp_path):
    """lightly's DINO example names its modules student_backbone / student_head / teacher_backbone /
    teacher_head: the student is diagnosed, the teacher head is its target, --teacher exports the teacher."""
    import timm
    from lightly.models.modules import DINOProjectionHead

    torch.manual_seed(0)
    vit = timm.create_model("vit_small_patch16_224", img_size=16, patch_size=4, embed_dim=64, depth=1, num_heads=1,
                            num_classes=0)
    with warnings.catch_warnings():  # lightly's DINO head calls the deprecated nn.utils.weight_norm
        warnings.simplefilter("ignore", FutureWarning)
        student, teacher = DINOProjectionHead(64, 32, 16, 24).eval(), DINOProjectionHead(64, 32, 16, 24).eval()
    ema = {k: v + 0.001 for k, v in vit.state_dict().items()}
    state = {**{f"student_backbone.{k}": v for k, v in vit.state_dict().items()},
             **{f"student_head.{k}": v for k, v in student.state_dict().items()},
             **{f"teacher_backbone.{k}": v for k, v in ema.items()},
             **{f"teacher_head.{k}": v for k, v in teacher.state_dict().items()}}
    torch.save({"state_dict": state, "pytorch-lightning_version": "2.2.0"}, tmp_path / "dino.ckpt")
    pt = load_pretrained(tmp_path / "dino.ckpt")
    z, x = torch.randn(3, 64), torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        assert pt.method == "dino" and pt.layout.backbone_prefix == "student_backbone."
        assert torch.equal(pt.head(z), student(z)) and torch.equal(pt.teacher_head(z), teacher(z))
        assert torch.equal(pt.backbone(x), vit.eval()(x))
        t = load_pretrained(tmp_path / "dino.ckpt", teacher=True)
        assert torch.equal(t.head(z), teacher(z)) and not torch.equal(t.backbone(x), pt.backbone(x))
    assert not any("left out" in n for n in pt.layout.notes)


@pytest.mark.parametrize("size", [30_000, 0])
def test_a_recorded_img_size_outside_the_bound_is_refused_before_probing(tmp_path, size):
    """A Lightning module's hyper-parameters name the input size the backbone's width is probed
    at (a 2 x 3 x S x S batch): 30,000 would be over 20 GB before any other bound applied."""
    from click.testing import CliRunner

    from geohead.backbones import create_backbone
    from geohead.cli import main
    from geohead.pretrained.load import load_pretrained
    from geohead.pretrained.read import PretrainedError

    bb = create_backbone("resnet18_w16", img_size=32)
    state = {f"backbone.{k}": v for k, v in bb.state_dict().items()}
    torch.save({"state_dict": state, "pytorch-lightning_version": "2.4.0", "hyper_parameters": {"img_size": size}},
               tmp_path / "pl.ckpt")
    with pytest.raises(PretrainedError, match=f"records img_size={size}, outside 1 to 1,024; pass --img-size"):
        load_pretrained(tmp_path / "pl.ckpt", architecture="resnet18_w16")
    res = CliRunner().invoke(main, ["export", str(tmp_path / "pl.ckpt"), "--out", str(tmp_path / "e"),
                                    "--architecture", "resnet18_w16"])
    assert res.exit_code == 2 and "--img-size" in res.output and not (tmp_path / "e").exists(), res.output
    assert load_pretrained(tmp_path / "pl.ckpt", architecture="resnet18_w16", img_size=32).img_size == 32


def test_diagnose_says_what_it_assumed_where_the_checkpoint_records_nothing(tmp_path):
    """A backbone file recording neither input size nor normalisation: diagnose warns (one stderr
    line), notes it in the table, records the size it used (32) and the data's mean/std; given
    --img-size/--mean/--std, no warning, and the table says the model's normalisation was used."""
    from click.testing import CliRunner

    from geohead.backbones import create_backbone
    from geohead.cli import main
    from geohead.io import save_safetensors

    torch.manual_seed(0)
    bb = create_backbone("resnet18_cifar", img_size=32, channels=[8, 16, 32, 64], channels_last=False).eval()
    save_safetensors(tmp_path / "resnet.safetensors", bb.state_dict(), {"format": "pt"})
    small = ["--method", "barlow", "--data", "shapes", "--n-test", "48", "--n-train", "48", "--orbit-images", "6",
             "--hessian-samples", "6", "--collapse-batch", "4", "--mode", "fast", "--no-linear", "--families", "rotate"]
    res = CliRunner().invoke(main, ["diagnose", str(tmp_path / "resnet.safetensors"), *small, "--json", str(tmp_path / "a.json")])
    assert res.exit_code == 0, res.output
    warned = [ln for ln in res.output.splitlines() if ln.startswith("warning:")]
    assert warned == ["warning: assumed: input size 32 pixels (give --img-size, img_size=) and the data's own mean/std "
                      "(give --mean and --std, mean= and std=): the checkpoint does not record what it was trained with"]
    report = json.loads((tmp_path / "a.json").read_text())
    assert report["data"]["img_size"] == 32 and report["pretrained"]["backbone"]["img_size"] == 32
    assert report["data"]["normalisation"] == "data" and "normalised with the data's own mean/std" in res.output
    assert "  note: assumed: input size 32 pixels" in res.output and "| head linear 64->64\n" in res.output
    res = CliRunner().invoke(main, ["diagnose", str(tmp_path / "resnet.safetensors"), *small, "--json", str(tmp_path / "b.json"),
                                    "--img-size", "16", "--mean", "0.5,0.5,0.5", "--std", "0.25,0.25,0.25"])
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "b.json").read_text())
    assert "warning:" not in res.output and "assumed" not in res.output
    assert report["data"]["img_size"] == 16 and report["pretrained"]["backbone"]["img_size"] == 16
    assert report["data"]["normalisation"] == "given" and report["data"]["mean"] == [0.5, 0.5, 0.5]
    assert "normalised with the model's mean/std (given or recorded)" in res.output


@pytest.mark.parametrize("command", ["diagnose", "export"])
def test_a_missing_checkpoint_is_named_missing_with_what_the_command_takes(tmp_path, command):
    """A missing path, or a link to one, is named missing, with what the command reads; never "a
    geohead run", which would refuse --method."""
    from click.testing import CliRunner

    from geohead.cli import main

    for extra in ([], ["--method", "barlow", "--mean", "0.5,0.5,0.5"]):
        args = [command, str(tmp_path / "barlow.ckpt"), *extra] + (["--out", str(tmp_path / "e")] if command == "export" else [])
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 2 and "Traceback" not in res.output, res.output
        assert f"'{tmp_path / 'barlow.ckpt'}' does not exist; give a geohead run folder" in res.output
        assert "checkpoint trained elsewhere (Lightning .ckpt, a torch .pt/.pth state_dict, .safetensors)" in res.output
        assert "is a geohead run" not in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    (tmp_path / "moved.ckpt").symlink_to(tmp_path / "gone.ckpt")  # a link whose target went away
    res = CliRunner().invoke(main, [command, str(tmp_path / "moved.ckpt"), "--method", "barlow"]
                             + (["--out", str(tmp_path / "e")] if command == "export" else []))
    assert res.exit_code == 2 and "moved.ckpt' does not exist" in res.output, res.output
    assert not (tmp_path / "e").exists() and not list(tmp_path.glob("*.json"))
