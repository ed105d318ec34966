"""What the archive's commit record promises, checked before anything reads the archive: per Kafka partition, the
archive runs it records tile the archive from its first offset to its cut without gap or overlap, and the files
it names hold, per run, exactly the records that run wrote.

Each `switchyard archive` run appends to the record's "runs" list the [from, to) it read per partition and the
records it wrote there; the "files" map gives each file's (lowest, highest, records) per partition. A file named
twice, a run's file dropped from the map, two runs over the same offsets or an offset range no run covers are
each a refusal naming what is wrong: a backfill never silently reads less (or more) than was archived."""

from __future__ import annotations

from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io import storage


def _by_partition(offsets: dict) -> dict[int, int]:
    return {int(p): int(o) for p, o in (offsets or {}).items()}


def file_totals(files: dict) -> dict[int, int]:
    """Per partition, the records the "files" map says its files hold."""
    totals: dict[int, int] = {}
    for ranges in files.values():
        for p, (_, _, n) in ranges.items():
            totals[int(p)] = totals.get(int(p), 0) + int(n)
    return totals


def _offsets(lo: int, end: int) -> str:
    return f"{lo}..{end - 1}"


def check_record(root: str, meta: dict) -> None:
    """Raise UserError in one line when the record's runs do not tile [first, cut) per partition, or its files
    do not hold exactly what the runs wrote."""
    files = meta["files"]
    where = f"the archive record {storage.join(root, '_record')}"
    fix = "restore the record from a backup, or archive the topic again into a fresh --warehouse"
    first, cut = _by_partition(meta.get("first")), _by_partition(meta.get("cut"))
    runs = [(_by_partition(r["from"]), _by_partition(r["to"]), _by_partition(r["records"]))
            for r in meta["runs"]]
    for p in sorted(cut):
        at = first.get(p, 0)
        for lo, end in sorted((r[0][p], r[1][p]) for r in runs if p in r[0] and r[1][p] > r[0][p]):
            if lo > at:
                raise UserError(f"{where} leaves partition {p} offsets {_offsets(at, lo)} in no archive run (a gap): "
                                + fix)
            if lo < at:
                raise UserError(f"{where} records partition {p} offsets {_offsets(lo, min(at, end))} in two archive "
                                "runs (an overlap): " + fix)
            at = end
        if at != cut[p]:
            raise UserError(f"{where} ends partition {p} at {cut[p]} but its runs end at {at}: " + fix)
    held: dict[tuple[int, int], int] = {}  # (run, partition) -> records its files hold
    for name, ranges in sorted(files.items()):
        for p, (lo, hi, n) in sorted((int(p), r) for p, r in ranges.items()):
            if n > hi - lo + 1:
                raise UserError(f"{where} says {name} holds {n} records of partition {p} within offsets {lo}..{hi}, "
                                "more than there are: " + fix)
            run = next((i for i, (start, end, _) in enumerate(runs)
                        if start.get(p, 0) <= lo and hi < end.get(p, 0)), None)
            if run is None:
                raise UserError(f"{where} names {name}, which holds partition {p} offsets {lo}..{hi}, outside any "
                                "one archive run (an overlap or a foreign file): " + fix)
            held[run, p] = held.get((run, p), 0) + n
    for i, (start, end, written) in enumerate(runs):
        for p in sorted(set(written) | {q for r, q in held if r == i}):
            found, expected = held.get((i, p), 0), written.get(p, 0)
            if found != expected:
                kind = "missing from its files map (a gap)" if found < expected else "named twice (an overlap)"
                raise UserError(f"{where}: the archive run over partition {p} offsets "
                                f"{_offsets(start.get(p, 0), end.get(p, 0))} wrote {expected} records, its files "
                                f"hold {found}: records {kind}: " + fix)
