"""The ``kafka.*`` options that say how to reach the gateways (Kafka's client settings by
their Kafka names), for the sink and for the source's progress commits."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kafscale.kafka_client import Cluster, Security
from kafscale.kafka_client.security import SecurityError, credentials_from_jaas

from .errors import OptionError

__all__ = ["ClientSettings", "parse_client_settings", "CLIENT_OPTIONS"]

CLIENT_OPTIONS = frozenset({
    "kafka.bootstrap.servers", "kafka.security.protocol", "kafka.sasl.mechanism", "kafka.sasl.jaas.config",
    "kafka.sasl.username", "kafka.sasl.password", "kafka.ssl.ca.location", "kafka.ssl.certificate.location",
    "kafka.ssl.key.location", "kafka.ssl.endpoint.identification.algorithm", "kafka.client.id",
})


@dataclass(frozen=True)
class ClientSettings:
    bootstrap_servers: str
    security: Security = Security()
    client_id: str = "kafscale-spark"

    def cluster(self, timeout_s: float = 30.0) -> Cluster:
        return Cluster(self.bootstrap_servers, self.security, timeout_s=timeout_s, client_id=self.client_id)


def parse_client_settings(lowered: Mapping[str, str], default_client_id: str) -> ClientSettings:
    """From options already lowercased; ``kafka.bootstrap.servers`` must be there."""
    username, password = lowered.get("kafka.sasl.username"), lowered.get("kafka.sasl.password")
    try:
        if "kafka.sasl.jaas.config" in lowered:
            username, password = credentials_from_jaas(lowered["kafka.sasl.jaas.config"])
        security = Security(
            protocol=lowered.get("kafka.security.protocol", "PLAINTEXT").upper(),
            mechanism=lowered.get("kafka.sasl.mechanism", "PLAIN").upper(),
            username=username, password=password, ca_file=lowered.get("kafka.ssl.ca.location"),
            cert_file=lowered.get("kafka.ssl.certificate.location"), key_file=lowered.get("kafka.ssl.key.location"),
            check_hostname=lowered.get("kafka.ssl.endpoint.identification.algorithm", "https").lower() == "https")
    except SecurityError as exc:
        raise OptionError(str(exc)) from exc
    return ClientSettings(lowered["kafka.bootstrap.servers"], security,
                          lowered.get("kafka.client.id", default_client_id))
