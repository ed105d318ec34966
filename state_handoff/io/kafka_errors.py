"""A Kafka client that cannot connect, classified once where it happens: the broker refused the credentials (refused,
exit 2: the settings must change) or none answers now (not now, exit 75: retry)."""

from __future__ import annotations

from switchyard.state_handoff.errors import NotNow, UserError
from switchyard.state_handoff.io import kafka_security


def unreachable(bootstrap: str, error: Exception) -> UserError:
    """A client that cannot connect: a broker that refused these credentials (refused: the settings must change), or
    none reachable now (not now: a broker restarting, a network away; also a refusal the client could not tell from a
    failed connection)."""
    said = (f"cannot connect to Kafka at {bootstrap} as a {kafka_security.from_env().describe()} client "
            f"({type(error).__name__})")
    if _refused_credentials(error):
        return UserError(f"{said}: the broker refused the credentials: check the SWITCHYARD_KAFKA_* settings")
    return NotNow(f"{said}: start a broker with `switchyard dev kafka start`, or check --bootstrap and the "
                  "SWITCHYARD_KAFKA_* settings")


def _refused_credentials(error: Exception) -> bool:
    """A broker's answer that the client's credentials are refused: kafka-python's authentication errors, or
    librdkafka's (confluent-kafka) authentication codes."""
    from kafka.errors import AuthorizationError, SaslAuthenticationFailedError, UnsupportedSaslMechanismError

    if isinstance(error, (SaslAuthenticationFailedError, UnsupportedSaslMechanismError, AuthorizationError)):
        return True
    code = getattr(error.args[0], "code", None) if getattr(error, "args", None) else None
    if callable(code):
        from confluent_kafka import KafkaError

        return code() in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED)
    return False
