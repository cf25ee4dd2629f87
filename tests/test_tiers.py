"""A package imports only from tiers below it (DESIGN.md). This test keeps it so."""

from __future__ import annotations

import ast
from pathlib import Path

import magnetar

ROOT = Path(magnetar.__file__).parent

# Storage sits above meta because it keeps its segment lists in the metadata store.
TIERS = {
    "core": 0,
    "meta": 1,
    "storage": 2,
    "tier": 3,
    "cluster": 4,
    "ledger": 4,
    "broker": 5,
    "protocols": 6,
    "http": 6,
    "spark": 7,
    "views": 8,
    "cli": 10,
    "standalone": 9,
    "testing": 10,
}


def _package_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "magnetar" else None


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return found


def _violations() -> list[str]:
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] == "__init__.py":
            continue
        own = rel.parts[0].removesuffix(".py")
        for module in _imports(path):
            other = _package_of(module)
            if other is None or other == own:
                continue
            if other not in TIERS:
                bad.append(f"{rel}: imports unknown package magnetar.{other}")
            elif TIERS[other] >= TIERS[own]:
                bad.append(f"{rel} (tier {TIERS[own]}) imports {module} (tier {TIERS[other]})")
    return bad


def test_every_package_has_a_tier() -> None:
    packages = {p.name.removesuffix(".py") for p in ROOT.iterdir() if not p.name.startswith("_")}
    packages.discard("py.typed")
    assert packages <= set(TIERS), f"packages without a tier: {packages - set(TIERS)}"


def test_imports_only_go_down() -> None:
    assert _violations() == []


def test_the_check_catches_an_upward_import(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text("from magnetar.broker import thing\nimport magnetar.storage.engine\n")
    assert _imports(sample) == ["magnetar.broker", "magnetar.storage.engine"]
    assert _package_of("magnetar.broker") == "broker"


# The seams the cluster rests on (DESIGN.md decision 8): the broker reaches storage and the
# object store only through the managed ledger; the protocol packages meet only in the
# conversion module. Pairs are (importing file prefix, imported module prefix).
SEAMS = [("broker/", "magnetar.storage"), ("broker/", "magnetar.tier")]
CONVERSION = "protocols/kafka/conversion.py"


def _seam_violations() -> list[str]:
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for module in _imports(path):
            for prefix, forbidden in SEAMS:
                if rel.startswith(prefix) and module.startswith(forbidden):
                    bad.append(f"{rel} imports {module} (below the managed ledger)")
            if rel.startswith("protocols/") and module.startswith("magnetar.protocols."):
                mine, theirs = rel.split("/")[1], module.split(".")[2]
                if mine != theirs and CONVERSION not in (rel, _module_file(module)):
                    bad.append(f"{rel} imports {module}: protocols meet only in {CONVERSION}")
    return bad


def _module_file(module: str) -> str:
    return module.removeprefix("magnetar.").replace(".", "/") + ".py"


def test_the_seams_hold() -> None:
    assert _seam_violations() == []
