"""The GPU check in one command: CUDA tests, training throughput, H_eff products, a short search.

A GPU is lent to a session rarely and briefly (about 15 minutes in all), so everything geohead
wants to know from one is in this script, sized to finish in <= 8 minutes on one GPU::

    python benchmarks/device_check.py --device cuda --out DIR      # the real check (GPU)
    python benchmarks/device_check.py --device cpu --tiny --out DIR   # the dry run (CPU, <= 3 min)

Parts (``--parts``, default all, run in this order; each records ok / failed with its error, so
one failing part keeps the others' numbers; ``DIR/device_check.json`` is rewritten after each):

* ``tests``      - ``pytest -m cuda`` on the test files that hold ``cuda`` tests (bf16 and
  compiled training steps vs fp32, a CUDA-trained run exported and loaded bit-exact on the CPU,
  ``geohead search --device cuda`` for 2 trials, H_eff / Lanczos on CUDA vs CPU float64). They
  skip without CUDA, so the dry run records them as skipped.
* ``throughput`` - Barlow Twins training throughput through geohead's own ``setup`` /
  ``batch_views`` / ``train_step`` (views made on the device from uint8 images held there):
  ``geohead/recipes/barlow_resnet18_cifar10.toml`` (ResNet-18 with the CIFAR stem, 2048-2048-2048 head,
  LARS) at batch 256 in fp32, bf16 autocast, bf16 autocast + torch.compile (``--modes``): images/s
  over the timed steps (views included; views alone in ``views_ms``), peak memory
  (``torch.cuda.max_memory_allocated``), the first step's seconds (compilation) and its loss
  (``loss0``, compared with fp32's).
* ``hvp``        - one Hessian-vector product and a 20-step Lanczos of H_eff at B = 256, d = 512
  (the problem of ``benchmarks/hessian.py --size full``: 3-layer SiLU head 512 -> 2048 -> 2048 ->
  2048 with BatchNorm in eval mode, Barlow Twins, Gaussian features), float64 and float32: seconds,
  the Ritz extremes, and three checks of the product on the device: symmetry <u, Hv> = <Hu, v>,
  a central finite difference of the gradient, and the same product on the CPU in float64.
* ``search``     - ``geohead search --objective barlow`` on CIFAR-10 (``DATA_DIR/cifar10_train_10k.npz``,
  probes on ``cifar10_test.npz``) with the paper-scale backbone ``resnet18_cifar``, 3 minutes
  (``--search-timeout``): trials, the Spearman correlation of score and kNN, the best head. Without
  the CIFAR arrays it searches the built-in shapes data and says so in ``data_note``.

``--tiny`` shrinks every size (resnet18_w16, batch 32, 64-wide head, 1 + 3 steps; B = 16, d = 32;
a 2-trial search on 128 images) so that the whole script runs on 2 CPU cores in <= 3 minutes; the
bf16 + compile mode is most of that (inductor's C++ build of the training step, ~95 s cold).

Data (``--data-dir``, default ``$GEOHEAD_SHARED_DATA`` or ``../shared/data`` beside the repo): the
CIFAR-10 arrays of ``../shared/data/README.md``; shapes stand in when they are missing.

Exit status: 0 when every part ran ok, 1 otherwise (the JSON and the table are written either way).
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # runnable from a checkout without `pip install -e .` (the GPU machine)
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from device_report import table  # noqa: E402
from device_tests import part_tests  # noqa: E402  (part (a), the cuda tests)

PARTS = ("tests", "throughput", "hvp", "search")
#: mode -> (TrainConfig.precision, TrainConfig.compile)
MODES: dict[str, tuple[str, bool]] = {"fp32": ("fp32", False), "bf16": ("bf16", False), "bf16+compile": ("bf16", True)}
RECIPE = ROOT / "geohead" / "recipes" / "barlow_resnet18_cifar10.toml"


@dataclasses.dataclass(frozen=True)
class Sizes:
    backbone: str
    batch: int
    width: int | None  # head hidden/out width override (None: the recipe's 2048)
    n_train: int | None  # training images for the throughput part (None: all)
    warmup: int
    steps: int
    hvp_batch: int
    hvp_dim: int
    hvp_hidden: int
    lanczos_steps: int
    search_trials: int
    search_timeout: float | None
    search_tiny: bool


FULL = Sizes(backbone="resnet18_cifar", batch=256, width=None, n_train=None, warmup=3, steps=20, hvp_batch=256,
             hvp_dim=512, hvp_hidden=2048, lanczos_steps=20, search_trials=100, search_timeout=180.0, search_tiny=False)
TINY = Sizes(backbone="resnet18_w16", batch=32, width=64, n_train=128, warmup=1, steps=3, hvp_batch=16, hvp_dim=32,
             hvp_hidden=64, lanczos_steps=20, search_trials=2, search_timeout=None, search_tiny=True)


# ---------------------------------------------------------------------- helpers
def default_data_dir() -> Path:
    env = os.environ.get("GEOHEAD_SHARED_DATA")
    return Path(env) if env else ROOT.parent / "shared" / "data"


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def environment(device: torch.device, tiny: bool, argv: list[str]) -> dict[str, Any]:
    from geohead._version import __version__

    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:  # noqa: BLE001 - no git on the machine: not an error of the check
        commit = ""
    env: dict[str, Any] = {
        "script": "benchmarks/device_check.py", "argv": argv, "geohead": __version__, "commit": commit or None,
        "device": str(device), "tiny": tiny, "torch": torch.__version__, "cuda": torch.version.cuda,
        "python": platform.python_version(), "cpu_count": os.cpu_count(), "threads": torch.get_num_threads(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(device_name=props.name, device_memory_gb=round(props.total_memory / 2**30, 1),
                   capability=f"{props.major}.{props.minor}", cudnn=torch.backends.cudnn.version())
    else:
        env["device_name"] = platform.processor() or platform.machine()
    return env


def run_part(name: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run one part; ok / failed with the error and its traceback, and the seconds it took."""
    t0 = time.perf_counter()
    try:
        result = fn()
        status, error, tb = ("ok" if result.pop("_ok", True) else "failed"), result.pop("_error", None), None
    except Exception as exc:  # noqa: BLE001 - a failing part must not lose the other parts
        result, status, error, tb = {}, "failed", f"{type(exc).__name__}: {exc}", traceback.format_exc()
    rec = {"status": status, "seconds": round(time.perf_counter() - t0, 2), "error": error, "result": result}
    if tb:
        rec["traceback"] = tb
    return rec


# ---------------------------------------------------------------------- (b) training throughput
def data_source(data_dir: Path) -> tuple[str, str | None, str | None]:
    """(training data, probe test data or None, note): the CIFAR-10 arrays, or shapes without them."""
    train, test = data_dir / "cifar10_train_10k.npz", data_dir / "cifar10_test.npz"
    if train.is_file():
        return str(train), (str(test) if test.is_file() else None), None
    return "shapes", None, f"CIFAR-10 arrays not found at {train}; the built-in shapes data (32 px) stands in"


def train_config(sizes: Sizes, device: torch.device, mode: str, data: str, out: Path):
    from geohead.training.config import load_recipe

    precision, compile_ = MODES[mode]
    over = [f'data.name="{data}"', f'device="{device}"', f'precision="{precision}"', f"compile={str(compile_).lower()}",
            f'backbone.name="{sizes.backbone}"', f"optim.batch_size={sizes.batch}", "optim.epochs=10",
            "optim.warmup_epochs=1", f"optim.max_steps={sizes.warmup + sizes.steps}", "probe.enabled=false",
            "track.progress=false", "track.monitor_every=0", f'out="{out}"']
    if sizes.n_train is not None:
        over.append(f"data.n_train={sizes.n_train}")
    if sizes.width is not None:
        over += [f"head.spec.hidden_dim={sizes.width}", f"head.spec.out_dim={sizes.width}"]
    return load_recipe(RECIPE, over)


def throughput_mode(sizes: Sizes, device: torch.device, mode: str, data: str, out: Path) -> dict[str, Any]:
    from geohead.training.optim import lr_at
    from geohead.training.loop import batch_views, setup, train_step, whiten_head

    cfg = train_config(sizes, device, mode, data, out)
    free(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    run = setup(cfg, 0, 1)
    setup_s = time.perf_counter() - t0
    perm = torch.randperm(len(run.data), generator=torch.Generator().manual_seed(cfg.seed * 100_003)).to(run.device)
    run.model.train()
    views_s, loss0, first_s, t_start, losses = 0.0, float("nan"), 0.0, 0.0, []
    for step in range(sizes.warmup + sizes.steps):
        if step == sizes.warmup:
            sync(run.device)
            t_start, views_s = time.perf_counter(), 0.0
        t_step = time.perf_counter()
        views = batch_views(run, step, perm)
        sync(run.device)
        views_s += time.perf_counter() - t_step
        if step == 0 and run.head_spec.whiten is not None:
            whiten_head(run, views)
        lr = lr_at(step, run.total_steps, run.warmup_steps, run.base_lr, cfg.optim.final_lr_ratio)
        loss, _, _ = train_step(run, step, views, lr)  # .item() inside: synchronises every step
        losses.append(float(loss.detach()))
        if step == 0:
            first_s, loss0 = time.perf_counter() - t_step, losses[0]
    sync(run.device)
    timed = time.perf_counter() - t_start
    res = {
        "mode": mode, "precision": cfg.precision, "compile": cfg.compile, "compiled": run.train_model is not run.model,
        "autocast_bf16": bool(run.autocast._enabled), "channels_last": run.model.channels_last,
        "views_device": str(run.images.device), "setup_s": round(setup_s, 2), "first_step_s": round(first_s, 3),
        "timed_steps": sizes.steps, "timed_s": round(timed, 4), "img_per_s": round(sizes.steps * sizes.batch / timed, 1),
        "step_ms": round(1000 * timed / sizes.steps, 2), "views_ms": round(1000 * views_s / sizes.steps, 2),
        "peak_mem_mb": round(torch.cuda.max_memory_allocated(device) / 2**20, 1) if device.type == "cuda" else None,
        "loss0": loss0, "losses": losses,
    }
    del run
    if cfg.compile:
        torch._dynamo.reset()
    free(device)
    return res


def part_throughput(sizes: Sizes, device: torch.device, modes: list[str], data_dir: Path) -> dict[str, Any]:
    data, _, note = data_source(data_dir)
    res: dict[str, Any] = {"recipe": str(RECIPE.relative_to(ROOT)), "backbone": sizes.backbone, "batch_size": sizes.batch,
                           "img_size": 32, "head_width": sizes.width or 2048, "data": data, "data_note": note,
                           "warmup_steps": sizes.warmup, "timed_steps": sizes.steps, "modes": []}
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in modes:
            t0 = time.perf_counter()
            try:
                row = {**throughput_mode(sizes, device, mode, data, Path(tmp) / mode.replace("+", "_")), "ok": True, "error": None}
            except Exception as exc:  # noqa: BLE001 - one failing mode keeps the others' numbers
                row = {"mode": mode, "ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
                errors.append(f"{mode}: {type(exc).__name__}: {exc}")
                free(device)
            row["seconds"] = round(time.perf_counter() - t0, 2)
            res["modes"].append(row)
    ref = next((m for m in res["modes"] if m["mode"] == "fp32" and m["ok"]), None)
    for m in res["modes"]:
        if m["ok"] and ref is not None:
            m["loss0_rel_vs_fp32"] = abs(m["loss0"] - ref["loss0"]) / abs(ref["loss0"])
            m["speedup_vs_fp32"] = round(m["img_per_s"] / ref["img_per_s"], 3)
    res["_ok"] = not errors
    if errors:
        res["_error"] = "; ".join(errors)
    return res


# ---------------------------------------------------------------------- (c) H_eff products
def hvp_problem(batch: int, dim: int, hidden: int):
    """benchmarks/hessian.py's problem: 3-layer SiLU/BN head (eval), Barlow Twins, z2 = z1 + 0.1 noise."""
    from geohead.heads import GeometricHead
    from geohead.objectives import get_objective

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    head = GeometricHead(dim, hidden, hidden_dim=hidden, depth=3, activation="silu", norm="batch").eval()
    z1 = torch.randn(batch, dim, generator=g, dtype=torch.float64)
    z2 = z1 + 0.1 * torch.randn(batch, dim, generator=g, dtype=torch.float64)
    return head, get_objective("barlow"), z1, z2


def hvp_dtype(sizes: Sizes, device: torch.device, dtype: torch.dtype, problem) -> dict[str, Any]:
    from geohead.geometry import EffectiveHessian, lanczos

    head, obj, z1, z2 = problem
    t0 = time.perf_counter()
    eh = EffectiveHessian(head, obj, z1.to(device), z2.to(device), dtype=dtype)
    sync(device)
    build_s = time.perf_counter() - t0
    gen = torch.Generator().manual_seed(1)
    v = torch.randn(eh.dim, generator=gen, dtype=torch.float64)
    u = torch.randn(eh.dim, generator=gen, dtype=torch.float64)
    vd, ud = v.to(device, dtype), u.to(device, dtype)
    t0 = time.perf_counter()
    hv = eh.H(vd)
    sync(device)
    first_s = time.perf_counter() - t0
    reps = 3
    t0 = time.perf_counter()
    for _ in range(reps):
        hv = eh.H(vd)
    sync(device)
    hvp_s = (time.perf_counter() - t0) / reps
    hu = eh.H(ud)
    sym = abs(float(torch.dot(ud, hv) - torch.dot(hu, vd))) / max(abs(float(torch.dot(ud, hv))), 1e-300)
    res: dict[str, Any] = {"dtype": str(dtype).replace("torch.", ""), "dim": eh.dim, "build_s": round(build_s, 4),
                           "first_hvp_s": round(first_s, 4), "hvp_s": round(hvp_s, 4), "hv_norm": float(hv.norm()),
                           "symmetry_rel_err": sym}
    if dtype == torch.float64:
        # ∇f(z + εv) − ∇f(z − εv) ≈ 2ε H v (central difference; error O(ε²) + rounding/ε)
        eps = 1e-4 * float(eh.z.norm()) / float(vd.norm())
        vz = vd.view_as(eh.z)
        grads = [EffectiveHessian(head, obj, (eh.z + s * eps * vz).detach(), z2.to(device), dtype=dtype).grad_z.reshape(-1)
                 for s in (1.0, -1.0)]
        fd = (grads[0] - grads[1]) / (2 * eps)
        res["finite_difference_rel_err"] = float((fd - hv).norm() / hv.norm())
        if device.type != "cpu":
            ref = EffectiveHessian(head, obj, z1, z2, dtype=torch.float64).H(v)
            res["cpu_float64_rel_err"] = float((hv.cpu() - ref).norm() / ref.norm())
    t0 = time.perf_counter()
    lz = lanczos(eh.H, k=1, which="both", max_iter=sizes.lanczos_steps, tol=0.0)
    sync(device)
    res.update(lanczos_steps=lz.iterations, lanczos_s=round(time.perf_counter() - t0, 4), lambda_min=lz.lambda_min,
               lambda_max=lz.lambda_max, residual_min=float(lz.residuals[0]), residual_max=float(lz.residuals[-1]),
               ritz_values=[float(x) for x in lz.ritz_values])
    return res


def part_hvp(sizes: Sizes, device: torch.device) -> dict[str, Any]:
    problem = hvp_problem(sizes.hvp_batch, sizes.hvp_dim, sizes.hvp_hidden)
    res: dict[str, Any] = {"batch": sizes.hvp_batch, "d": sizes.hvp_dim,
                           "head": f"{sizes.hvp_dim}->{sizes.hvp_hidden}->{sizes.hvp_hidden}->{sizes.hvp_hidden} SiLU, BN eval",
                           "objective": "barlow", "dtypes": {}}
    for dtype in (torch.float64, torch.float32):
        res["dtypes"][str(dtype).replace("torch.", "")] = hvp_dtype(sizes, device, dtype, problem)
        free(device)
    f64 = res["dtypes"]["float64"]
    checks = {"symmetry_rel_err": 1e-10, "finite_difference_rel_err": 1e-5, "cpu_float64_rel_err": 1e-10}
    bad = [f"{k} = {f64[k]:.2e} > {tol}" for k, tol in checks.items() if k in f64 and not f64[k] <= tol]
    res["checks"] = checks
    res["_ok"] = not bad
    if bad:
        res["_error"] = "float64 H v off: " + "; ".join(bad)
    return res


# ---------------------------------------------------------------------- (d) a short search
def part_search(sizes: Sizes, device: torch.device, out: Path, data_dir: Path, timeout: float | None) -> dict[str, Any]:
    from geohead.search import SearchConfig, run_search

    data, test, note = data_source(data_dir)
    kw: dict[str, Any] = dict(objective="barlow", out=str(out / "search"), data=data, test=test, device=str(device),
                              seed=0, trials=sizes.search_trials, timeout=timeout, progress=False)
    if sizes.search_tiny:
        kw.update(n_train=128, batch_size=32, steps=2, probe_train=128, probe_test=64, orbit_images=8,
                  families=("hue",), screen_batch=32, heartbeat=2)
    else:
        kw.update(backbone="resnet18_cifar")
    cfg = SearchConfig(**kw).validate()
    t0 = time.perf_counter()
    result = run_search(cfg)
    wall = time.perf_counter() - t0
    s = result.summary
    best = dict(s.get("best") or {})
    if best.get("head"):
        from geohead.heads import HeadSpec

        best["head_desc"] = HeadSpec.from_dict(best["head"]).describe()
    return {"command_equivalent": _search_command(cfg), "data": data, "test": test, "data_note": note,
            "backbone": cfg.backbone or "resnet18_w16", "batch_size": cfg.batch_size,
            **{k: getattr(cfg, k) for k in ("steps", "min_steps", "max_steps") if hasattr(cfg, k)},
            "timeout_s": timeout, "wall_s": round(wall, 1), "trials": s["trials"], "spearman": s["spearman"],
            "trial_seconds": s.get("trial_seconds"), "best": {k: best.get(k) for k in ("number", "score", "knn_backbone", "head_desc", "head")},
            "verdict": {k: (s.get("verdict") or {}).get(k) for k in ("recommended", "reason", "basis", "score_margin", "knn_margin")},
            "out": str(out / "search"),
            "_ok": s["trials"]["failed"] == 0 and s["trials"]["complete"] + s["trials"]["pruned"] > 0,
            "_error": None if s["trials"]["failed"] == 0 else f"{s['trials']['failed']} trial(s) failed (see trials.csv)"}


def _search_command(cfg) -> str:
    parts = ["geohead search --objective barlow", f"--data {cfg.data}"]
    if cfg.test:
        parts.append(f"--test {cfg.test}")
    if cfg.backbone:
        parts.append(f"--backbone {cfg.backbone}")
    parts += [f"--device {cfg.device}", f"--trials {cfg.trials}", f"--timeout {int(cfg.timeout or 0)}", f"--out {cfg.out}"]
    return " ".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto", help="auto (CUDA when there is one), cuda, cuda:K or cpu")
    ap.add_argument("--tiny", action="store_true", help="tiny sizes: the CPU dry run (<= 3 min on 2 cores)")
    ap.add_argument("--out", default="runs/device_check", help="folder for device_check.json, the test log and the search")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
    ap.add_argument("--modes", default=",".join(MODES), help=f"throughput modes, a subset of {','.join(MODES)}")
    ap.add_argument("--data-dir", default=None, help="folder of the CIFAR-10 arrays (default $GEOHEAD_SHARED_DATA or ../shared/data)")
    ap.add_argument("--search-timeout", type=float, default=None, help="seconds after which the search starts no trial (default 180; --tiny: 2 trials, no limit)")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's; 1 keeps a tiny dry run steady on a busy machine)")
    ap.add_argument("--tests-timeout", type=float, default=300.0, help="seconds the cuda tests may take")
    args = ap.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv

    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for p in parts:
        if p not in PARTS:
            ap.error(f"unknown part {p!r}; choose from {','.join(PARTS)}")
    for m in modes:
        if m not in MODES:
            ap.error(f"unknown mode {m!r}; choose from {','.join(MODES)}")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    from geohead.training.model import resolve_device

    device = resolve_device(args.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    sizes = TINY if args.tiny else FULL
    search_timeout = args.search_timeout if args.search_timeout is not None else sizes.search_timeout
    data_dir = Path(args.data_dir) if args.data_dir else default_data_dir()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"environment": environment(device, args.tiny, argv), "sizes": dataclasses.asdict(sizes),
                              "parts": {}, "ok": None, "wall_s": 0.0}
    t0 = time.perf_counter()
    jobs: dict[str, Callable[[], dict[str, Any]]] = {
        "tests": lambda: part_tests(out, device, args.tests_timeout),
        "throughput": lambda: part_throughput(sizes, device, modes, data_dir),
        "hvp": lambda: part_hvp(sizes, device),
        "search": lambda: part_search(sizes, device, out, data_dir, search_timeout),
    }
    path = out / "device_check.json"
    for name in PARTS:
        if name not in parts:
            continue
        print(f"[device_check] {name} ...", flush=True)
        report["parts"][name] = run_part(name, jobs[name])
        report["wall_s"] = round(time.perf_counter() - t0, 1)
        report["ok"] = all(r["status"] == "ok" for r in report["parts"].values())
        path.write_text(json.dumps(report, indent=2, default=str) + "\n")  # after each part: a kill keeps the rest
        print(f"[device_check] {name}: {report['parts'][name]['status']} in {report['parts'][name]['seconds']:.1f} s", flush=True)
    text = table(report)
    (out / "device_check.txt").write_text(text + "\n")
    print("\n" + text)
    print(f"\nwritten: {path}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
