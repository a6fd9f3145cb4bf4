"""``__consumer_offsets`` under ACLs, as Kafka applies them: reading it takes READ on the
internal topic (lag tools are granted it), and no principal, the super user included, may
write to it."""

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AclOperation, AdminClient, NewTopic, ResourceType

from kafscale.protocol.group_records import offsets_partition, parse_key
from tests.security.conftest import ADMIN
from tests.security.test_acls_and_tls import _allow, _create_user


def _read_first(config: dict, group: str) -> tuple[KafkaError | None, tuple | None]:
    """The first error, or the first offset commit key, reading the group's partition."""
    errors: list[KafkaError] = []
    consumer = Consumer({**config, "group.id": "lag-tool", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "error_cb": errors.append})
    try:
        consumer.assign([TopicPartition("__consumer_offsets", offsets_partition(group, 50), 0)])
        for _ in range(20):
            message = consumer.poll(1)
            if message is not None and message.error():
                errors.append(message.error())
            if errors:
                return errors[0], None
            if message is not None and len(key := parse_key(message.key()) or ()) == 3:
                return None, key
        return None, None
    finally:
        consumer.close()


@pytest.mark.parametrize("granted", [False, True])
def test_reading_consumer_offsets_takes_read_on_it(secure_gateway, granted):
    group = "acl-offsets-group"
    admin_config = secure_gateway.sasl_config()
    admin = AdminClient(admin_config)
    for future in admin.create_topics([NewTopic("acl-offsets", 1, 1)]).values():
        try:
            future.result(10)
        except KafkaException:
            pass  # made by the other parametrization
    committer = Consumer({**admin_config, "group.id": group})
    try:
        committer.commit(offsets=[TopicPartition("acl-offsets", 0, 5)], asynchronous=False)
    finally:
        committer.close()
    user = "lagreader-yes" if granted else "lagreader-no"
    _create_user(secure_gateway, user, "pw")
    bindings = [_allow(f"User:{user}", ResourceType.GROUP, "lag-tool", AclOperation.READ),  # its own group
                _allow(f"User:{user}", ResourceType.TOPIC, "__consumer_offsets", AclOperation.DESCRIBE)]
    if granted:
        bindings.append(_allow(f"User:{user}", ResourceType.TOPIC, "__consumer_offsets", AclOperation.READ))
    for future in admin.create_acls(bindings).values():
        future.result(10)
    error, key = _read_first(secure_gateway.sasl_config(user, "pw"), group)
    if granted:
        assert error is None and key == (group, "acl-offsets", 0)
    else:
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_no_one_writes_to_consumer_offsets(secure_gateway):
    producer = Producer({**secure_gateway.sasl_config(), "retries": 0, "enable.idempotence": False})
    errors: list = []
    producer.produce("__consumer_offsets", value=b"forged", partition=0, on_delivery=lambda e, m: errors.append(e))
    producer.flush(10)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.TOPIC_EXCEPTION, (ADMIN, errors)
