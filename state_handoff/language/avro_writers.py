"""Which writer schemas an Avro pipeline's records are decoded with, by the schema id each record carries.

A pipeline with one fixed writer schema (`AvroFormat.schema_id`) decodes that id alone. One that names a registry
`subject` decodes every version registered under it whose schema resolves into the pipeline's reader schema
(state_handoff/language/avro_resolution.py); a version that does not is `incompatible`, and its records are dead-lettered
naming its id, as are those of an id that is no version of the subject.

A batch reads a range fixed before its plan is built, whose records were written after their schemas were
registered, so the versions listed as the plan is built cover them. A stream's plan outlives that list: a record
whose id lies within UNSEEN_IDS above the newest id the plan knows may be of a version registered since, so the
stream's parse fails on it (`UNSEEN` and the id in Spark's error); the stream notes the id (`learned`) and starts its
queries again from their checkpoints, with the subject listed again. An id that is still no version then is
dead-lettered by the plans built for ABSENT_FOR_S seconds (one built after that lists the subject again, and reads the
id if a version with it was registered meanwhile), as is one further above (registries number schemas one after another: an id that far
ahead is not one that a registration has given yet, but bytes that only look like a header)."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass

from switchyard.state_handoff.io import avro_registry
from switchyard.state_handoff.language.avro_resolution import incompatibility
from switchyard.state_handoff.language.spec import AvroFormat

UNSEEN = "switchyard-unseen-avro-schema-id"
UNSEEN_IDS = 1 << 20  # how far above the newest known id a stream's record makes it list the subject again
_UNSEEN_ID = re.compile(UNSEEN + r" (\d+)")
_ABSENT: dict[str, dict[int, float]] = {}  # subject -> ids a stream met, listed again and did not find: when
ABSENT_FOR_S = 600.0  # how long an id found absent is taken as no version before it is looked for again


def _absent(subject: str) -> dict[int, float]:
    """The ids of `subject` found absent less than ABSENT_FOR_S ago (older findings expire)."""
    found = _ABSENT.setdefault(subject, {})
    for schema_id in [i for i, at in found.items() if time.monotonic() - at >= ABSENT_FOR_S]:
        del found[schema_id]
    return found


@dataclass(frozen=True)
class WriterSchemas:
    """`readable`: id -> the writer schema's text, each readable into the reader schema; `incompatible`: id -> why
    not; `newest`: the highest id registered when this was read; `absent`: ids a stream met above it that proved to be
    no version."""

    readable: dict[int, str]
    incompatible: dict[int, str]
    newest: int
    absent: frozenset[int] = frozenset()


def writer_schemas(avro: AvroFormat) -> WriterSchemas:
    if avro.subject is None:
        return WriterSchemas({avro.schema_id: avro.schema_json}, {}, avro.schema_id)
    versions = avro_registry.subject_versions(avro.subject)
    readable, incompatible = {}, {}
    for version in versions:
        if version.schema_type.upper() != "AVRO":
            incompatible[version.id] = f"version {version.version} is a {version.schema_type} schema, not Avro"
            continue
        try:
            why = incompatibility(json.loads(version.schema), avro.parsed)
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            why = f"version {version.version} is not a readable Avro schema ({err})"
        if why is None:
            readable[version.id] = version.schema
        else:
            incompatible[version.id] = why
    newest = max([v.id for v in versions], default=-1)
    return WriterSchemas(readable, incompatible, newest, frozenset(_absent(avro.subject)))


def unseen_id(error) -> int | None:
    """The schema id a stream's parse failed on for being above every id its plan knew (see the module's
    docstring), or None when `error` is something else."""
    found = _UNSEEN_ID.search(str(error))
    return int(found.group(1)) if found else None


def learned(avro: AvroFormat | None, error) -> bool:
    """Whether `error` is a stream's parse meeting an id above every id its plan knew: then the subject is listed
    again and an id that is still no version of it is noted as absent, so the plan built next reads the id (a version
    registered since) or dead-letters it, and the queries may start again."""
    schema_id = unseen_id(error)
    absent = _absent(avro.subject) if avro is not None and avro.subject else None
    if absent is None or schema_id is None or schema_id in absent:
        return False  # met again soon after it was found absent: a failure, not a version to look for
    if schema_id not in {v.id for v in avro_registry.subject_versions(avro.subject)}:
        absent[schema_id] = time.monotonic()
    return True
