"""The Java client (kafka-clients 4.3.0) over SASL_SSL with SCRAM-SHA-512 and the gateway's
PEM CA: admin, an idempotent producer and a consumer group, as the super user."""

import pytest

from tests.security.conftest import ADMIN, ADMIN_PASSWORD
from tests.support import java_client

pytestmark = pytest.mark.skipif(
    not java_client.installed() and not __import__("os").environ.get("CI"),
    reason="the Java client is not installed (scripts/test.sh installs it; in CI its absence fails)",
)


def test_sasl_ssl_scram_admin_produce_and_consume(secure_gateway):
    properties = {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                            f'username="{ADMIN}" password="{ADMIN_PASSWORD}";',
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(secure_gateway.pki.ca.cert_path),
    }
    admin = java_client.run("admin", secure_gateway.sasl_ssl, "java-secure", properties=properties)
    assert (admin["by_id_name"], admin["deleted"]) == ("java-secure", "true")
    java_client.run("produce", secure_gateway.sasl_ssl, "java-sasl", "30", "idempotent", "zstd", properties=properties)
    read = java_client.run("consume", secure_gateway.sasl_ssl, "java-sasl", "java-sasl-group", "30", "read_committed",
                           "-", properties=properties)
    assert read["count"] == "30"
