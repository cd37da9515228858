"""Worker for tests/test_export.py: load exported backbones with timm alone, in a fresh process.

Run as ``python -I timm_load.py INPUT.safetensors OUT.safetensors DIR...``. Importing geohead is
blocked (any attempt raises ImportError), so a load that needed geohead would fail here. For
each DIR: ``timm.create_model("local-dir:DIR", pretrained=True, num_classes=0)`` in eval mode,
features of the fixed batch ``x`` saved as ``f{i}`` (timm's default contiguous memory format)
and ``c{i}`` (after ``model.to(memory_format=torch.channels_last)``, the format geohead trains
ResNets in: the kernels, hence the float rounding, depend on it); errors and timm's data config are printed
as one JSON line.
"""
from __future__ import annotations

import importlib.abc
import json
import sys


class _BlockGeohead(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):  # noqa: D102
        if name == "geohead" or name.startswith("geohead."):
            raise ImportError(f"{name} is blocked: this process must load the export with timm alone")
        return None


sys.meta_path.insert(0, _BlockGeohead())

import timm  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402


def main() -> None:
    inp, out, dirs = sys.argv[1], sys.argv[2], sys.argv[3:]
    torch.set_num_threads(1)
    x = load_file(inp)["x"]
    feats, errors, data_cfg = {}, {}, {}
    for i, d in enumerate(dirs):
        try:
            model = timm.create_model(f"local-dir:{d}", pretrained=True, num_classes=0).eval()
            with torch.no_grad():
                feats[f"f{i}"] = model(x).contiguous()
                feats[f"c{i}"] = model.to(memory_format=torch.channels_last)(x).contiguous()
            data_cfg[d] = {k: list(v) if isinstance(v, tuple) else v
                           for k, v in timm.data.resolve_data_config({}, model=model).items()}
        except Exception as exc:  # noqa: BLE001 - reported to the test
            errors[d] = f"{type(exc).__name__}: {exc}"
    save_file(feats, out)
    print(json.dumps({"errors": errors, "data_config": data_cfg,
                      "geohead_imported": any(m == "geohead" or m.startswith("geohead.") for m in sys.modules)}))


if __name__ == "__main__":
    main()
