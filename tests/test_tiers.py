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
    "cluster": 5,
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
# Replicated storage implements the managed ledger's segment interface and is driven by its
# writer (through the LedgerStorage it shares with local storage, ``segmented``); it never
# reaches the ledger above that (offload, cursors, the tier).
LEDGER_SEAM = (
    "magnetar.ledger.segment_storage",
    "magnetar.ledger.writer",
    "magnetar.ledger.segmented",
)
CONVERSION = "protocols/kafka/conversion.py"


def _seam_violations() -> list[str]:
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for module in _imports(path):
            for prefix, forbidden in SEAMS:
                if rel.startswith(prefix) and module.startswith(forbidden):
                    bad.append(f"{rel} imports {module} (below the managed ledger)")
            if (
                rel.startswith("cluster/")
                and module.startswith("magnetar.ledger")
                and module not in LEDGER_SEAM
            ):
                bad.append(f"{rel} imports {module}: cluster meets the ledger in {LEDGER_SEAM}")
            if rel.startswith("protocols/") and module.startswith("magnetar.protocols."):
                mine, theirs = rel.split("/")[1], module.split(".")[2]
                if mine != theirs and CONVERSION not in (rel, _module_file(module)):
                    bad.append(f"{rel} imports {module}: protocols meet only in {CONVERSION}")
    return bad


def _module_file(module: str) -> str:
    return module.removeprefix("magnetar.").replace(".", "/") + ".py"


def test_the_seams_hold() -> None:
    assert _seam_violations() == []


# Above the broker (protocol servers, http, views, Spark) topics and metadata are reached only
# through the broker's typed calls (Topic.read / end_offset / message_id / segments …,
# Broker.partitioned_topics / records / leases …): never the managed ledger, the metadata
# store or storage, so the ledger beneath can become remote without changing them.
ABOVE_BROKER = ("protocols/", "http/", "views/", "spark/")
BELOW_BROKER = ("magnetar.ledger", "magnetar.meta", "magnetar.storage", "magnetar.tier")
HIDDEN_ATTRIBUTES = {"ledger", "meta"}
# The Arrow layout of history rows (pure codecs: entries ↔ Arrow) is the read contract of
# DESIGN.md decisions 4-5, shared by offload, Flight and the Spark source; Spark also reads
# offloaded objects straight from the object store (decision 5).
LAYOUT = ("magnetar.tier.parquet", "magnetar.tier.rows")
DIRECT_READS = {"spark/": ("magnetar.tier.object_store",)}


def _above_broker_violations(path: Path, rel: str) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    bad = []
    allowed = LAYOUT + next((v for k, v in DIRECT_READS.items() if rel.startswith(k)), ())
    for module in _imports(path):
        if module.startswith(BELOW_BROKER) and not module.startswith(allowed):
            bad.append(f"{rel} imports {module}: reach it through magnetar.broker")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in HIDDEN_ATTRIBUTES:
            bad.append(f"{rel}:{node.lineno} reads .{node.attr}: use the broker's typed calls")
    return bad


def _all_above_broker_violations() -> list[str]:
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(ABOVE_BROKER):
            bad += _above_broker_violations(path, rel)
    return bad


def test_nothing_above_the_broker_reaches_the_ledger_or_metadata() -> None:
    assert _all_above_broker_violations() == []


def test_the_check_catches_a_reach_below_the_broker(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text(
        "from magnetar.meta import MetadataStore\n"
        "import magnetar.storage.engine\n"
        "from magnetar.tier.parquet import SCHEMA\n"
        "from magnetar.tier.object_store import open_object_store\n"
        "end = topic.ledger.end_offset\n"
        "names = broker.meta.list_children('/admin/partitioned/public/default')\n"
    )
    found = _above_broker_violations(sample, "http/x.py")
    assert found == [
        "http/x.py imports magnetar.meta: reach it through magnetar.broker",
        "http/x.py imports magnetar.storage.engine: reach it through magnetar.broker",
        "http/x.py imports magnetar.tier.object_store: reach it through magnetar.broker",
        "http/x.py:5 reads .ledger: use the broker's typed calls",
        "http/x.py:6 reads .meta: use the broker's typed calls",
    ]
    assert len(_above_broker_violations(sample, "spark/x.py")) == 4  # direct reads allowed
