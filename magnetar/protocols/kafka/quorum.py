"""DescribeQuorum (API 55, v0-2): the metadata quorum as Magnetar has it.

Magnetar keeps no KRaft log: its metadata lives in the metadata store (a local store in
standalone mode, ZooKeeper in a cluster). The answer describes what a client may rely on:
``__cluster_metadata`` partition 0 led by the broker Metadata names as controller (the lowest
live node id), every live broker a voter, leader epoch 0 (no election ever happened),
high watermark 0 (no metadata record was ever written to a Kafka log) and log end offsets
-1 ("unknown", the value Kafka gives a voter it knows nothing of). Other topics or
partitions are UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers.
"""

from __future__ import annotations

import uuid
from typing import Any

from magnetar.protocols.kafka import admin
from magnetar.protocols.kafka.errors import ErrorCode
from magnetar.protocols.kafka.service import Service, Session
from magnetar.protocols.kafka.wire import Request

METADATA_TOPIC = "__cluster_metadata"
_NO_DIRECTORY = uuid.UUID(int=0)
Response = dict[str, Any]


async def describe_quorum(svc: Service, session: Session, req: Request) -> Response:
    brokers = await admin.live_brokers(svc, session)
    leader = admin.controller_id(svc, brokers)
    voters = [_voter(int(b["node_id"])) for b in brokers]
    topics = []
    for t in req.body.topics:
        parts = [
            _partition(p.partition_index, leader, voters)
            if t.topic_name == METADATA_TOPIC and p.partition_index == 0
            else _unknown(p.partition_index)
            for p in t.partitions
        ]
        topics.append({"topic_name": t.topic_name, "partitions": parts})
    listener = "SSL" if session.tls else "PLAINTEXT"
    nodes = [
        {"node_id": b["node_id"],
         "listeners": [{"name": listener, "host": b["host"], "port": b["port"]}]}
        for b in brokers
    ]  # fmt: skip
    return {"error_code": 0, "error_message": None, "topics": topics, "nodes": nodes}


def _voter(node_id: int) -> Response:
    return {"replica_id": node_id, "replica_directory_id": _NO_DIRECTORY, "log_end_offset": -1,
            "last_fetch_timestamp": -1, "last_caught_up_timestamp": -1}  # fmt: skip


def _partition(index: int, leader: int, voters: list[Response]) -> Response:
    return {"partition_index": index, "error_code": 0, "error_message": None,
            "leader_id": leader, "leader_epoch": 0, "high_watermark": 0,
            "current_voters": voters, "observers": []}  # fmt: skip


def _unknown(index: int) -> Response:
    return {"partition_index": index, "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            "error_message": f"only {METADATA_TOPIC} partition 0 has a quorum",
            "leader_id": -1, "leader_epoch": -1, "high_watermark": -1, "current_voters": [],
            "observers": []}  # fmt: skip
