"""``geohead export RUN_OR_CKPT --out DIR``: the backbone alone, as safetensors + timm config."""
from __future__ import annotations

import click

from geohead.commands import fail


@click.command()
@click.argument("source", type=click.Path())
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Export folder (model.safetensors + config.json).")
@click.option("--dtype", type=click.Choice(["fp32", "bf16", "fp16"]), default="fp32", show_default=True, help="Storage dtype of the weights.")
@click.option("--teacher", is_flag=True, help="Export the EMA teacher's backbone (BYOL, DINO) instead of the student's.")
@click.option("--with-head", is_flag=True, help="Also write the head, as a second file head.safetensors (+ head.json).")
@click.option("--overwrite", is_flag=True, help="Replace an export folder that already holds files.")
@click.option("--architecture", default=None, metavar="NAME",
              help="SOURCE is a weights file of a timm model geohead did not train (safetensors, a torch state dict, "
                   "a Lightning/lightly .ckpt): the timm architecture it was created with.")
@click.option("--model-arg", "model_arg", multiple=True, metavar="KEY=VALUE",
              help="With --architecture: a keyword argument it was created with (VALUE read as JSON, else a string); "
                   "repeatable, e.g. --model-arg img_size=32 --model-arg patch_size=4.")
@click.option("--prefix", default=None, help="With --architecture: the key prefix of the backbone in the file "
                                             "(default: found by itself, e.g. 'backbone.').")
def export(source: str, out_dir: str, dtype: str, teacher: bool, with_head: bool, overwrite: bool,
           architecture: str | None, model_arg: tuple[str, ...], prefix: str | None) -> None:
    """Export the backbone of SOURCE (a run folder or a .ckpt file) without head, predictor, teacher
    or optimiser state; with --architecture, SOURCE is the weights file of any timm backbone
    (checked bit for bit against timm's rebuild before writing).

    Timm-expressible backbones then load with timm alone:
    timm.create_model("local-dir:DIR", pretrained=True, num_classes=0);
    CIFAR-stem ResNets with geohead.load_backbone(DIR).
    """
    import json

    from geohead.checkpoint import CheckpointError
    from geohead.export import ExportError, export_backbone

    model_args = {}
    for item in model_arg:
        key, eq, value = item.partition("=")
        if not eq or not key:
            fail(f"--model-arg {item!r} is not KEY=VALUE (e.g. --model-arg patch_size=4)")
        try:
            model_args[key] = json.loads(value)
        except json.JSONDecodeError:
            model_args[key] = value
    if (model_args or prefix) and not architecture:
        fail("--model-arg and --prefix describe a foreign weights file; pass --architecture NAME with them")
    from geohead.io import folder_problem

    problem = folder_problem(out_dir)
    if problem:  # before a foreign weights file is read and rebuilt
        fail(f"--out {out_dir!r} cannot be written: {problem}; choose another folder")
    try:
        if architecture:
            from geohead.export.foreign import load_timm_weights

            source = load_timm_weights(source, architecture, model_args, prefix)
        res = export_backbone(source, out_dir, dtype=dtype, teacher=teacher, with_head=with_head, overwrite=overwrite,
                              architecture=architecture, model_args=model_args or None)
    except (ExportError, CheckpointError) as exc:
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
