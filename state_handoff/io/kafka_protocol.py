"""What a Kafka security protocol's name says, shared by both ways a connection is given: the SWITCHYARD_KAFKA_*
settings (kafka_security.py) and a client properties file (kafka_properties.py)."""

from __future__ import annotations


class Protocol:
    """What a security protocol's name says: SASL and/or TLS."""

    protocol: str

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def ssl(self) -> bool:
        return self.protocol.endswith("SSL")
