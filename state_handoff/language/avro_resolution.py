"""Whether records written with one Avro schema can be read into another: the specification's schema resolution
(https://avro.apache.org/docs/1.11.1/specification/#schema-resolution), checked before any record is decoded, so a
writer schema the reader cannot take is named once, with its reason, instead of failing record by record.

The rules: the same primitive, or a promotion (int to long, float or double; long to float or double; float to
double; string and bytes either way); records of the same unqualified name (or a reader alias), each reader field
found in the writer (by name or alias) with a resolvable type, or given a default; enums whose writer symbols the
reader has (or the reader has a default symbol); arrays and maps by their items and values; fixed of the same
size; a writer union each of whose branches the reader can take, a reader union one of whose branches takes the
writer's type. Logical types resolve as their underlying types."""

from __future__ import annotations

PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
PROMOTIONS = {"int": {"long", "float", "double"}, "long": {"float", "double"}, "float": {"double"},
              "string": {"bytes"}, "bytes": {"string"}}


def incompatibility(writer: dict, reader: dict) -> str | None:
    """Why records of `writer` cannot be read as `reader` (both parsed JSON schemas), or None when they can."""
    return _Resolver(_names(writer), _names(reader)).why(writer, reader, reader.get("name", "record"))


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _names(schema, found: dict | None = None) -> dict:
    """Every named type (record, enum, fixed) defined in `schema`, by full and by short name."""
    found = {} if found is None else found
    if isinstance(schema, list):
        for branch in schema:
            _names(branch, found)
    elif isinstance(schema, dict):
        if schema.get("type") in ("record", "error", "enum", "fixed") and "name" in schema:
            namespace = schema.get("namespace")
            full = schema["name"] if "." in schema["name"] or not namespace else f"{namespace}.{schema['name']}"
            found.setdefault(full, schema)
            found.setdefault(_short(full), schema)
        for f in schema.get("fields", ()):
            _names(f["type"], found)
        for key in ("items", "values"):
            if key in schema:
                _names(schema[key], found)
    return found


class _Resolver:
    def __init__(self, writer_names: dict, reader_names: dict):
        self.writer_names, self.reader_names = writer_names, reader_names

    def _named(self, schema, names: dict):
        """`schema` with a reference to a named type replaced by its definition, and a primitive as its name."""
        if isinstance(schema, str):
            return schema if schema in PRIMITIVES else names.get(schema, names.get(_short(schema), schema))
        if isinstance(schema, dict) and schema.get("type") in PRIMITIVES:
            return schema["type"]  # a primitive with attributes (a logical type): its underlying type
        return schema

    def why(self, writer, reader, where: str) -> str | None:
        writer, reader = self._named(writer, self.writer_names), self._named(reader, self.reader_names)
        if isinstance(writer, list):
            for branch in writer:
                reason = self.why(branch, reader, where)
                if reason:
                    return reason
            return None
        if isinstance(reader, list):
            if any(self.why(writer, branch, where) is None for branch in reader):
                return None
            return f"{where}: the reader's union has no branch for the writer's {_kind(writer)}"
        if isinstance(writer, str) or isinstance(reader, str):
            if writer == reader or (isinstance(writer, str) and reader in PROMOTIONS.get(writer, ())):
                return None
            return f"{where}: the writer's {_kind(writer)} cannot be read as {_kind(reader)}"
        kind = writer.get("type")
        if kind != reader.get("type") and not {kind, reader.get("type")} <= {"record", "error"}:
            return f"{where}: the writer's {_kind(writer)} cannot be read as {_kind(reader)}"
        if kind in ("record", "error", "enum", "fixed") and not _same_name(writer, reader):
            return f"{where}: the writer's {kind} {writer.get('name')} is not the reader's {reader.get('name')}"
        if kind in ("record", "error"):
            return self._record(writer, reader, where)
        if kind == "enum":
            missing = [s for s in writer.get("symbols", ()) if s not in reader.get("symbols", ())]
            if missing and "default" not in reader:
                return f"{where}: the reader's enum {reader.get('name')} lacks symbol {missing[0]}"
            return None
        if kind == "fixed":
            return None if writer.get("size") == reader.get("size") else f"{where}: fixed sizes differ"
        if kind == "array":
            return self.why(writer["items"], reader["items"], f"{where}[]")
        if kind == "map":
            return self.why(writer["values"], reader["values"], f"{where}{{}}")
        return f"{where}: unknown Avro type {kind!r}"

    def _record(self, writer: dict, reader: dict, where: str) -> str | None:
        written = {f["name"]: f for f in writer.get("fields", ())}
        for field in reader.get("fields", ()):
            source = next((written[n] for n in (field["name"], *field.get("aliases", ())) if n in written), None)
            if source is None:
                if "default" not in field:
                    return (f"{where}.{field['name']}: the writer has no such field and the reader gives it no "
                            "default")
                continue
            reason = self.why(source["type"], field["type"], f"{where}.{field['name']}")
            if reason:
                return reason
        return None


def _same_name(writer: dict, reader: dict) -> bool:
    name = _short(writer.get("name", ""))
    return name == _short(reader.get("name", "")) or name in {_short(a) for a in reader.get("aliases", ())}


def _kind(schema) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union"
    return f"{schema.get('type')} {schema.get('name', '')}".strip()
