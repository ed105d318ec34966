"""OAUTHBEARER logins with an OpenID Connect provider (OAuth 2 client credentials), as a Kafka client properties
file gives them to the Java client (Spark's), mapped to switchyard's Python clients: confluent-kafka asks the token
endpoint itself (librdkafka's `oidc` method); kafka-python is given a token provider that does."""

from __future__ import annotations

import base64
import functools
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from kafka.sasl.oauth import AbstractTokenProvider

from switchyard.state_handoff.errors import UserError

LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
LOGIN_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
TOKEN_URL = "sasl.oauthbearer.token.endpoint.url"
# a token is asked for again this long before it expires
REFRESH_BEFORE_S = 60.0


@dataclass(frozen=True)
class ClientCredentials:
    """Where the tokens come from and who asks: the token endpoint, the client's id and secret, the scope."""

    token_url: str
    client_id: str
    client_secret: str
    scope: str | None = None

    def librdkafka_config(self) -> dict[str, str]:
        return {"sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
                "sasl.oauthbearer.client.id": self.client_id, "sasl.oauthbearer.client.secret": self.client_secret,
                "sasl.oauthbearer.token.endpoint.url": self.token_url,
                **({"sasl.oauthbearer.scope": self.scope} if self.scope else {})}


def from_properties(properties: dict[str, str], jaas: dict[str, str], path: str) -> ClientCredentials:
    """The client credentials a properties file's OAUTHBEARER login names; a one-line error naming what is missing."""
    missing = [name for name, given in ((TOKEN_URL, properties.get(TOKEN_URL)),
                                        ('clientId="..." in sasl.jaas.config', jaas.get("clientId")),
                                        ('clientSecret="..." in sasl.jaas.config', jaas.get("clientSecret")))
               if not given]
    if missing:
        raise UserError(f"SWITCHYARD_KAFKA_PROPERTIES={path}: sasl.mechanism=OAUTHBEARER needs {', '.join(missing)} "
                        "(an OpenID Connect client-credentials login, with sasl.login.callback.handler.class="
                        f"{LOGIN_HANDLER})")
    return ClientCredentials(properties[TOKEN_URL], jaas["clientId"], jaas["clientSecret"], jaas.get("scope"))


@functools.lru_cache(maxsize=None)
def token_provider(credentials: ClientCredentials) -> TokenProvider:
    """One provider per login for the process: every kafka-python client of it shares the token."""
    return TokenProvider(credentials)


class TokenProvider(AbstractTokenProvider):
    """kafka-python's token source: a client-credentials grant at the token endpoint, the token kept until shortly
    before it expires."""

    def __init__(self, credentials: ClientCredentials, timeout_s: float = 30.0):
        super().__init__()
        self.credentials, self.timeout_s = credentials, timeout_s
        self._token: str | None = None
        self._expires = 0.0
        self._lock = threading.Lock()

    def token(self) -> str:
        with self._lock:
            if self._token is None or time.monotonic() >= self._expires - REFRESH_BEFORE_S:
                self._token, lifetime = self._fetch()
                self._expires = time.monotonic() + lifetime
            return self._token

    def _fetch(self) -> tuple[str, float]:
        c = self.credentials
        body = urllib.parse.urlencode({"grant_type": "client_credentials", **({"scope": c.scope} if c.scope else {})})
        basic = base64.b64encode(f"{c.client_id}:{c.client_secret}".encode())  # as Kafka's Java client sends it
        request = urllib.request.Request(c.token_url, data=body.encode(), method="POST", headers={
            "Authorization": f"Basic {basic.decode()}", "Content-Type": "application/x-www-form-urlencoded",
            "Accept": "application/json", "User-Agent": "switchyard kafka-python"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as err:
            raise UserError(f"the token endpoint {c.token_url} refused client {c.client_id}: HTTP {err.code} "
                            f"{err.read()[:200].decode(errors='replace')}") from None
        except (urllib.error.URLError, OSError) as err:
            raise UserError(f"the token endpoint {c.token_url} did not answer: {err}") from None
        return answer["access_token"], float(answer.get("expires_in", 300))
