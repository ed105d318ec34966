"""A subject's writer schemas from a Confluent-compatible schema registry (SWITCHYARD_SCHEMA_REGISTRY_URL, with
SWITCHYARD_SCHEMA_REGISTRY_USER_INFO for basic authentication), read over its REST API with the standard library.

A registered version never changes, so each is fetched once per process; the list of a subject's versions is read
again by every call, so a plan built later sees versions registered since. A subject this process has read versions
of that then answers 404 was deleted: refused in one line (its records would all be dead-lettered), not warned of."""

from __future__ import annotations

import base64
import json
import logging
import urllib.error
import urllib.request
from dataclasses import dataclass
from urllib.parse import quote, urlsplit, urlunsplit

from switchyard.state_handoff import settings
from switchyard.state_handoff.errors import NotNow, UserError

logger = logging.getLogger(__name__)

TIMEOUT_S = 30
ACCEPT = "application/vnd.schemaregistry.v1+json"


@dataclass(frozen=True)
class Version:
    """One registered version of a subject: its global `id` (what a record's header carries) and the schema."""

    subject: str
    version: int
    id: int
    schema: str
    schema_type: str = "AVRO"


_VERSIONS: dict[tuple[str, str, int], Version] = {}  # (registry URL, subject, version number): fetched once
_SEEN: dict[tuple[str, str], int] = {}  # (registry URL, subject): how many versions this process read of it


def registry_url() -> str:
    url = settings.value("SWITCHYARD_SCHEMA_REGISTRY_URL")
    if not url:
        raise UserError("the pipeline's Avro input names a registry subject but SWITCHYARD_SCHEMA_REGISTRY_URL is "
                        "not set: set it to the schema registry's URL (Confluent's API, e.g. http://host:8081)")
    return url.rstrip("/")


def _headers() -> dict[str, str]:
    user_info = settings.given("SWITCHYARD_SCHEMA_REGISTRY_USER_INFO")
    auth = {"Authorization": "Basic " + base64.b64encode(user_info.encode()).decode()} if user_info else {}
    return {"Accept": ACCEPT, **auth}


def shown(url: str) -> str:
    """`url` as messages name it: any user and password in it left out."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    return urlunsplit(parts._replace(netloc=f"{host}:{parts.port}" if parts.port else host))


def _get(url: str, path: str):
    """The JSON the registry answers GET `path` with; None when it answers 404 (no such subject or version). A
    registry out of reach, or answering 5xx, is NotNow (retry); any other answer a refusal naming what to fix."""
    request = urllib.request.Request(f"{url}{path}", headers=_headers())
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        detail = err.read().decode(errors="replace")[:200]
        said = f"schema registry {shown(url)}: GET {path} answered {err.code} {detail}".strip()
        if err.code >= 500:
            raise NotNow(f"{said}; retry once the registry serves again") from None
        raise UserError(said + ("; check SWITCHYARD_SCHEMA_REGISTRY_USER_INFO" if err.code in (401, 403) else "")) \
            from None
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise NotNow(f"schema registry {shown(url)} is out of reach ({reason}): retry once it serves, or check "
                     "SWITCHYARD_SCHEMA_REGISTRY_URL") from None
    except ValueError as err:
        raise UserError(f"schema registry {shown(url)}: GET {path} did not answer JSON ({err}): check "
                        "SWITCHYARD_SCHEMA_REGISTRY_URL") from None


def subject_versions(subject: str) -> list[Version]:
    """Every version registered under `subject`, soft-deleted ones too (records written with them remain), oldest
    first; none (with a warning) when the registry has no such subject yet."""
    url = registry_url()
    quoted = quote(subject, safe="")
    numbers = _get(url, f"/subjects/{quoted}/versions?deleted=true")
    if numbers is None and _SEEN.get((url, subject)):
        raise UserError(f"schema registry {shown(url)} no longer has subject {subject!r}, which had "
                        f"{_SEEN[(url, subject)]} version(s): it was deleted; register its versions again (every "
                        "record of theirs would be dead-lettered meanwhile, so none is read until then)")
    if numbers is None:
        logger.warning("schema registry %s has no subject %r: every Avro record is dead-lettered as of an unknown "
                       "schema id until a writer schema is registered under it", shown(url), subject)
        return []
    versions = []
    for number in sorted(numbers):
        key = (url, subject, number)
        if key not in _VERSIONS:
            found = _get(url, f"/subjects/{quoted}/versions/{number}?deleted=true")
            if found is None:  # deleted for good between the two calls
                continue
            _VERSIONS[key] = Version(subject, int(found["version"]), int(found["id"]), found["schema"],
                                     found.get("schemaType") or "AVRO")
        versions.append(_VERSIONS[key])
    _SEEN[(url, subject)] = max(_SEEN.get((url, subject), 0), len(versions))
    return versions
