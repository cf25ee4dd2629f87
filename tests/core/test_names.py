"""The name rules every entry point applies (magnetar.core.names), checked without a server:
what is accepted, what is refused, and that each refusal says what is wrong and what is
allowed."""

from __future__ import annotations

import pytest

from magnetar.core.errors import InvalidNameError
from magnetar.core.names import (
    KAFKA_MAX_TOPIC_LENGTH,
    MAX_NAME_LENGTH,
    MAX_TOPIC_LENGTH,
    TopicName,
    check_kafka_topic,
    check_namespace,
    check_part,
    check_tenant,
    check_topic,
    parse_namespace,
)

# names Pulsar users write, with every punctuation mark Pulsar's NamedEntity allows
VALID = ["public", "my-tenant", "a_b", "k=v", "c:d", "v1.2", ".hidden", "...", "A9", "x" * 255]
# what must never become a metadata node or a directory, and why
INVALID = {
    "": "cannot be empty",
    ".": "'.' is a directory",
    "..": "'..' is a directory",
    "%2E%2E": "'%' is not allowed",
    "a/b": "'/' is not allowed",
    "a\\b": "'\\\\' is not allowed",
    "a\x00b": "'\\x00' is not allowed",
    "tab\there": "'\\t' is not allowed",
    "line\nbreak": "'\\n' is not allowed",
    "del\x7f": "'\\x7f' is not allowed",
    "café": "'é' is not allowed",
    "日本": "'日' is not allowed",
    "a b": "' ' is not allowed",
    "x" * 10_000: "10000 characters, longer than the limit of 255",
    "x" * 256: "256 characters, longer than the limit of 255",
}
RULE = "characters among ASCII letters, digits and _ - = : ., and not '.' or '..'"


@pytest.mark.parametrize("name", VALID)
def test_pulsar_names_are_accepted_as_tenant_and_namespace(name: str) -> None:
    assert check_tenant(name) == name
    assert check_namespace(name) == name
    assert parse_namespace(f"{name}/{name}") == (name, name)


@pytest.mark.parametrize("name", INVALID, ids=lambda n: repr(n[:12]))
@pytest.mark.parametrize("kind", ["tenant", "namespace"])
def test_a_bad_part_is_refused_saying_what_is_wrong_and_what_is_allowed(
    kind: str, name: str
) -> None:
    check = check_tenant if kind == "tenant" else check_namespace
    with pytest.raises(InvalidNameError) as info:
        check(name)
    message = str(info.value)
    assert message.startswith(f"invalid {kind} name ")
    assert INVALID[name] in message
    assert f"1 to {MAX_NAME_LENGTH} {RULE}" in message
    assert len(message) < 400  # a 10,000-character name is cut short in the message


@pytest.mark.parametrize("name", INVALID, ids=lambda n: repr(n[:12]))
def test_a_topic_with_a_bad_part_anywhere_is_refused(name: str) -> None:
    for text in (
        f"persistent://{name}/default/t",
        f"persistent://public/{name}/t",
        f"persistent://public/default/{name}",
        f"{name}/default/t",
    ):
        with pytest.raises(InvalidNameError, match=r"invalid (tenant|namespace|topic) name"):
            TopicName.parse(text)


def test_the_escape_of_issue_12_is_refused() -> None:
    with pytest.raises(InvalidNameError, match=r"invalid tenant name '\.\.'"):
        TopicName.parse("persistent://../../ESCAPED")
    with pytest.raises(InvalidNameError, match="expected"):
        TopicName.parse("persistent://public/default/../../../ESCAPED")


def test_a_name_that_is_not_utf8_text_is_refused() -> None:
    # protobuf hands a string field that is not UTF-8 over as bytes
    with pytest.raises(InvalidNameError, match="not UTF-8 text"):
        TopicName.parse(b"persistent://public/default/\xff\xfe")
    with pytest.raises(InvalidNameError, match="not UTF-8 text"):
        parse_namespace(b"public/\xff")


def test_a_part_holding_a_slash_is_refused() -> None:
    with pytest.raises(InvalidNameError, match="no '/' inside a part"):
        TopicName.parse("persistent://public/default/a/b")
    with pytest.raises(InvalidNameError, match="no '/' inside a part"):
        parse_namespace("public/default/x")


def test_valid_topics_parse_as_before() -> None:
    name = TopicName.parse("persistent://my-tenant/ns.v1/orders=eu:2-partition-3")
    assert (name.tenant, name.namespace, name.local) == (
        "my-tenant",
        "ns.v1",
        "orders=eu:2-partition-3",
    )
    assert name.partition == 3 and name.base_local == "orders=eu:2"
    assert str(TopicName.parse("events")) == "persistent://public/default/events"
    assert TopicName.parse("non-persistent://public/default/t").domain == "non-persistent"


def test_a_topic_leaves_room_for_its_partition_suffix() -> None:
    longest = "t" * MAX_TOPIC_LENGTH
    assert MAX_TOPIC_LENGTH == 234  # 255 - len("-partition-") - 10 digits
    name = TopicName.parse(longest)
    last = name.partition_name(2**31 - 1)
    assert len(last.local) == MAX_NAME_LENGTH
    assert TopicName.parse(str(last)) == last
    with pytest.raises(InvalidNameError, match="235 characters, longer than the limit of 234"):
        TopicName.parse(longest + "t")
    with pytest.raises(InvalidNameError, match="longer than the limit of 234"):
        check_topic(longest + "t-partition-0")
    with pytest.raises(InvalidNameError, match="longer than the limit of 255"):
        check_topic(longest + "-partition-" + "9" * 11)


def test_subscriptions_follow_the_same_characters() -> None:
    assert check_part("subscription", "sub-1:a=b") == "sub-1:a=b"
    with pytest.raises(InvalidNameError, match="invalid subscription name 'a#b'"):
        check_part("subscription", "a#b")


@pytest.mark.parametrize("topic", ["orders", "a.b_c-d", "__group-abc", "x" * MAX_TOPIC_LENGTH])
def test_kafka_topics_kafka_allows(topic: str) -> None:
    assert check_kafka_topic(topic) == topic


@pytest.mark.parametrize(
    ("topic", "problem"),
    [
        ("", "cannot be empty"),
        (".", "'.' is a directory"),
        ("..", "'..' is a directory"),
        ("a:b", "':' is not allowed"),  # Pulsar allows ':' and '=', Kafka does not
        ("a=b", "'=' is not allowed"),
        ("a/b", "'/' is not allowed"),
        ("a\x00", "'\\x00' is not allowed"),
        ("ü", "'ü' is not allowed"),
        ("x" * (KAFKA_MAX_TOPIC_LENGTH + 1), "longer than the limit of 249"),
        ("x" * KAFKA_MAX_TOPIC_LENGTH, "longer than the limit of 234"),  # Magnetar's own
    ],
)
def test_kafka_topics_kafka_refuses(topic: str, problem: str) -> None:
    with pytest.raises(InvalidNameError, match="invalid topic name") as info:
        check_kafka_topic(topic)
    assert problem in str(info.value)
