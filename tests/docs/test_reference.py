"""docs/cli.md and docs/configuration.md are what ``magnetar.cli.reference`` builds from the
parser and the settings: a new flag or setting without its page update fails here
(``python -m magnetar.cli.reference`` rewrites them)."""

from __future__ import annotations

import dataclasses

import pytest

from magnetar.cli.reference import PAGES, configuration_page
from magnetar.core.config import Settings
from magnetar.testing.server import REPO


@pytest.mark.parametrize("name", sorted(PAGES))
def test_the_reference_page_is_current(name: str) -> None:
    committed = (REPO / "docs" / name).read_text()
    assert committed == PAGES[name](), f"docs/{name} is stale: python -m magnetar.cli.reference"


def test_every_setting_has_a_flag_a_variable_a_key_and_a_meaning() -> None:
    page = configuration_page()
    for f in dataclasses.fields(Settings):
        row = next(line for line in page.splitlines() if line.startswith(f"| `{f.name}` |"))
        _key, flag, env, _default, meaning = (c.strip() for c in row.strip("|").split(" | "))
        assert flag.startswith("`--"), f"{f.name} has no flag"
        assert env == f"`MAGNETAR_{f.name.upper()}`"
        assert meaning, f"{f.name} says nothing about what it does"
