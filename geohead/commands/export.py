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
def export(source: str, out_dir: str, dtype: str, teacher: bool, with_head: bool, overwrite: bool) -> None:
    """Export the backbone of SOURCE (a run folder or a .ckpt file) without head, predictor, teacher
    or optimiser state.

    Timm-expressible backbones then load with timm alone:
    timm.create_model("local-dir:DIR", pretrained=True, num_classes=0);
    CIFAR-stem ResNets with geohead.load_backbone(DIR).
    """
    from geohead.checkpoint import CheckpointError
    from geohead.export import ExportError, export_backbone

    try:
        res = export_backbone(source, out_dir, dtype=dtype, teacher=teacher, with_head=with_head, overwrite=overwrite)
    except (ExportError, CheckpointError) as exc:
        fail(str(exc))
    click.echo(f"exported the {res.branch} backbone ({res.num_tensors} tensors, {res.num_params:,} values, {res.dtype}) to {res.out_dir}")
    click.echo(f"  {res.weights.name}  {res.checksum}")
    if res.head_weights is not None:
        click.echo(f"  {res.head_weights.name} + {res.head_spec.name}  (the head, separate)")
    if res.timm_loadable:
        click.echo(f"load with timm alone: timm.create_model('local-dir:{res.out_dir}', pretrained=True, num_classes=0)")
    else:
        click.echo(f"timm cannot build this backbone from arguments (CIFAR stem); load with geohead.load_backbone('{res.out_dir}')")
