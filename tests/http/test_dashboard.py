"""``dashboards/magnetar.json`` imports as is and asks only for series the server exports:
every metric name in every query (panels and variables) is one a real standalone's
``/metrics`` declares."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from magnetar.testing.server import REPO, StandaloneProcess

DASHBOARD = REPO / "dashboards" / "magnetar.json"
# PromQL words that are not metric names
_WORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "inf",
    "nan",
}
_SUFFIXES = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"]}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a ``label_values(...)`` query) reads."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors
    text = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", text)  # groupings
    text = re.sub(r"label_values\(([^,()]+),[^)]*\)", r"\1", text)  # the label argument
    found = set()
    for match in re.finditer(r"(?<![\w:.])[A-Za-z_:][\w:]*", text):  # not inside 5m, 0.5
        word, rest = match.group(), text[match.end() :].lstrip()
        if rest.startswith("(") or word.lower() in _WORDS:
            continue  # a function or aggregation, or a keyword
        found.add(word)
    return found


def queries(dashboard: dict[str, Any]) -> list[str]:
    out = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", []) if t.get("expr")]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            out.append(var["query"]["query"])
    return out


def exported(server: StandaloneProcess) -> set[str]:
    with urllib.request.urlopen(server.http_url + "/metrics", timeout=30) as response:
        text = response.read().decode()
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(family.name + s for s in _SUFFIXES.get(family.type, []))
    return names


def test_the_name_parser_finds_metric_names_only() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, api) (rate(a_bucket{x=~"$y", b="c"}[5m]))) '
        '/ on (q) sum without (z) (b_total offset 5m) + label_values(c_size{k="v"}, topic)'
    )
    assert metric_names(expr) == {"a_bucket", "b_total", "c_size"}


def test_every_query_reads_a_series_the_server_exports(standalone: StandaloneProcess) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    wanted = set().union(*(metric_names(q) for q in queries(dashboard)))
    assert len(wanted) > 30
    assert wanted - exported(standalone) == set()


def test_the_dashboard_imports_as_is() -> None:
    """What Grafana's import needs: a title and uid, unique panel ids, a grid position for
    each panel, and every query bound to the dashboard's Prometheus data source variable."""
    dashboard = json.loads(Path(DASHBOARD).read_text())
    assert dashboard["title"] and dashboard["uid"] and dashboard["schemaVersion"] >= 30
    assert "id" not in dashboard  # an id would overwrite whichever dashboard has it
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in dashboard["panels"]:
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"])
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}"
