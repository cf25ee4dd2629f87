"""Fixtures for tiered storage: object stores (a local directory, S3 on a real moto server)
and an in-process rig of storage engine + managed ledger + tier.

The S3 store talks HTTP to ``moto.server.ThreadedMotoServer`` on a free loopback port: the
same S3 protocol pyarrow speaks to AWS, with dummy credentials.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from magnetar.core.config import Settings
from magnetar.testing.server import free_port
from magnetar.tier import LocalObjectStore, ObjectStore, S3ObjectStore
from tests.tier.rig import OpenRig, Rig, rig_settings

BACKENDS = ["local", "s3"]


# -- object stores --------------------------------------------------------------------------


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A real S3-protocol server (moto) on a free port, with dummy credentials set."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AWS_ACCESS_KEY_ID", "magnetar-test")
        env.setenv("AWS_SECRET_ACCESS_KEY", "magnetar-test-secret")
        env.setenv("AWS_REGION", "us-east-1")
        port = free_port()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.stop()


def make_bucket(endpoint: str) -> str:
    name = f"tier-{uuid.uuid4().hex[:12]}"
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_store(s3_endpoint: str) -> S3ObjectStore:
    """An S3 store on a fresh bucket of its own, under a key prefix."""
    return S3ObjectStore(make_bucket(s3_endpoint), "magnetar/tier", endpoint=s3_endpoint)


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    """Each ObjectStore backend in turn: the contract suite runs once per backend."""
    if request.param == "local":
        return LocalObjectStore(tmp_path / "objects")
    s3: ObjectStore = request.getfixturevalue("s3_store")
    return s3


# -- the in-process rig -----------------------------------------------------------------------


@pytest.fixture
async def open_rig(tmp_path: Path) -> AsyncIterator[OpenRig]:
    """Opens rigs on ``tmp_path/data`` (the tier in ``tmp_path/tier`` unless a store is
    given; row groups of 4 rows); closes every one still open at the end."""
    opened: list[Rig] = []

    async def _open(
        store: ObjectStore | None = None,
        row_group_rows: int = 4,
        settings: Settings | None = None,
        **overrides: Any,
    ) -> Rig:
        settings = settings or rig_settings(tmp_path / "data", **overrides)
        rig = await Rig.open(settings, store or LocalObjectStore(tmp_path / "tier"), row_group_rows)
        opened.append(rig)
        return rig

    yield _open
    for rig in reversed(opened):
        await rig.aclose()
