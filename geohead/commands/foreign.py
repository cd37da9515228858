"""Options shared by the commands that read models trained elsewhere (``diagnose``, ``export``):
what the checkpoint does not record (architecture, method, activation, normalisation), parsed
once. Not a subcommand."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Callable

import click

from geohead.commands import fail


def _option_decorators() -> list[Callable[[Any], Any]]:
    return [
        click.option("--architecture", default=None, metavar="NAME",
                     help="Checkpoint trained elsewhere: its backbone, a geohead name (resnet18_w16, vit_tiny_cifar, ...) "
                          "or a timm name (default: inferred from a ResNet's or ViT's tensors)."),
        click.option("--model-arg", "model_arg", multiple=True, metavar="KEY=VALUE",
                     help="With --architecture: a keyword argument it was created with (VALUE read as JSON); repeatable."),
        click.option("--method", default=None, help="Checkpoint trained elsewhere: the SSL method (barlow, vicreg, dino, simclr, "
                                                    "byol, simsiam); default: what the layout says."),
        click.option("--activation", default=None, help="The head's hidden activation (weights do not record it; default: "
                                                        "the method's recipe: GELU for DINO, ReLU otherwise)."),
        click.option("--img-size", type=click.IntRange(1, 1024), default=None, help="Input side the model was trained at (default: a ViT's own, else the one its checkpoint "
                                                                 "records; else diagnose takes 32, export 32 for a CIFAR-stem ResNet and "
                                                                 "224 otherwise, with a warning)."),
        click.option("--mean", default=None, metavar="M1,M2,M3", help="Input normalisation mean it was trained with."),
        click.option("--std", default=None, metavar="S1,S2,S3", help="Input normalisation std it was trained with."),
    ]


def foreign_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Add the options of :func:`_option_decorators` to a click command."""
    for deco in reversed(_option_decorators()):
        f = deco(f)
    return f


def foreign_flags(values: dict[str, Any]) -> list[str]:
    """The command-line names of the options that were given."""
    return ["--" + k.replace("_", "-") for k, v in values.items() if v]


def parse_model_args(items: tuple[str, ...]) -> dict[str, Any]:
    """``KEY=VALUE`` strings as a dict (VALUE read as JSON, else kept as a string), checked by
    :func:`geohead.backbones.check_model_args` (no loader keys, plain values); exit 2 otherwise."""
    out: dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            fail(f"--model-arg {item!r} is not KEY=VALUE (e.g. --model-arg patch_size=4)")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    from geohead.backbones import check_model_args

    try:  # no loader key (checkpoint_path, pretrained, ...) and only plain values reach timm from a flag
        check_model_args(out)
    except ValueError as exc:
        fail(f"--model-arg: {exc}; give only the architecture's own arguments (e.g. --model-arg patch_size=4)")
    return out


def parse_floats(name: str, text: str | None) -> list[float] | None:
    """``"0.49,0.48,0.45"`` -> floats (1 or 3 of them); exit 2 with the bad value otherwise."""
    if text is None:
        return None
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        fail(f"--{name} {text!r} is not comma-separated numbers (e.g. --{name} 0.4914,0.4822,0.4465)")
    if not all(math.isfinite(v) for v in vals):
        fail(f"--{name} {text!r} has a value that is not a finite number; give finite numbers (e.g. --{name} 0.25,0.25,0.25)")
    if len(vals) not in (1, 3):
        fail(f"--{name} {text!r} has {len(vals)} values; give 3 (RGB) or 1 (grayscale)")
    if name == "std" and any(v <= 0 for v in vals):
        fail(f"--std {text!r} has a value <= 0; standard deviations are positive")
    return vals


def is_export_folder(source: str | os.PathLike) -> bool:
    """A folder written by ``geohead export`` (``config.json`` beside ``model.safetensors``)."""
    p = Path(source)
    return p.is_dir() and (p / "config.json").is_file() and (p / "model.safetensors").is_file()


def is_geohead_source(source: str | os.PathLike) -> bool:
    """A geohead run folder, or a safetensors file with geohead's checkpoint format."""
    p = Path(source)
    if is_export_folder(p):
        return False
    if p.is_dir() or not p.exists():
        return True  # a run folder, or a missing path: geohead's own reader says what is wrong
    from geohead.filekind import file_kind

    if file_kind(p) != "safetensors":
        return False
    from safetensors import safe_open

    from geohead.training.checkpoint import is_checkpoint_header

    try:  # a damaged format tag still reads as geohead's, so its checksum is checked (and fails)
        with safe_open(str(p), framework="pt") as f:
            return is_checkpoint_header(f.metadata() or {})
    except Exception:  # noqa: BLE001 - unreadable: let geohead's reader name the problem
        return True


def run_foreign(source: str, data: str | None, data_test: str | None, data_root: str | None, settings: Any,
                progress: Callable[[str], None], *, architecture: str | None, model_arg: tuple[str, ...],
                method: str | None, activation: str | None, img_size: int | None, mean: str | None,
                std: str | None) -> dict[str, Any]:
    """``geohead diagnose`` of a checkpoint trained elsewhere (:func:`geohead.pretrained.diagnose.diagnose_pretrained`)."""
    from geohead.pretrained.diagnose import diagnose_pretrained

    if is_export_folder(source):
        return _diagnose_export(source, data, data_test, data_root, settings, progress, method=method, img_size=img_size,
                                mean=parse_floats("mean", mean), std=parse_floats("std", std))
    if data is None:
        click.echo("diagnose: no --data given: measuring on geohead's built-in shapes images; pass --data (cifar10, an "
                   ".npz, an image folder) for the images the model was trained on", err=True)
    return diagnose_pretrained(
        source, architecture=architecture, method=method, activation=activation, model_args=parse_model_args(model_arg) or None,
        img_size=img_size, data=data or "shapes", data_test=data_test, data_root=data_root, mean=parse_floats("mean", mean),
        std=parse_floats("std", std), settings=settings, progress=progress,
    )


def _diagnose_export(source: str, data: str | None, data_test: str | None, data_root: str | None, settings: Any,
                     progress: Callable[[str], None], *, method: str | None, img_size: int | None,
                     mean: list[float] | None, std: list[float] | None) -> dict[str, Any]:
    """``geohead diagnose`` of an export folder written with ``--with-head``: its timm backbone and
    GeometricHead, the objective and preprocessing its config.json records (flags override them)."""
    from geohead.export import load_backbone, load_head, read_config
    from geohead.pretrained.diagnose import diagnose_model, identity_head
    from geohead.pretrained.read import PretrainedError

    config = read_config(source)
    g, pc = config["geohead"], config.get("pretrained_cfg", {})
    has_head = bool((g.get("files") or {}).get("head"))
    if not has_head and method is None:
        raise PretrainedError(f"{source!r} is an export without its head; the head geometry needs one: export again "
                              "with --with-head, or pass --method to measure the backbone alone through the identity head")
    objective = method or (g.get("provenance") or {}).get("objective")
    if objective is None:
        raise PretrainedError(f"{source!r} records no objective; pass --method (barlow, vicreg, simclr, byol, simsiam, dino)")
    shape = pc.get("input_size") or [3, 32, 32]
    side = shape[-1] if isinstance(shape, list) and shape else None
    if img_size is None and (isinstance(side, bool) or not isinstance(side, int)):
        raise PretrainedError(f"{source!r} records input_size {str(pc.get('input_size'))[:40]}, not [3, H, W]: pass --img-size")
    backbone = load_backbone(source)
    size = img_size or side
    head = load_head(source) if has_head else identity_head(int(backbone.num_features))
    return diagnose_model(backbone, head, objective, data=data or "shapes", data_test=data_test,
                          data_root=data_root, mean=mean or pc.get("mean"), std=std or pc.get("std"), img_size=size,
                          settings=settings, progress=progress,
                          source={"source": str(source), "layout": "geohead export", "method": objective,
                                  "backbone": {"name": g["backbone"].get("name"), "prefix": ""}, "head_prefix": None,
                                  "head_check": None,
                                  "notes": [] if has_head else ["no head in the export: measured with the identity head"]})


__all__ = ["foreign_flags", "foreign_options", "is_export_folder", "is_geohead_source", "parse_floats", "parse_model_args", "run_foreign"]
