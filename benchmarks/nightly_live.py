"""The nightly backfill under a live stream (`python -m benchmarks nightly --live`): the night's day added by a
rebase of the stream at a cut, against a backfill of every day.

On a topic of its own on the broker (deleted afterwards), the demo events of `switchyard dev generate`: all but one
day's share of --events over --days days, then the night's day, its share, right after them. Event times are only
ever jittered backwards, so the night's day starts five minutes late: none of its records lies in an earlier day,
and the days before the night are never tiled again (its last minutes lie in the day after; they are archived and
tiled with it).
1. in a fresh process: the days before the night archived, backfilled (warming the JVM) and handed off in the live
   warehouse; every day archived into a second warehouse and backfilled there (timed: what the night is held
   against);
2. `switchyard stream` in its own process, until it has streamed the night's day (both readers at the topic's end,
   `state` current);
3. `switchyard archive --until-offsets` the topic's end (timed apart: it stands in for a sink that writes all day);
4. the night: the day backfilled under the live stream as the nightly job does it (jobs/rebase/run.py's
   rebase_pipeline, which the scheduled Dagster asset calls): the stream pauses at a cut, tiles the day, merges it
   into the earlier merge, recomputes the state at the cut, reconciles it with the streamed state and resumes.
   Timed from the request to SWITCHED (the new handoff's first batch committed); the steps from the log entries;
5. the same day again over itself (its old tiles are in the earlier merge, so every tile is merged);
6. the stream stopped, and the state the night's rebase committed and the state after the second one compared key by
   key with the full backfill's. Nothing is produced after the archive, so the cut is the archive's end and the
   stream adds nothing past it: the states must be equal, amount_sum within what adding the same amounts in another
   order may change (the generator's rare amounts of up to 10^18 cancel in some keys' sums).
The rebases are requested accepting differences, so that one their reconciliation reports (expected 0; sums within
their reordering bound, jobs/rebase/reconciliation.py) is recorded, with whether the examples it shows lie within
that rounding, rather than ending the run.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from datetime import timedelta
from pathlib import Path

from benchmarks.burst import compare_states, read_state
from benchmarks.burst_arm import current_handoff_id, offsets_behind, position_passed, progress_of
from benchmarks.harness import (ROOT, delete_topics, run_fresh, start_service, switchyard_command, terminate,
                                worker_command)
from benchmarks.nightly_figures import PIPELINE, figures_of, report, steps, timed
from switchyard.state_handoff.control import details, handoff_log
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.tables import Tables

LIVE, FULL = "live", "full"  # the two warehouses below --out-dir
REQUESTED_BY = "benchmarks nightly --live"
REBASE_STEPS = (Status.REBASE_REQUESTED, Status.PAUSED, Status.BACKFILL_COMMITTED, Status.HANDOFF_COMMITTED,
                Status.SWITCHED)


def worker(argv: list[str]) -> dict:
    """Step 1 in a fresh process (its own JVM): OUT_DIR BOOTSTRAP TOPIC, and the topic's end offsets before the
    night and after it (JSON)."""
    from switchyard.deploy.spark import build_spark
    from switchyard.jobs.archive import archive_cut, run_archive
    from switchyard.jobs.backfill import run_backfill
    from switchyard.jobs.handoff import run_handoff
    from switchyard.state_handoff.io.archive_files import list_archive
    from switchyard.state_handoff.language.pipelines import get_pipeline

    out_dir, bootstrap, topic, before, night = Path(argv[0]), *argv[1:]
    pipeline = get_pipeline(PIPELINE)
    live, full = (Tables(str(out_dir / name), PIPELINE) for name in (LIVE, FULL))
    spark = build_spark("bench-nightly-live")
    marks: list[str] = []

    def archive(tables: Tables, until: str):
        return lambda out: run_archive(spark, pipeline, tables, bootstrap, topic,
                                       archive_cut(bootstrap, topic, until_offsets=until), out=out)

    def days(tables: Tables) -> list:
        return sorted({f.day for f in list_archive(tables.archive)})

    _, archive_s = timed("archiving the days before the night", archive(live, before), marks)
    before_days = days(live)
    _, before_s = timed(f"the archive before the night ({before_days[0]}..{before_days[-1]})",
                         lambda out: run_backfill(spark, pipeline, live, out=out), marks)
    handoff = run_handoff(spark, pipeline, live, bootstrap)
    shutil.copytree(live.archive, full.archive)
    timed("the full warehouse's archive grown by the night's day", archive(full, night), marks)
    full_run, full_s = timed("a full backfill of every day", lambda out: run_backfill(spark, pipeline, full, out=out),
                              marks)
    every_day = days(full)
    spark.stop()
    print("\n".join(marks), flush=True)
    return {"days": len(every_day), "new_days": [str(d) for d in every_day if d not in before_days],
            "records": full_run.records_read, "keys": full_run.keys, "handoff_id": handoff.handoff_id,
            "archive_before_the_night_s": archive_s, "before_the_night_s": before_s, "full_backfill_s": full_s}


def _produce(args, topic: str, events: int, days: int, seed: int, start) -> dict[int, int]:
    """`events` demo events over `days` days from `start`, appended to the topic; its end offsets after them."""
    from switchyard.jobs.inputs.generate import run_generate
    from switchyard.state_handoff.io.kafka_io import offset_bounds

    with open(os.devnull, "w") as quiet:
        run_generate(args.bootstrap, topic, events=events, keys=args.keys, partitions=args.partitions, days=days,
                     seed=seed, malformed_rate=args.malformed_rate, start=start, out=quiet)
    return {p: hi for p, (_, hi) in offset_bounds(args.bootstrap, topic).items()}


def _wait_for(what: str, done, stream, log: Path, timeout: float) -> float:
    """Seconds until `done()` holds, polled twice a second; raises once the stream has exited or `timeout` passed."""
    started = time.monotonic()
    while not done():
        if stream.poll() is not None:
            raise RuntimeError(f"the stream exited with {stream.returncode} while waiting for {what}; see {log}")
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"{what}: not within {timeout:.0f}s; see {log}")
        time.sleep(0.5)
    return round(time.monotonic() - started, 1)


def _streamed(tables: Tables, end: dict[int, int]) -> bool:
    """Both readers of the current handoff at `end` (the topic's end) and `state` holding every update they sent."""
    progress = progress_of(tables, current_handoff_id(handoff_log.entries(tables))) or {}
    return (position_passed(progress, end) and offsets_behind(progress) == 0
            and progress.get("state_updates_behind") == 0)


def _rounding(count: int, low: float | None, high: float | None) -> float:
    """How far a key's amount_sum may move when its `count` amounts are added in another order: at most
    2(n-1)·u·Σ|x| <= n²·2^-52·max|x|, with max|x| from the key's amount_min and amount_max."""
    return count * count * max(abs(low or 0.0), abs(high or 0.0)) * 2.0 ** -52


def _state_rounding(state) -> dict[str, list[float]]:
    """_rounding of every key of a `state` table (pyarrow, in key order), as compare_states takes it."""
    columns = (state.column(c).to_pylist() for c in ("event_count", "amount_min", "amount_max"))
    return {"amount_sum": [_rounding(*row) for row in zip(*columns)]}


def _within_rounding(example: dict) -> bool:
    """A reconciliation's example differs in amount_sum alone, by no more than _rounding."""
    recomputed, streamed = json.loads(example["recomputed"]), json.loads(example["streamed"])
    if {k: v for k, v in recomputed.items() if k != "amount_sum"} != \
            {k: v for k, v in streamed.items() if k != "amount_sum"}:
        return False
    bound = _rounding(recomputed["event_count"], recomputed["amount_min"], recomputed["amount_max"])
    return abs(recomputed["amount_sum"] - streamed["amount_sum"]) <= bound


def _no_session():
    raise RuntimeError("the stream is not live: this benchmark rebases through the live stream only")


def _rebase(tables: Tables, bootstrap: str, day: str, stream_log: Path, timeout: float) -> dict:
    """`day` backfilled under the live stream as the nightly job does it, and its figures: seconds from the request
    to SWITCHED, between the log entries on the way, the reconciliation, the cut against the archive's end, and the
    stream's own line on how the tiles were merged."""
    from switchyard.jobs.rebase.run import rebase_pipeline
    from switchyard.state_handoff.language.pipelines import get_pipeline

    logged = stream_log.stat().st_size
    new = rebase_pipeline(get_pipeline(PIPELINE), tables, bootstrap, "backfill", REQUESTED_BY, _no_session,
                          days=(day, day), timeout_s=timeout, accept_differences=True,
                          out=lambda line: print(f"    {line}", flush=True))
    committed = handoff_log.latest(tables, Status.HANDOFF_COMMITTED, handoff_id=new.handoff_id)
    request_id = details.of(committed).request_id
    entry = {}
    for e in handoff_log.entries(tables):
        at_cut = details.of(e).at_cut if e.status == Status.BACKFILL_COMMITTED else None
        if request_id in (details.request_id(e), (at_cut or {}).get("request_id")):
            entry.setdefault(e.status, e)
    backfill = details.of(entry[Status.BACKFILL_COMMITTED])
    reconciliation = details.of(committed).reconciliation
    at_cut = backfill.at_cut
    with open(stream_log) as fh:
        fh.seek(logged)
        merge = [line.strip() for line in fh if line.lstrip().startswith("merging")]
    return {"seconds": round((entry[Status.SWITCHED].at - entry[Status.REBASE_REQUESTED].at).total_seconds(), 2),
            "steps_s": {f"{a}->{b}": round((entry[b].at - entry[a].at).total_seconds(), 2)
                        for a, b in zip(REBASE_STEPS, REBASE_STEPS[1:])},
            "switched_startup_s": details.of(entry[Status.SWITCHED]).startup_s,
            "reconciliation": reconciliation,
            "reconciliation_examples_within_rounding": sum(map(_within_rounding, reconciliation["examples"])),
            "kafka_range_records": sum(int(o) - int(at_cut["archive_cut"].get(p, 0)) for p, o in at_cut["cut"].items()),
            "records_read": backfill.records_read, "state_version": entry[Status.BACKFILL_COMMITTED].state_version,
            "merge": merge}


def _show(label: str, rebase: dict, step: dict) -> None:
    """A rebase's figures, with its backfill's steps from the log (`step`, as nightly.steps gives them)."""
    laps = ", ".join(f"{k} {v:.1f}" for k, v in rebase["steps_s"].items())
    print(f"  {label}: {rebase['seconds']:.1f} s from the request to SWITCHED ({laps})\n"
          f"    tiles run ({step['days']}) {step['tiles_s']}\n    commit {step['commit_s']}\n"
          f"    {'; '.join(rebase['merge']) or 'no merge line in the stream log'}; Kafka range past the archive "
          f"{rebase['kafka_range_records']:,} records", flush=True)
    reconciliation = rebase["reconciliation"]
    shown = len(reconciliation["examples"])
    print(f"    reconciliation: {reconciliation['keys_different']} of {reconciliation['keys_recomputed']:,} keys "
          "different" + (f" (of the {shown} shown, {rebase['reconciliation_examples_within_rounding']} differ in "
                         "amount_sum alone, within the rounding of another order)" if shown else ""), flush=True)


def run_live(args, argv: list[str]) -> int:
    """The steps of the module docstring, from this process (no JVM here); the verdict as nightly.py reports it."""
    from switchyard.jobs.inputs.generate import DEFAULT_START, MAX_JITTER_US

    out_dir = Path(args.out_dir or ROOT / "bench-out" / "nightly-live" / f"{args.events}-{args.days}").resolve()
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    workers_log, stream_log = out_dir / "workers.log", out_dir / "stream.log"
    topic = f"nightly-live.n{args.events}.d{args.days}.s{args.seed}.{int(time.time())}"
    live, full = (Tables(str(out_dir / name), PIPELINE) for name in (LIVE, FULL))
    figures = figures_of({"events": args.events, "keys": args.keys, "days": args.days, "partitions": args.partitions,
                          "seed": args.seed, "malformed_rate": args.malformed_rate, "live": True, "topic": topic},
                         argv)
    day_events = args.events // (args.days + 1)
    stream = None
    try:
        print(f"== topic {topic}: {args.events - day_events:,} events over {args.days} days, then the night's day "
              f"({day_events:,})", flush=True)
        started = time.monotonic()
        before = _produce(args, topic, args.events - day_events, args.days, args.seed, DEFAULT_START)
        night = _produce(args, topic, day_events, 1, args.seed + 1,
                         DEFAULT_START + timedelta(days=args.days, microseconds=MAX_JITTER_US))
        print(f"  produced in {time.monotonic() - started:.1f} s; ends before the night {before}, after it {night}",
              flush=True)
        setup = run_fresh(worker_command("nightly_live", out_dir, args.bootstrap, topic, json.dumps(before),
                                         json.dumps(night)), workers_log)
        print("\n".join(setup.stdout.strip().splitlines()[:-1]), flush=True)
        if setup.returncode:
            raise RuntimeError(f"the archive, backfill and handoff before the night failed; see {workers_log}")
        result = setup.figures()
        stream = start_service(switchyard_command("stream", "--pipeline", PIPELINE, "--warehouse", live.warehouse,
                                                  "--bootstrap", args.bootstrap, "--no-switch-back"),
                               stream_log, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        result["stream_start_to_day_streamed_s"] = _wait_for(
            "the stream to stream the night's day", lambda: _streamed(live, night), stream, stream_log, args.timeout)
        print(f"  the stream started and streamed the night's day: {result['stream_start_to_day_streamed_s']:.1f} s",
              flush=True)
        archived = run_fresh(switchyard_command("archive", "--pipeline", PIPELINE, "--warehouse", live.warehouse,
                                                "--bootstrap", args.bootstrap, "--topic", topic,
                                                "--until-offsets", json.dumps(night)), workers_log)
        if archived.returncode:
            raise RuntimeError(f"`switchyard archive` of the night's day failed; see {workers_log}")
        result["archive_the_day_s"] = round(archived.seconds, 2)
        print(f"  `switchyard archive` of the night's day: {archived.seconds:.1f} s (its process and JVM included)",
              flush=True)
        day = result["new_days"][0]
        print(f"  the night: {day} rebased under the live stream", flush=True)
        rebases = [_rebase(live, args.bootstrap, day, stream_log, args.timeout)]
        print(f"  {day} rebased again over itself", flush=True)
        rebases.append(_rebase(live, args.bootstrap, day, stream_log, args.timeout))
        code, stream = terminate(stream, timeout=180), None
        if code != 0:
            raise RuntimeError(f"the stream exited with {code} on SIGTERM; see {stream_log}")
    finally:
        if stream is not None:
            terminate(stream, timeout=180)
        delete_topics(args.bootstrap, [topic])
    backfills = steps(live)  # the backfill before the night, then each rebase's
    for label, rebase, step in zip(("the night", "the same day again"), rebases, backfills[-2:]):
        _show(label, rebase, step)
    full_state = read_state(full.warehouse)
    rounding = _state_rounding(full_state)
    rebased = compare_states(read_state(live.warehouse, rebases[0]["state_version"]), full_state, abs_tol=rounding)
    latest = compare_states(read_state(live.warehouse), full_state, abs_tol=rounding)
    night_rebase, again = rebases
    result.update({
        "records_of_the_day": night_rebase["records_read"],
        "new_day_s": night_rebase["seconds"], "day_again_s": again["seconds"],
        "new_day_share": round(night_rebase["seconds"] / result["full_backfill_s"], 3),
        "day_again_share": round(again["seconds"] / result["full_backfill_s"], 3),
        # both comparisons summed: the night's rebased state, and the state after the second rebase and the resume
        "states": {"keys": full_state.num_rows, "keys_different": rebased["keys_different"] + latest["keys_different"],
                   "rebased_at_the_night": rebased, "after_the_second_rebase": latest},
        "reconciliation_keys_different": sum(r["reconciliation"]["keys_different"] for r in rebases),
        "rebases": {"the_night": night_rebase, "the_day_again": again}, "steps_of_the_live_warehouse": backfills})
    return report(figures, result, args.json)

