"""What a stream checks before it resumes a handoff's checkpoints: that they are the ones whose writes Delta holds,
and that the Spark line that wrote them is the one running (`refuse_another_spark_line` before any JVM)."""

from __future__ import annotations

from switchyard.state_handoff.control import details
from switchyard.state_handoff.control.handoffs import Handoff
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io import storage
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.stream import progress as stream_progress
from switchyard.state_handoff.stream.checkpoints import checkpoint_incarnation
from switchyard.state_handoff.stream.layout import KEYED, StreamPaths
from switchyard.state_handoff.tables import Tables


def check_resumable(tables: Tables, handoff: Handoff, paths: StreamPaths, entries: list) -> None:
    """Refuse a checkpoint that is not the one whose writes Delta holds for this handoff: a lost or replaced
    checkpoint restarts batch ids, and replaying the handoff from its start would apply records twice."""
    recorded = stream_progress.incarnations(tables, handoff.handoff_id)
    switched = [e for e in entries if e.handoff_id == handoff.handoff_id and e.status == Status.SWITCHED]
    if switched:  # the keyed query writes no Delta table; its first committed batch is in the log
        recorded[KEYED] = {details.of(e).keyed_incarnation for e in switched}
    for query, incarnations in recorded.items():
        current = checkpoint_incarnation(paths.checkpoints[query])
        if current not in incarnations:
            state = "missing" if current is None else f"a new one ({current[:8]})"
            raise UserError(
                f"the {query} checkpoint of handoff {handoff.handoff_id} ({paths.checkpoints[query]}) is {state}, but "
                f"Delta already holds that handoff's stream writes: a stream cannot resume without the checkpoint "
                "that made them; restore it, or start over with `switchyard backfill` and `switchyard handoff`")


# Every STREAM_STARTED entry records the Spark that started it; one without was written while switchyard pinned
# Spark 4.0.0, its only version then.
UNRECORDED_SPARK = "4.0.0"


def spark_line(version: str) -> str:
    """A Spark version's line (major.minor): within one, streaming checkpoints and state stores are read alike."""
    return ".".join(version.split(".")[:2])


def check_spark_line(pipeline: str, handoff: Handoff, paths: StreamPaths, entries: list, running: str) -> None:
    """Refuse to resume a handoff's checkpoints that another Spark line wrote: its state store's files and
    checkpoint format may not be read alike, and a silent misread would apply records twice or never. A rebase
    reads of them only the offsets, which every line writes alike, and starts a handoff with new checkpoints."""
    started = [e for e in entries if e.handoff_id == handoff.handoff_id and e.status == Status.STREAM_STARTED]
    if not started or not storage.exists(paths.keyed_checkpoint):
        return
    written = details.of(started[-1]).spark_version or UNRECORDED_SPARK
    if spark_line(written) != spark_line(running):
        raise UserError(f"the stream checkpoints of handoff {handoff.handoff_id} were written by Spark {written}, "
                        f"and this is Spark {running}: they are not resumed across Spark lines; rebase the pipeline "
                        f"onto a new handoff with `switchyard rebase --pipeline {pipeline}`, then run "
                        "`switchyard stream`")


def refuse_another_spark_line(pipeline: Pipeline, tables: Tables) -> None:
    """check_spark_line for the current handoff against the installed pyspark, before a JVM starts."""
    import pyspark

    view = PipelineView.read(tables)
    handoff = view.current_handoff
    if handoff is not None:
        check_spark_line(pipeline.name, handoff, StreamPaths.of(tables, handoff.handoff_id),
                         list(view.entries), pyspark.__version__)
