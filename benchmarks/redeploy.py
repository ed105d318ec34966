"""A changed definition redeployed under a live stream, against batch-only over the same history.

The demo pipeline's backlog of `--events` records (benchmarks/burst_inputs.py: same arguments, same bytes) is
archived whole, backfilled and handed off in a fresh process; its stream starts and catches up under a trickle at
`--rate` events/s. Then `switchyard redeploy` under the demo definition plus one aggregation (REDEPLOYED) runs in a
fresh process while the trickle goes on, and a fresh `switchyard stream` under it starts once it is handed off. The
clock runs from the redeploy's start to that stream's SWITCHED: the changed definition serving. The recorded
definition serves until the redeploy stops it; its update latency over the inputs produced while the redeploy's
batch pass ran beside it (an input's Kafka timestamp to that of the first update naming its event id) is what the
pass costs the live path. The trickle stops at a fixed count; the stream catches up and is stopped.

Batch-only: in a warehouse of its own (fresh process), the changed definition archives the same topic whole, then
backfills (with the Kafka tail: here none, the archive reaches the end) and hands off, each step timed; backfill +
handoff is the batch-only time over the same history. The two `state` tables must be identical key by key.

Then `switchyard rollback` under the demo definition, the changed one's stream caught up and no input arriving: the
demo's kept tiles restored at a cut, the Kafka range past the archive merged, and a fresh `switchyard stream` under
it; timed from the rollback's start to that stream's SWITCHED, and its state identical to the changed one's on the
columns both declare.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.burst import compare_states
from benchmarks.burst_inputs import Trickle, backlog_record
from benchmarks.harness import (ROOT, CpuSampler, add_connection, delete_topics, machine, run_fresh, start_service,
                                switchyard_command, terminate, worker_command, write_json)
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.language.spec import maximum
from switchyard.state_handoff.tables import Tables

DEMO = get_pipeline("demo")
# the demo pipeline as a team would change it: one aggregation added, under the same name
REDEPLOYED = dataclasses.replace(DEMO, aggregations=DEMO.aggregations + (maximum("largest2", "amount"),))
REFERENCE = "benchmarks.redeploy:REDEPLOYED"
STOP_MARGIN_S = 10.0  # inputs this close to the stop request may be answered only after the cut


def worker(argv: list[str]) -> dict:
    """In a fresh process: archive the topic whole, backfill and hand off under `demo` or REDEPLOYED, each timed."""
    from switchyard.deploy.spark import build_spark
    from switchyard.jobs.archive import archive_cut, run_archive
    from switchyard.jobs.backfill import run_backfill
    from switchyard.jobs.handoff import run_handoff

    warehouse, bootstrap, topic, which = argv
    pipeline = REDEPLOYED if which == "redeployed" else DEMO
    tables, quiet, times = Tables(warehouse, pipeline.name), (lambda *_: None), {}
    spark = build_spark(f"switchyard-redeploy-{which}")
    started = time.monotonic()
    run_archive(spark, pipeline, tables, bootstrap, topic, archive_cut(bootstrap, topic, fraction=1.0), out=quiet)
    times["archive_s"] = round(time.monotonic() - started, 3)
    run_backfill(spark, pipeline, tables, out=quiet)
    times["backfill_s"] = round(time.monotonic() - started - times["archive_s"], 3)
    handoff = run_handoff(spark, pipeline, tables, bootstrap)
    times["handoff_s"] = round(time.monotonic() - started - times["archive_s"] - times["backfill_s"], 3)
    spark.stop()
    return {"handoff_id": handoff.handoff_id, **times}


@dataclass
class Result:
    events: int
    rate: int
    machine: str
    trigger_seconds: float = 0.0               # the streams' keyed query trigger (0: batches back to back)
    setup_s: float | None = None
    redeploy_s: float | None = None            # the redeploy's process: start -> exit (handed off at the cut)
    to_serving_s: float | None = None          # the redeploy's start -> the changed definition's SWITCHED
    beside_s: float | None = None              # the whole history tiled beside the live stream
    stop_s: float | None = None                # STOP_REQUESTED -> STOPPED
    rebase_s: float | None = None              # PAUSED -> HANDOFF_COMMITTED at the cut
    serving_gap_s: float | None = None         # STOP_REQUESTED -> SWITCHED: no definition updates `state`
    old_latency_p50_s: float | None = None     # the recorded definition's update latency while the pass ran beside
    old_latency_p99_s: float | None = None
    old_latency_matched: int = 0
    old_latency_unanswered: int = 0            # inputs of that span no update of the recorded definition names
    # the recorded definition's stream (its Python and its JVM): cores in use on average, alone under the trickle
    # before the redeploy, then while the pass ran beside it (the cores the pass did not have, of machine_cores)
    old_stream_cores_alone: float | None = None
    old_stream_cores_beside: float | None = None
    machine_cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    reconciliation_keys_different: int | None = None
    batch_only: dict = field(default_factory=dict)
    batch_only_s: float | None = None          # backfill + handoff under the changed definition, same history
    ratio_to_batch_only: float | None = None   # to_serving_s / batch_only_s
    states: dict = field(default_factory=dict)
    # then `switchyard rollback` under the recorded definition: its kept tiles restored at a cut, nothing tiled
    rollback_s: float | None = None            # the rollback's process: start -> exit (handed off at its cut)
    rollback_to_serving_s: float | None = None  # the rollback's start -> the recorded definition's SWITCHED again
    rollback_rebase_s: float | None = None     # PAUSED -> HANDOFF_COMMITTED at its cut
    rollback_to_redeploy: float | None = None  # rollback_to_serving_s / to_serving_s
    rollback_states: dict = field(default_factory=dict)  # the rolled-back state vs the changed one's shared columns


def _wait(condition, what: str, timeout: float, proc=None, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the stream exited ({proc.returncode}) while waiting for {what}; see {log}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout:.0f}s; see {log}")
        time.sleep(0.5)


def _statuses(tables: Tables) -> list:
    from switchyard.state_handoff.control import handoff_log

    return handoff_log.entries(tables)


def _wall(at: datetime) -> float:
    """A log entry's `at` (naive UTC) as epoch seconds."""
    return (at if at.tzinfo else at.replace(tzinfo=timezone.utc)).timestamp()


def _after(entries: list, status: str, seq: int = -1):
    return next((e for e in entries if e.status == status and e.seq > seq), None)


def _latency(bootstrap: str, topic: str, updates_topic: str, since: dict[int, int], until_ms: float,
             handoff_id: str) -> tuple[list[float], int]:
    """Seconds from each input produced after `since` (its offsets) and before `until_ms` to the first update
    naming its event id that handoff `handoff_id` wrote; and how many such inputs no such update names."""
    from kafka import TopicPartition

    from switchyard.jobs.stream.updates_topic import written_by
    from switchyard.state_handoff.io.kafka_io import consumer
    from switchyard.state_handoff.language.aggregates import LAST_BY_ID

    def read(name: str, start: dict[int, int] | None) -> list:
        with consumer(bootstrap) as client:
            parts = [TopicPartition(name, p) for p in sorted(client.partitions_for_topic(name) or ())]
            client.assign(parts)
            end = client.end_offsets(parts)
            for tp in parts:
                client.seek(tp, (start or {}).get(tp.partition, 0))
            records = []
            while any(client.position(tp) < end[tp] for tp in parts):
                for batch in client.poll(timeout_ms=500).values():
                    records += batch
        return records

    def event_id(value: bytes, field_name: str):
        try:
            return json.loads(value).get(field_name)
        except (TypeError, ValueError, AttributeError):
            return None

    inputs = {event_id(r.value, DEMO.event_id): r.timestamp for r in read(topic, since) if r.timestamp < until_ms}
    answered: dict = {}
    for update in read(updates_topic, None):
        named = event_id(update.value, LAST_BY_ID)
        if named in inputs and named not in answered and written_by(update) == handoff_id:
            answered[named] = update.timestamp
    return sorted(max(0, answered[e] - inputs[e]) / 1000 for e in answered), len(inputs) - len(answered)


def _quantile(ordered: list[float], q: float) -> float | None:
    return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 3) if ordered else None


def run(args) -> Result:
    from benchmarks.burst import read_state
    from switchyard.jobs.stream.updates_topic import last_started_with
    from switchyard.state_handoff.control import details, requests
    from switchyard.state_handoff.io.kafka_io import create_topic, offset_bounds, produce

    out = Path(args.out_dir) / f"redeploy-{args.events}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    log, topic = out / "redeploy.log", f"bench.redeploy.{args.events}.{int(time.time())}"
    live, batch = str(out / "live"), str(out / "batch")
    tables = Tables(live, DEMO.name)
    result = Result(args.events, args.rate, machine(), args.trigger_seconds)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    create_topic(args.bootstrap, topic, partitions=args.partitions)
    produce(args.bootstrap, topic, (backlog_record(i, args.events, args.keys, args.seed) for i in range(args.events)))
    print(f"backlog of {args.events:,} records on {topic}; archive + backfill + handoff under demo", flush=True)
    done = run_fresh(worker_command("redeploy", live, args.bootstrap, topic, "demo"), log, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"the setup failed ({done.returncode}); see {log}")
    result.setup_s = round(done.seconds, 1)

    stream_flags = ["--warehouse", live, "--bootstrap", args.bootstrap, "--caught-up-lag", str(args.rate * 5),
                    "--trigger-seconds", str(args.trigger_seconds)]
    old = start_service(switchyard_command("stream", "--pipeline", DEMO.name, *stream_flags), log, env=env)
    trickle = Trickle(args.bootstrap, topic, args.rate, args.keys, args.seed, stop_at=args.rate * args.trickle_seconds)
    new = rolled = changed_state = None
    try:
        _wait(lambda: _after(_statuses(tables), "CAUGHT_UP") is not None, "the stream caught up", args.timeout, old,
              log)
        trickle.start()
        cpu = CpuSampler(old.pid)
        cpu.start()
        time.sleep(args.warmup_seconds)
        print(f"stream live under a trickle of {args.rate:,}/s; redeploy under {REFERENCE}", flush=True)
        started, seq = time.time(), max(e.seq for e in _statuses(tables))
        since = {p: hi for p, (_, hi) in offset_bounds(args.bootstrap, topic).items()}
        redeploy = run_fresh(switchyard_command("redeploy", "--pipeline", REFERENCE, "--warehouse", live,
                                                "--bootstrap", args.bootstrap), log, env=env, echo="  ")
        result.redeploy_s = round(time.time() - started, 2)
        if redeploy.returncode != 0:
            raise RuntimeError(f"the redeploy failed ({redeploy.returncode}); see {log}")
        old.wait(timeout=60)
        new = start_service(switchyard_command("stream", "--pipeline", REFERENCE, *stream_flags), log, env=env)
        _wait(lambda: _after(_statuses(tables), "SWITCHED", seq) is not None, "the changed definition SWITCHED",
              args.timeout, new, log)
        entries = _statuses(tables)
        switched = _after(entries, "SWITCHED", seq)
        result.to_serving_s = round(_wall(switched.at) - started, 2)
        asked, stop, stopped = (_after(entries, s, seq) for s in ("REBASE_REQUESTED", "STOP_REQUESTED", "STOPPED"))
        paused, committed = _after(entries, "PAUSED", seq), _after(entries, "HANDOFF_COMMITTED", seq)
        result.beside_s = requests.read(asked).redeploy.beside["seconds"]
        result.stop_s = round((stopped.at - stop.at).total_seconds(), 2)
        result.rebase_s = round((committed.at - paused.at).total_seconds(), 2)
        result.serving_gap_s = round((switched.at - stop.at).total_seconds(), 2)
        result.reconciliation_keys_different = details.of(committed).reconciliation["keys_different"]
        old_start = [e for e in entries if e.status == "STREAM_STARTED" and e.seq < seq][-1]
        # the inputs produced while the pass ran beside, up to a few batches before the stop (those after it wait
        # for the changed definition's stream: the serving gap, reported apart)
        latencies, result.old_latency_unanswered = _latency(
            args.bootstrap, topic, details.of(old_start).updates_topic or last_started_with(tables), since,
            (_wall(stop.at) - STOP_MARGIN_S) * 1000, old_start.handoff_id)
        result.old_latency_matched = len(latencies)
        cpu.stop()
        result.old_stream_cores_alone = cpu.cores_between(started - args.warmup_seconds, started)
        result.old_stream_cores_beside = cpu.cores_between(started, _wall(stop.at) - STOP_MARGIN_S)
        result.old_latency_p50_s, result.old_latency_p99_s = _quantile(latencies, 0.5), _quantile(latencies, 0.99)
        print(f"serving after {result.to_serving_s}s (the pass beside {result.beside_s}s, the rebase at the cut "
              f"{result.rebase_s}s, no definition updating for {result.serving_gap_s}s); the recorded definition's "
              f"update latency meanwhile p99 {result.old_latency_p99_s}s over {len(latencies)} inputs, its stream "
              f"using {result.old_stream_cores_beside} of {result.machine_cores} cores (alone "
              f"{result.old_stream_cores_alone})", flush=True)
        trickle.join(timeout=args.trickle_seconds + 120)
        end = {p: hi for p, (_, hi) in offset_bounds(args.bootstrap, topic).items()}

        def caught_up_to_end() -> bool:
            from benchmarks.burst_arm import progress_of

            progress = progress_of(tables, committed.handoff_id) or {}
            latest, behind = progress.get("latest_offsets") or {}, progress.get("offsets_behind") or {}
            return bool(latest) and all(int(latest.get(str(p), 0)) >= o for p, o in end.items()) and \
                not any(int(v) for v in behind.values()) and not progress.get("state_updates_behind")
        _wait(caught_up_to_end, "the changed definition caught up to the trickle's end", args.timeout, new, log)
        changed_state = read_state(live)

        print(f"rollback under {DEMO.name}: the kept tiles restored at a cut", flush=True)
        started, seq = time.time(), max(e.seq for e in _statuses(tables))
        back = run_fresh(switchyard_command("rollback", "--pipeline", DEMO.name, "--warehouse", live,
                                            "--bootstrap", args.bootstrap), log, env=env, echo="  ")
        result.rollback_s = round(time.time() - started, 2)
        if back.returncode != 0:
            raise RuntimeError(f"the rollback failed ({back.returncode}); see {log}")
        new.wait(timeout=60)
        rolled = start_service(switchyard_command("stream", "--pipeline", DEMO.name, *stream_flags), log, env=env)
        _wait(lambda: _after(_statuses(tables), "SWITCHED", seq) is not None, "the recorded definition SWITCHED",
              args.timeout, rolled, log)
        entries = _statuses(tables)
        result.rollback_to_serving_s = round(_wall(_after(entries, "SWITCHED", seq).at) - started, 2)
        result.rollback_rebase_s = round((_after(entries, "HANDOFF_COMMITTED", seq).at -
                                          _after(entries, "PAUSED", seq).at).total_seconds(), 2)
        result.rollback_to_redeploy = round(result.rollback_to_serving_s / result.to_serving_s, 3)
        result.rollback_states = compare_states(read_state(live), changed_state.drop_columns(["largest2"]))
        print(f"rolled back and serving after {result.rollback_to_serving_s}s (the rebase at its cut "
              f"{result.rollback_rebase_s}s)", flush=True)
    finally:
        trickle.halt()
        for proc in (old, new, rolled):
            if proc is not None:
                terminate(proc, 180)

    print("batch-only: archive, backfill and hand off the changed definition over the same topic", flush=True)
    done = run_fresh(worker_command("redeploy", batch, args.bootstrap, topic, "redeployed"), log, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"the batch-only arm failed ({done.returncode}); see {log}")
    result.batch_only = done.figures()
    result.batch_only_s = round(result.batch_only["backfill_s"] + result.batch_only["handoff_s"], 2)
    result.ratio_to_batch_only = round(result.to_serving_s / result.batch_only_s, 3)
    result.states = compare_states(changed_state, read_state(batch))
    if not args.keep_topics:
        delete_topics(args.bootstrap, [topic])
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks redeploy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="the archived history (default 1000000)")
    parser.add_argument("--rate", type=int, default=1000, help="the live stream's steady input, events/s")
    parser.add_argument("--trickle-seconds", type=int, default=240, help="how long the trickle runs at most")
    parser.add_argument("--warmup-seconds", type=float, default=15.0)
    parser.add_argument("--trigger-seconds", type=float, default=0.0,
                        help="each stream's keyed query trigger (`switchyard stream --trigger-seconds`; default 0: "
                             "its batches back to back)")
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS", help="limit of each wait")
    parser.add_argument("--json", dest="json_file", metavar="FILE")
    parser.add_argument("--out-dir", default="bench-out")
    parser.add_argument("--keep-topics", action="store_true")
    add_connection(parser)
    args = parser.parse_args(argv)
    result = run(args)
    figures = asdict(result)
    print(json.dumps({k: v for k, v in figures.items() if k not in ("states", "rollback_states")}, indent=2,
                     default=str))
    print(f"states identical: {result.states.get('identical')}; rolled back identical to the changed state's shared "
          f"columns: {result.rollback_states.get('identical')}")
    if args.json_file:
        write_json(args.json_file, figures)
    return 0 if result.states.get("identical") and result.rollback_states.get("identical") else 1
