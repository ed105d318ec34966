"""An OpenID Connect identity provider for tests, on 127.0.0.1: the OAuth 2 client-credentials token endpoint a
Kafka platform's clients ask for tokens (RS256-signed JWTs) and the JWKS endpoint its brokers check them against.
It counts the tokens it issued per client and User-Agent, so a test sees which clients logged in through it."""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from switchyard.deploy.local_server import free_port

AUDIENCE = "kafka"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _number(n: int) -> str:
    return _b64(n.to_bytes((n.bit_length() + 7) // 8, "big"))


@dataclass
class IdentityProvider:
    """Clients by id and secret; `issued` counts the tokens given, by (client id, the caller's User-Agent)."""

    clients: dict[str, str]
    lifetime_s: int = 3600
    port: int = field(default_factory=free_port)
    issued: Counter = field(default_factory=Counter)

    def __post_init__(self):
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = uuid.uuid4().hex[:8]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token_url(self) -> str:
        return f"{self.base}/token"

    @property
    def jwks_url(self) -> str:
        return f"{self.base}/jwks"

    def jwks(self) -> dict:
        numbers = self.key.public_key().public_numbers()
        return {"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": self.kid, "n": _number(numbers.n),
                          "e": _number(numbers.e)}]}

    def token(self, client: str, scope: str | None) -> str:
        now = int(time.time())
        header = {"alg": "RS256", "typ": "JWT", "kid": self.kid}
        claims = {"iss": self.base, "sub": client, "aud": AUDIENCE, "iat": now, "exp": now + self.lifetime_s,
                  **({"scope": scope} if scope else {})}
        signing = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        signature = self.key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing}.{_b64(signature)}"

    def __enter__(self) -> IdentityProvider:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _reply(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/jwks":
                    self._reply(200, provider.jwks())
                else:
                    self._reply(404, {"error": "not_found"})

            def do_POST(self):
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(int(self.headers["Content-Length"] or 0))
                                                     .decode()).items()}
                client, secret = form.get("client_id"), form.get("client_secret")
                basic = self.headers.get("Authorization", "")
                if basic.startswith("Basic "):
                    client, _, secret = base64.b64decode(basic[6:]).decode().partition(":")
                if self.path != "/token" or form.get("grant_type") != "client_credentials":
                    return self._reply(400, {"error": "unsupported_grant_type"})
                if provider.clients.get(client) != secret:
                    return self._reply(401, {"error": "invalid_client"})
                provider.issued[(client, self.headers.get("User-Agent", ""))] += 1
                self._reply(200, {"access_token": provider.token(client, form.get("scope")), "token_type": "Bearer",
                                  "expires_in": provider.lifetime_s})

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
