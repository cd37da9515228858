"""Contracts that keep the layout as CONTRIBUTING.md describes it."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 450


def test_import_layers_hold() -> None:
    """`lint-imports` with the contracts of pyproject.toml ([tool.importlinter]): the layers,
    geometry apart from training, no cycles between sibling modules."""
    exe = Path(sys.executable).with_name("lint-imports")
    cmd = [str(exe)] if exe.exists() else [shutil.which("lint-imports") or "lint-imports"]
    if not exe.exists() and shutil.which("lint-imports") is None:
        pytest.fail("lint-imports is not installed; install the dev extra: pip install -e '.[dev]'")
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "0 broken" in res.stdout


#: The folders the size rules below walk (every *.py under them): the package and the benchmark
#: scripts with their sibling modules (benchmarks/paper/ included); not tests/ or examples/.
CHECKED = ("geohead", "benchmarks")


def checked_modules() -> list[Path]:
    """Every module of the folders in CHECKED, recursively."""
    return [p for folder in CHECKED for p in sorted((ROOT / folder).rglob("*.py"))]


def test_no_module_is_too_long() -> None:
    """One concept a module: none in geohead/ or benchmarks/ over 450 lines."""
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in checked_modules()}
    assert sum(p.startswith("geohead/") for p in sizes) > 40  # the walk found the package
    assert sum(p.startswith("benchmarks/") for p in sizes) > 30  # and the benchmarks,
    assert "benchmarks/paper/_common.py" in sizes  # their subfolders included
    too_long = {p: n for p, n in sizes.items() if n > MAX_LINES}
    assert not too_long, f"modules over {MAX_LINES} lines: {too_long}"


#: Functions that may run longer than MAX_BODY: the numerical kernel ``lanczos``
#: (the escape-curvature computation fits since its settings are one EscapeSettings).
LONG_KERNELS = {"geohead/geometry/lanczos.py:lanczos"}
MAX_BODY = 60


def function_bodies(path: Path) -> dict[str, int]:
    """``module:qualname`` -> lines of the function's body, its docstring excluded."""
    import ast

    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = child.body
                if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                        and isinstance(body[0].value.value, str):
                    body = body[1:]
                if body:
                    out[f"{prefix}{child.name}"] = body[-1].end_lineno - body[0].lineno + 1
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    visit(ast.parse(path.read_text()), "")
    return out


def test_functions_read_top_to_bottom() -> None:
    """No function body (docstring excluded) over 60 lines, in geohead/ or benchmarks/, but the
    numerical kernels."""
    long = {}
    for p in checked_modules():
        for name, n in function_bodies(p).items():
            key = f"{p.relative_to(ROOT).as_posix()}:{name}"
            if n > MAX_BODY and key not in LONG_KERNELS:
                long[key] = n
    assert not long, f"function bodies over {MAX_BODY} lines: {long}"
    # the walk measures: a 61-line body is caught
    sample = ROOT / "geohead" / "geometry" / "lanczos.py"
    assert function_bodies(sample)["lanczos"] > MAX_BODY


def _architecture_rows() -> list[tuple[str, str]]:
    """(modules column, what-each-owns column) of CONTRIBUTING.md's table."""
    section = (ROOT / "CONTRIBUTING.md").read_text()
    rows = [r.split("|")[1:-1] for r in section.splitlines() if r.startswith("| ") and not r.startswith("| layer")]
    return [(cells[1], cells[2]) for cells in rows if len(cells) == 3]


def test_readme_architecture_table_names_every_module() -> None:
    """Every top-level module and package is in the table's modules column, and every module of
    a package is named in what its row owns."""
    import re

    rows = _architecture_rows()
    assert rows, "no architecture table in CONTRIBUTING.md"
    named = {n.rstrip("/") for col, _ in rows for n in re.findall(r"`([\w/.]+)`", col)}
    pkg = ROOT / "geohead"
    top = {p.stem for p in pkg.glob("*.py") if not p.stem.startswith("_")} | \
          {p.name for p in pkg.iterdir() if (p / "__init__.py").is_file()}
    assert not top - named, f"top-level modules missing from CONTRIBUTING.md's table: {sorted(top - named)}"
    missing = {}
    for sub in sorted(p for p in pkg.iterdir() if (p / "__init__.py").is_file()):
        owns = " ".join(own for col, own in rows if f"`{sub.name}/`" in col or f"`{sub.name}`" in col)
        mods = {p.stem for p in sub.glob("*.py") if not p.stem.startswith("_")}
        words = set(re.findall(r"`(\w+)`", owns))
        if len(mods) > 1 and mods - words:
            missing[sub.name] = sorted(mods - words)
    assert not missing, f"modules CONTRIBUTING.md's table does not describe: {missing}"


def _layer_contract() -> list[list[str]]:
    """The layers of pyproject's layers contract, top first, each a list of module names."""
    import tomllib

    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in cfg["contracts"] if c["type"] == "layers"]
    return [[m.strip() for m in layer.replace(":", "|").split("|")] for layer in contract["layers"]]


def _component(module: str, named: set[str]) -> str | None:
    """The contract entry that owns ``module`` (its longest named prefix), None if unnamed."""
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in named:
            return ".".join(parts[:i])
    return None


def test_import_layers_match_the_real_imports() -> None:
    """The layers must be no looser than the code. Each entry of the contract sits at
    exactly its height in the import graph (1 + the highest entry it imports; 0 for one that
    imports none), so an entry placed above what it needs, or a module nobody placed, fails."""
    import functools

    import grimp

    layers = _layer_contract()
    named = {m for layer in layers for m in layer}
    graph = grimp.build_graph("geohead")
    unplaced = sorted(m for m in graph.modules if _component(m, named) is None
                      and m not in ("geohead", "geohead.training") and not m.endswith("__main__"))
    assert not unplaced, f"modules in no layer of pyproject's contract: {unplaced}"
    deps: dict[str, set[str]] = {c: set() for c in named}
    for m in graph.modules:
        src = _component(m, named)
        for target in graph.find_modules_directly_imported_by(m):
            dst = _component(target, named)
            if src and dst and dst != src:
                deps[src].add(dst)

    @functools.lru_cache(None)
    def height(c: str) -> int:
        return 1 + max((height(d) for d in deps[c]), default=-1)

    placed = {m: len(layers) - 1 - i for i, layer in enumerate(layers) for m in layer}
    wrong = {m: f"in layer {placed[m]} (from the bottom), imports reach {height(m)}"
             for m in sorted(named) if placed[m] != height(m)}
    assert not wrong, f"pyproject's layers disagree with the real imports: {wrong}"


def test_public_entry_points_keep_working() -> None:
    """The training application lives in geohead/training/; what users import stays."""
    import geohead
    import geohead.training
    from geohead.export import export_backbone, load_backbone
    from geohead.heads import GeometricHead, HeadSpec
    from geohead.integrations.lightning import GeometryCallback  # noqa: F401  (needs lightning)
    from geohead.monitor import GeometryMonitor  # noqa: F401
    from geohead.training.config import TrainConfig, load_recipe
    from geohead.training.loop import train

    assert (geohead.GeometricHead, geohead.HeadSpec) == (GeometricHead, HeadSpec)
    assert (geohead.export_backbone, geohead.load_backbone) == (export_backbone, load_backbone)
    assert (geohead.training.train, geohead.training.TrainConfig, geohead.training.load_recipe) == \
        (train, TrainConfig, load_recipe)
    with pytest.raises(AttributeError, match="module 'geohead.training' has no attribute 'nope'"):
        geohead.training.nope  # noqa: B018
