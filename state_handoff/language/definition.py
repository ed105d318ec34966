"""A pipeline definition's version: a fingerprint of what shapes its state and outputs (its input format, fields,
key, event time, aggregations and windows; not its description), recorded with every backfill and handoff it
commits. A backfill, handoff, rebase or stream under a definition other than the one the pipeline's tables were made
with is refused in one line before any JVM, naming what changed (control/recorded_definition.py): Spark would otherwise
fail the stream on its state store's schema, or a backfill would write tiles of another shape beside the recorded
ones."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import MISSING, fields, is_dataclass

from switchyard.state_handoff.language.spec import Pipeline

KEY = "definition"


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _declared(value):
    """A declaration as plain values, leaving out every attribute at its default: an attribute a later switchyard
    adds with a default leaves the versions of the pipelines that do not use it as they were."""
    if is_dataclass(value):
        kept = {}
        for f in fields(value):
            held = getattr(value, f.name)
            default = f.default if f.default is not MISSING else (
                f.default_factory() if f.default_factory is not MISSING else MISSING)
            if default is MISSING or held != default:
                kept[f.name] = _declared(held)
        return kept
    if isinstance(value, (list, tuple)):
        return [_declared(v) for v in value]
    return value


def parts(pipeline: Pipeline) -> dict[str, str]:
    """Each part of the definition that shapes the state or the outputs, as a digest of its declaration."""
    avro = pipeline.avro
    return {
        "input": _digest({"avro": None} if avro is None else {"schema": avro.schema_json, "id": avro.schema_id,
                                                              **({"subject": avro.subject} if avro.subject else {})}),
        "fields": _digest(_declared(pipeline.fields)),
        "key": _digest(list(pipeline.keys)),
        "event_time": _digest({"field": pipeline.event_time, "id": pipeline.event_id,
                               "accepted": [t.isoformat() for t in pipeline.accepted_times]}),
        "aggregations": _digest(_declared(pipeline.aggregations)),
        "windows": _digest(None if pipeline.windows is None else
                           {"kind": type(pipeline.windows).__name__, **_declared(pipeline.windows)}),
    }


def version(pipeline: Pipeline) -> str:
    """The definition's version: one digest over its parts."""
    return _digest(parts(pipeline))


def outputs(pipeline: Pipeline) -> dict[str, str]:
    """Each output column by its name (a window's as `windows.<name>`), as a digest of its declaration but the name:
    what tells an added, dropped, renamed or changed output apart."""
    def but_name(aggregation) -> str:
        return _digest({k: v for k, v in _declared(aggregation).items() if k != "name"})

    found = {a.name: but_name(a) for a in pipeline.aggregations}
    windowed = pipeline.windows.aggregations if pipeline.windows is not None else ()
    return {**found, **{f"windows.{a.name}": but_name(a) for a in windowed}}


def panes(pipeline: Pipeline) -> str:
    """What the tiles' grain follows: a windowed pipeline's pane (its windows' slide), else the day."""
    return _digest(None if pipeline.windows is None else int(pipeline.windows.slide.total_seconds()))


def as_details(pipeline: Pipeline) -> dict:
    """What a backfill's or handoff's log entry records of the definition it was made with (the panes and the key's
    fields beside the version's parts: recorded, not part of the version)."""
    return {KEY: {"version": version(pipeline), "parts": parts(pipeline), "outputs": outputs(pipeline),
                  "panes": panes(pipeline), "keys": list(pipeline.keys)}}


def changes(record: dict, pipeline: Pipeline) -> list[str]:
    """What differs between a recorded definition and `pipeline`: the parts, each aggregations or windows part with
    the outputs added, dropped, renamed or changed when the record names its outputs (records before it did not)."""
    now = parts(pipeline)
    changed = [name for name in now if record["parts"].get(name) != now[name]]
    if "outputs" not in record:
        return changed
    then, current = record["outputs"], outputs(pipeline)
    added = [n for n in current if n not in then]
    dropped = [n for n in then if n not in current]
    renamed = []
    for old in list(dropped):
        new = next((n for n in added if current[n] == then[old] and n.startswith("windows.") == old.startswith(
            "windows.")), None)
        if new is not None:
            renamed.append(f"{old} renamed {new}")
            dropped.remove(old)
            added.remove(new)
    altered = [n for n in current if n in then and current[n] != then[n]]
    said = [*(f"{n} added" for n in added), *(f"{n} dropped" for n in dropped), *renamed,
            *(f"{n} changed" for n in altered)]

    def told(part: str, windowed: bool) -> str:
        mine = [t for t in said if t.startswith("windows.") == windowed]
        return f"{part} ({', '.join(mine)})" if mine else part

    return [told(name, name == "windows") if name in ("aggregations", "windows") else name for name in changed]


# The parts a redeploy switches in at a cut: the keyed state, and the windows (with their late records), are
# recomputed sort-based from the archive and the Kafka range past it. A change of how records parse (REPARSED) also
# makes the dead letters again over all history (jobs/reparse.py); else they are shaped by none of the changed parts (a
# key field is a required field, so another key makes no record malformed) and go on as the stream made them.
REPARSED = ("input", "fields", "event_time")
REDEPLOYED = ("key", "aggregations", "windows", *REPARSED)


def refuse_redeploy(pipeline: Pipeline, record: dict) -> str | None:
    """Why the pipeline's tables, made with the recorded definition, cannot be moved to `pipeline` at a cut (None:
    they can, or nothing changed)."""
    now = parts(pipeline)
    other = [name for name in now if record["parts"].get(name) != now[name] and name not in REDEPLOYED]
    if other:
        return f"a change of its {', '.join(other)} is not one a redeploy at a cut knows how to switch in"
    unwindowed = _digest(None)
    if record["parts"].get("windows") != now["windows"] and unwindowed in (record["parts"].get("windows"),
                                                                            now["windows"]):
        return ("it " + ("gains" if pipeline.windows is not None else "drops") + " windows: a redeploy switches in "
                "changed windows, not windows added to or taken from a pipeline")
    if key_changed(pipeline, record) and "keys" not in record:
        return ("its key changed, and its recorded definition (made by an earlier switchyard) does not name its key's "
                "fields, which the cut needs to take the old keys out of the updates topic: backfill once under the "
                "recorded definition, then redeploy")
    return None


def key_changed(pipeline: Pipeline, record: dict) -> bool:
    """Whether a redeploy from the recorded definition to `pipeline` keys the state by other fields."""
    return record["parts"].get("key") != parts(pipeline)["key"]


def projection(pipeline: Pipeline, record: dict) -> dict[str, str] | None:
    """When `pipeline` only drops or renames keyed aggregations of the recorded definition, or changes its windows
    but neither their panes nor their aggregations (a lateness, a hopping window's size): each of its aggregations'
    name in the record (every one declared alike there, under its own name or, renamed, another), so its tiles are
    the recorded tiles' columns, kept or renamed, with nothing recomputed. None when any other change was made (an
    aggregation added or changed, another part), or the record names no outputs or panes."""
    then, now = record.get("outputs"), outputs(pipeline)
    if then is None or any(record["parts"].get(k) != v for k, v in parts(pipeline).items()
                           if k not in ("aggregations", "windows")):
        return None
    def windowed(named: dict) -> dict:
        return {n: d for n, d in named.items() if n.startswith("windows.")}

    if windows_changed(pipeline, record) and (record.get("panes") != panes(pipeline)
                                              or windowed(then) != windowed(now)):
        return None
    taken = {a.name for a in pipeline.aggregations if then.get(a.name) == now[a.name]}
    named = {}
    for a in pipeline.aggregations:
        if a.name in taken:
            named[a.name] = a.name
            continue
        old = next((n for n, d in then.items() if d == now[a.name] and not n.startswith("windows.") and n not in now
                    and n not in named.values()), None)
        if old is None:
            return None  # added, or changed
        named[a.name] = old
    return named


def reparsed(pipeline: Pipeline, record: dict) -> bool:
    """Whether a redeploy from the recorded definition to `pipeline` parses records otherwise (its input format, its
    fields or its event time changed): which records are dead letters, and what the others hold, may change."""
    now = parts(pipeline)
    return any(record["parts"].get(name) != now[name] for name in REPARSED)


def windows_changed(pipeline: Pipeline, record: dict) -> bool:
    """Whether a redeploy from the recorded definition to `pipeline` makes the windows again (windows are per key,
    so another key makes them again too, and so do records parsed otherwise)."""
    return (record["parts"].get("windows") != parts(pipeline)["windows"] or key_changed(pipeline, record)
            or reparsed(pipeline, record))


def compared(pipeline: Pipeline, record: dict) -> Pipeline:
    """`pipeline` with only the aggregations the recorded definition declared alike, under the same name: what a
    redeploy's reconciliation compares between the streamed state of the recorded definition and the one recomputed
    at the cut (none: the keys alone). Under another key, the two are compared over all keys at once
    (jobs/rebase/rekey.py)."""
    then, now = record.get("outputs") or {}, outputs(pipeline)
    return dataclasses.replace(pipeline, aggregations=tuple(a for a in pipeline.aggregations
                                                            if then.get(a.name) == now[a.name]))


@dataclasses.dataclass(frozen=True)
class DefinitionChange:
    """What moving a pipeline's tables from the recorded definition (`record`) to `pipeline` changes, found once
    (`diff`) and passed to every step of a rebase or redeploy that depends on it: the tiles beside the stream, the
    reconciliation, the catch-up, the windows at the cut, the updates topic. A rebase under the definition its tables
    were made with changes nothing (`unchanged`)."""

    compared: Pipeline  # what the reconciliation compares by: the aggregations both declare alike (`compared`)
    record: dict | None = None  # the recorded definition (None: unchanged)
    key_changed: bool = False  # the state keyed by other fields: compared over all keys, the updates topic moved
    reparsed: bool = False  # records parse otherwise: the dead letters made again, the states not compared
    windows_remade: bool = False  # the windows made again at the cut (a windowed pipeline: `windows_changed`)
    projection: dict[str, str] | None = None  # the recorded tiles' columns serve, by aggregation (`projection`)

    @property
    def recorded_keys(self) -> tuple[str, ...]:
        """The key fields the recorded definition keyed its state and updates by."""
        return tuple((self.record or {}).get("keys") or self.compared.keys)

    @property
    def moves_updates_topic(self) -> bool:
        """Whether the updates topic is moved at the cut: another key, or any key's state changed by another parse."""
        return self.key_changed or self.reparsed


def diff(record: dict, pipeline: Pipeline) -> DefinitionChange:
    """What a redeploy from the recorded definition to `pipeline` changes."""
    return DefinitionChange(compared=compared(pipeline, record), record=record,
                            key_changed=key_changed(pipeline, record), reparsed=reparsed(pipeline, record),
                            windows_remade=pipeline.windows is not None and windows_changed(pipeline, record),
                            projection=projection(pipeline, record))


def unchanged(pipeline: Pipeline) -> DefinitionChange:
    """A rebase's change under the definition its tables were made with: nothing, every aggregation compared."""
    return DefinitionChange(compared=pipeline)
