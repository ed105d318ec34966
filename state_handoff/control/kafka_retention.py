"""The archive against Kafka's retention: per partition, the archive's cut minus Kafka's earliest retained offset.

A rebase recomputes the keyed state from the archive's days plus the Kafka range from the archive's cut on, so
once Kafka's retention passes the cut (a negative margin) the records in between are in neither place and no rebase
can recompute them; the streamed state, which read them, stands. `switchyard status` and a Dagster check report the
margin before a rebase needs it, and a rebase refuses before it pauses the stream (jobs/rebase/run.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from switchyard.state_handoff.io.archive_files import archive_meta
from switchyard.state_handoff.io.kafka_io import offset_bounds
from switchyard.state_handoff.tables import Tables


@dataclass(frozen=True)
class Margin:
    """One partition: where the archive ends (exclusive: a rebase's Kafka range begins there) and what Kafka
    retains."""

    partition: int
    archive_cut: int
    earliest_retained: int
    latest: int

    @property
    def offsets(self) -> int:
        """How many more offsets Kafka may delete before it passes the archive's cut; negative once it has."""
        return self.archive_cut - self.earliest_retained

    @property
    def passed(self) -> bool:
        return self.offsets < 0

    def as_dict(self) -> dict:
        return {"partition": self.partition, "archive_cut": self.archive_cut,
                "earliest_retained": self.earliest_retained, "latest": self.latest, "margin": self.offsets}

    def describe(self) -> str:
        return (f"partition {self.partition} offsets {self.archive_cut}..{self.earliest_retained - 1} deleted by "
                f"Kafka's retention, never archived")


def archive_cut(tables: Tables) -> dict[int, int]:
    """Per partition, the first offset the archive does not hold."""
    return {int(p): int(o) for p, o in archive_meta(tables.archive)["cut"].items()}


def margins(tables: Tables, bootstrap: str, bounds: dict[int, tuple[int, int]] | None = None) -> list[Margin]:
    """Every partition of the archived topic (a partition the archive never saw is cut at 0); `bounds`: the topic's
    offset bounds when the caller has read them."""
    cut = archive_cut(tables)
    bounds = bounds if bounds is not None else offset_bounds(bootstrap, archive_meta(tables.archive)["topic"])
    return [Margin(p, cut.get(p, 0), lo, hi) for p, (lo, hi) in sorted(bounds.items())]


def unretained(needed_from: dict[int, int], bounds: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """Per partition, the offsets [needed, earliest retained) that a reader from `needed_from` must read and Kafka
    deleted."""
    return {p: (needed_from.get(p, 0), lo) for p, (lo, _) in sorted(bounds.items()) if lo > needed_from.get(p, 0)}
