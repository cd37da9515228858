"""``geohead export RUN_OR_CKPT --out DIR``: the backbone alone, as safetensors + timm config."""
from __future__ import annotations

from typing import Any

import click

from geohead.commands import fail, missing_source, warnings_to_stderr
from geohead.commands.foreign import foreign_flags, foreign_options, is_geohead_source, parse_floats, parse_model_args


@click.command()
@click.argument("source", type=click.Path())
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Export folder (model.safetensors + config.json).")
@click.option("--dtype", type=click.Choice(["fp32", "bf16", "fp16"]), default="fp32", show_default=True, help="Storage dtype of the weights.")
@click.option("--teacher", is_flag=True, help="Export the EMA teacher's backbone (BYOL, DINO) instead of the student's.")
@click.option("--with-head", is_flag=True, help="Also write the head, as a second file head.safetensors (+ head.json).")
@click.option("--overwrite", is_flag=True, help="Replace an export folder that already holds files.")
@foreign_options
@click.option("--interpolation", type=click.Choice(["bilinear", "bicubic", "nearest"]), default="bilinear", show_default=True,
              help="The resize recorded in config.json's pretrained_cfg.")
@click.option("--prefix", default=None, help="With --architecture: the key prefix of the backbone in the file "
                                             "(default: found by itself, e.g. 'backbone.').")
def export(source: str, out_dir: str, dtype: str, teacher: bool, with_head: bool, overwrite: bool, interpolation: str,
           prefix: str | None, **foreign: Any) -> None:
    """Export the backbone of SOURCE without head, predictor, teacher or optimiser state.

    SOURCE is a geohead run folder or checkpoint, or a checkpoint trained anywhere (Lightning
    .ckpt, torch state_dict, lightly, solo-learn, official DINO / VICReg / Barlow Twins, a timm
    weights file): its backbone is inferred (ResNets, ViTs) or given with --architecture (a timm or
    geohead name) and --model-arg; --with-head writes its head as a GeometricHead. Give --mean,
    --std and --img-size for a model trained elsewhere: the checkpoint does not record them.

    Timm-expressible backbones then load with timm alone:
    timm.create_model("local-dir:DIR", pretrained=True, num_classes=0);
    CIFAR-stem ResNets with geohead.load_backbone(DIR).
    """
    from geohead.training.checkpoint import CheckpointError
    from geohead.export import ExportError, export_backbone

    mean, std = parse_floats("mean", foreign.pop("mean")), parse_floats("std", foreign.pop("std"))
    img_size = foreign.pop("img_size")
    model_args = parse_model_args(foreign.pop("model_arg"))
    architecture = foreign["architecture"]
    kwargs = dict(dtype=dtype, teacher=teacher, with_head=with_head, overwrite=overwrite, mean=mean, std=std,
                  interpolation=interpolation)
    from geohead.io import folder_problem

    missing_source(source, "a geohead run folder or its last.safetensors, or a checkpoint trained elsewhere (Lightning .ckpt, "
                           "a torch .pt/.pth state_dict, .safetensors)")
    problem = folder_problem(out_dir)
    if problem:  # before a weights file is read and rebuilt
        fail(f"--out {out_dir!r} cannot be written: {problem}; choose another folder")
    with warnings_to_stderr():
        try:
            if is_geohead_source(source):
                given = foreign_flags({**foreign, "model_arg": model_args, "prefix": prefix, "img_size": img_size})
                if given:
                    fail(f"{', '.join(given)} describe{'s' if len(given) == 1 else ''} a checkpoint trained elsewhere; {source!r} is a geohead run, which "
                         "records its architecture, method and input size: drop them (--mean/--std may override its normalisation)")
                res = export_backbone(source, out_dir, **kwargs)
            elif prefix is not None:
                if not architecture:
                    fail("--prefix names where a backbone sits in a weights file; pass --architecture NAME with it")
                from geohead.export.foreign import load_timm_weights

                model = load_timm_weights(source, architecture, model_args, prefix, img_size)
                res = export_backbone(model, out_dir, **kwargs, architecture=None if hasattr(model, "geohead_config") else architecture,
                                      model_args=model_args or None, img_size=img_size)
            else:
                res = _export_foreign(source, out_dir, kwargs, model_args, img_size, **foreign)
        except (ExportError, CheckpointError, ValueError) as exc:
            fail(str(exc))
    for line in res.recovered:
        click.echo(f"note: {line}", err=True)
    click.echo(f"exported the {res.branch} backbone ({res.num_tensors} tensors, {res.num_params:,} values, {res.dtype}) to {res.out_dir}")
    click.echo(f"  {res.weights.name}  {res.checksum}")
    if res.head_weights is not None:
        click.echo(f"  {res.head_weights.name} + {res.head_spec.name}  (the head, separate)")
    if res.timm_loadable:
        click.echo(f"load with timm alone: timm.create_model('local-dir:{res.out_dir}', pretrained=True, num_classes=0)")
    else:
        click.echo(f"timm cannot build this backbone from arguments (CIFAR stem); load with geohead.load_backbone('{res.out_dir}')")


def _export_foreign(source: str, out_dir: str, kwargs: dict[str, Any], model_args: dict[str, Any], img_size: int | None, *,
                    architecture: str | None, method: str | None, activation: str | None) -> Any:
    """A checkpoint trained elsewhere: :func:`geohead.pretrained.load_pretrained`, then the
    backbone (and with --with-head its GeometricHead) through :func:`export_backbone`, recording
    the method, the head and where they came from."""
    from torch import nn

    from geohead.export import ExportError, export_backbone
    from geohead.pretrained import load_pretrained

    pt = load_pretrained(source, architecture=architecture, method=method, activation=activation,
                         model_args=model_args or None, img_size=img_size, require_head=kwargs["with_head"],
                         teacher=kwargs["teacher"])
    if kwargs["with_head"] and pt.head is None:
        raise ExportError(f"{source!r} holds no projection head geohead can rebuild ({'; '.join(pt.layout.notes) or 'none found'}); "
                          "drop --with-head")
    if kwargs["mean"] is None or kwargs["std"] is None:  # what the checkpoint records (Lightning hyper-parameters)
        from geohead.pretrained.load import recorded_normalisation

        mean, std = recorded_normalisation(pt.layout)
        kwargs = {**kwargs, "mean": kwargs["mean"] or mean, "std": kwargs["std"] or std}
    pair = nn.Module()
    pair.backbone, pair.head = pt.backbone, pt.head if pt.head is not None else nn.Identity()
    info = pt.describe()
    provenance = {"objective": pt.method, "head_spec": info["head_spec"], "source": str(source),
                  "branch": "teacher" if kwargs["teacher"] else "student",
                  "trained_elsewhere": {k: info[k] for k in ("layout", "head_prefix", "head_check", "notes")}}
    return export_backbone(pair if pt.head is not None else pt.backbone, out_dir, **{**kwargs, "teacher": False},
                           provenance=provenance)
