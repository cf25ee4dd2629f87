"""Requests for APIs this server does not serve get UNSUPPORTED_VERSION (35) in the API's own
response format where it has an error code, instead of a closed connection the client retries
(issue 23, item 6); ApiVersions stays truthful, so the admin clients refuse unserved calls at
once with a clear error."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from magnetar.protocols.kafka import wire
from tests.kafka.conftest import TIMEOUT_S, RawKafka

from kafka.protocol.admin import (  # isort: skip
    DescribeClusterRequest,
    DescribeProducersRequest,
    ListTransactionsRequest,
)
from kafka.protocol.metadata import ApiVersionsRequest  # isort: skip

UNSUPPORTED_VERSION = 35
UNSERVED = [
    DescribeClusterRequest[0](include_cluster_authorized_operations=False),
    ListTransactionsRequest[0](state_filters=[], producer_id_filters=[]),
]


@pytest.mark.parametrize("request_", UNSERVED, ids=lambda r: type(r).__name__)
def test_an_unserved_api_is_answered_unsupported_version(raw: RawKafka, request_: Any) -> None:
    answer = raw.request(request_)
    assert answer.error_code == UNSUPPORTED_VERSION
    # The connection stays usable.
    versions = raw.request(ApiVersionsRequest[2]())
    assert versions.error_code == 0
    advertised = {k.api_key for k in versions.api_keys}
    assert request_.API_KEY not in advertised
    assert advertised == set(wire.SUPPORTED)


def test_a_response_without_an_error_code_still_closes(raw: RawKafka, topic: str) -> None:
    """DescribeProducers answers per partition only: with nothing to carry the error, the
    connection closes, as Kafka does."""
    Topic = DescribeProducersRequest.TopicRequest
    request = DescribeProducersRequest[0](topics=[Topic(name=topic, partition_indexes=[0])])
    request.with_header(correlation_id=1, client_id="raw-test")
    raw.send_bytes(bytes(request.encode(framed=True, header=True)))
    assert raw.read_frame() is None


def test_confluent_admin_scram_listing_is_served(bootstrap: str) -> None:
    """DescribeUserScramCredentials was this test's unserved admin API; it is served now
    (issue 16), and every other AdminClient call maps to a served API: an open node
    answers with no users."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert admin.describe_user_scram_credentials().result(TIMEOUT_S) == {}
