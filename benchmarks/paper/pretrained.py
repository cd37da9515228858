"""The paper's pretrained-model analysis ("foundation models": DINO's head compresses augmentation
orbits, VICReg's expands them) on any list of checkpoints, as one table.

For each checkpoint (a geohead run, or one trained anywhere: Lightning, lightly, solo-learn, the
official DINO / VICReg / Barlow Twins layouts; see ``geohead.pretrained``) it runs ``geohead
diagnose``'s measurements and prints the dichotomy table: the width-corrected orbit compression
per augmentation family (backbone over head; > 1: the head shrinks the orbit more), their
geometric mean and the verdict (compresses / expands), H_eff at real features (λ_min, ‖M‖/‖H‖)
and the guillotine probes (class kNN accuracy of backbone and head).

``--synthetic`` adds the small checkpoints of ``geohead.pretrained.synthetic`` (random weights in
exactly the official layouts): they check the pipeline, their verdicts mean nothing.

Each checkpoint's full report is written as ``OUT/<name>.diagnose.json`` (``geohead report`` makes
its page), the table as ``OUT/tables.md``, the summary as ``OUT/results.json``.

    python benchmarks/paper/pretrained.py --synthetic                        # the layouts only
    python benchmarks/paper/pretrained.py runs/x/last.safetensors lightly.pt:barlow model.pth --data cifar10.npz
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"
FAMILIES = ("rotate", "hue", "saturation", "blur", "crop")
#: Sizes of the diagnosis by scale (images, orbit images, Hessian batch, SLQ, probes).
SIZES = {
    "smoke": dict(n_test=48, n_train=48, n_orbit_images=6, hessian_samples=6, collapse_batch=4, refine=0, mode="fast",
                  density_probes=1, density_steps=4, linear=False),
    "small": dict(n_test=500, n_train=1000, n_orbit_images=32, hessian_samples=32, collapse_batch=8, refine=0, mode="fast",
                  density_probes=1, density_steps=10, linear=False),
    "cpu": dict(n_test=1000, n_train=2000, n_orbit_images=64, hessian_samples=64, collapse_batch=16, refine=20, mode="fast",
                density_probes=2, density_steps=20, linear=False),
}


def diagnose_one(path: str, method: str | None, args: argparse.Namespace) -> dict[str, Any]:
    """The diagnose report of one checkpoint (geohead's own, or trained elsewhere)."""
    from geohead.commands.foreign import is_geohead_source
    from geohead.diagnose import DiagnoseSettings, diagnose
    from geohead.pretrained.diagnose import diagnose_pretrained, orbit_summary

    settings = DiagnoseSettings(**SIZES[args.scale], families=FAMILIES)
    if is_geohead_source(path):
        if args.data:
            settings.data, settings.data_test = args.data, args.data_test
        report = diagnose(path, settings)
        report["orbit_summary"] = orbit_summary(report["orbits"])
        report["pretrained"] = {"layout": "geohead", "method": report["source"]["objective"]}
        return report
    return diagnose_pretrained(path, method=method, data=args.data or "shapes", data_test=args.data_test, settings=settings)


def row(name: str, r: dict[str, Any]) -> list[str]:
    from geohead.diagnose import fmt

    knn = ((r.get("probes") or {}).get("targets") or {}).get("class", {})
    hs = r["source"]["head_spec"] or {}
    s = r["orbit_summary"]
    return [name, str((r.get("pretrained") or {}).get("layout")), str(r["source"]["objective"]),
            f"{hs.get('activation')} d{hs.get('depth')}", *(fmt(r["orbits"][f]["compression"]) for f in FAMILIES),
            fmt(s["geometric_mean"]), str(s["head"]), fmt(r["hessian"]["lambda_min"]), fmt(r["hessian"]["m_over_h"]),
            fmt(_knn(knn, "backbone")), fmt(_knn(knn, "head"))]


def _knn(probe: dict[str, Any], space: str) -> Any:
    return (probe.get(space) or {}).get("knn")


HEADER = ["checkpoint", "layout", "method", "head", *FAMILIES, "geo mean", "head", "λ_min H_eff", "‖M‖/‖H‖", "kNN bb", "kNN head"]


def table(rows: list[list[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoints", nargs="*", help="PATH or PATH:METHOD (a geohead run folder, .ckpt, .pt, .pth)")
    p.add_argument("--synthetic", action="store_true", help="add the synthetic official layouts (pipeline check)")
    p.add_argument("--data", default=None, help="images to measure on (default: shapes, or the run's own for geohead runs)")
    p.add_argument("--data-test", default=None)
    p.add_argument("--scale", choices=sorted(SIZES), default="cpu")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "paper" / "pretrained")
    args = p.parse_args(argv)

    args.out.mkdir(parents=True, exist_ok=True)
    todo: list[tuple[str, str, str | None]] = []
    if args.synthetic:
        from geohead.pretrained.synthetic import WRITERS

        (args.out / "synthetic").mkdir(exist_ok=True)
        for name, (writer, method) in WRITERS.items():
            todo.append((f"synthetic {name}", str(writer(args.out / "synthetic")[0]), method))
    for item in args.checkpoints:
        path, _, method = item.partition(":") if not Path(item).exists() else (item, "", "")
        todo.append((Path(path).name if Path(path).is_file() else path, path, method or None))
    if not todo:
        p.error("give checkpoints or --synthetic")
    rows, results = [], {}
    for name, path, method in todo:
        t0 = time.perf_counter()
        try:
            report = diagnose_one(path, method, args)
        except (ValueError, FileNotFoundError) as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            continue
        slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip("_")
        (args.out / f"{slug}.diagnose.json").write_text(json.dumps(report, indent=2) + "\n")  # geohead report reads it
        results[name] = {"path": path, "diagnose_json": f"{slug}.diagnose.json", "seconds": round(time.perf_counter() - t0, 1), "orbit_summary": report["orbit_summary"],
                         "orbits": {f: report["orbits"][f]["compression"] for f in FAMILIES},
                         "hessian": report["hessian"], "probes": report.get("probes"), "source": report["source"],
                         "pretrained": report.get("pretrained")}
        rows.append(row(name, report))
        print(f"{name}: {results[name]['seconds']} s, the head {report['orbit_summary']['head']}", file=sys.stderr)
    text = table(rows)
    print(text)
    (args.out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    (args.out / "tables.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
