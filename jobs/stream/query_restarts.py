"""When a stream whose query failed starts its queries again, in the same process and from their checkpoints,
instead of failing: each case names what made the failure one that a fresh start of the queries gets past."""

from __future__ import annotations

from switchyard.jobs.stream.options import StreamFailed
from switchyard.state_handoff.control import lease as leases
from switchyard.state_handoff.control.details import Failed
from switchyard.state_handoff.control.handoffs import Handoff
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.language import avro_writers

CHECKPOINT_RACE = "CONCURRENT_STREAM_LOG_UPDATE"  # Spark's error when two drivers write one checkpoint's log
CHECKPOINT_RACES = 3


def may_start_again(sup, handoff: Handoff, err: StreamFailed) -> bool:
    """Whether the supervisor `sup` starts the queries of `handoff` again after `err`: a record of an Avro schema
    version registered after the queries started (state_handoff/language/avro_writers.py), or a checkpoint another driver
    wrote (see `_raced_for_the_checkpoint`)."""
    if avro_writers.unseen_id(err) is not None:  # the monitor left FAILED to this decision
        return _looked_for_the_schema_id(sup, handoff, err)
    return _raced_for_the_checkpoint(sup, handoff, err)


def _looked_for_the_schema_id(sup, handoff: Handoff, err: StreamFailed) -> bool:
    """A record of a schema id above every id the queries knew: the subject is read again and the queries start again,
    unless the id was met before (or the registry cannot be read), which is a failure, logged as FAILED here."""
    try:
        if avro_writers.learned(sup.pipeline.avro, err):
            sup.out(f"stream {sup.pipeline.name}: {err}; the queries start again from their checkpoints with the "
                    f"subject's versions read again")
            return True
        reason = str(err)
    except UserError as unread:
        reason = f"{err}; {unread}"
    sup.log(handoff.handoff_id, Status.FAILED, details=Failed(phase="stream", reason=reason))
    return False


def _raced_for_the_checkpoint(sup, handoff: Handoff, err: StreamFailed) -> bool:
    """Whether a query failed because another driver wrote its checkpoint's log while this stream holds the
    lease: a stream that lost the pipeline to this one, frozen and then woken, plans its next batch before it
    learns it lost (its Delta writes are fenced, so it dies without writing). Its batch is the checkpoint's
    now, and the same batch this stream would have planned from the same state: the queries start again from
    the checkpoint and run it (a few times at most)."""
    if CHECKPOINT_RACE not in str(err) or sup.checkpoint_races >= CHECKPOINT_RACES:
        return False
    try:
        sup.lease.check_fresh()
    except leases.LeaseLost:
        return False
    sup.checkpoint_races += 1
    sup.warn(f"stream {sup.pipeline.name}: another driver wrote the checkpoint of handoff {handoff.handoff_id} "
             "(a stream that lost this pipeline's lease, woken); starting the queries again from the checkpoint")
    return True
