"""One arm of the burst scenario: set up a switched pipeline (in a fresh process), start the stream, trickle,
burst, measure until it is caught up past the burst, stop; the parent process never starts a JVM."""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.burst_inputs import Trickle, backlog_record, burst_records
from benchmarks.harness import MemorySampler, run_fresh, start_service, switchyard_command, terminate, worker_command
from switchyard.state_handoff.control import details, handoff_log, requests
from switchyard.state_handoff.control.details import Lag
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.io import delta_cas
from switchyard.state_handoff.tables import Tables

PIPELINE = "demo"


def worker(argv: list[str]) -> dict:
    """In a fresh process (its own JVM): archive the backlog whole, backfill, hand off."""
    from switchyard.deploy.spark import build_spark
    from switchyard.jobs.archive import archive_cut, run_archive
    from switchyard.jobs.backfill import run_backfill
    from switchyard.jobs.handoff import run_handoff
    from switchyard.state_handoff.language.pipelines import get_pipeline

    warehouse, bootstrap, topic = argv

    pipeline = get_pipeline(PIPELINE)
    tables = Tables(warehouse, pipeline.name)
    started = time.monotonic()
    quiet = lambda *_: None  # noqa: E731
    spark = build_spark("switchyard-burst-setup")
    run_archive(spark, pipeline, tables, bootstrap, topic, archive_cut(bootstrap, topic, fraction=1.0), out=quiet)
    run_backfill(spark, pipeline, tables, out=quiet)
    handoff = run_handoff(spark, pipeline, tables, bootstrap)
    spark.stop()
    return {"handoff_id": handoff.handoff_id, "seconds": round(time.monotonic() - started, 3)}


@dataclass
class Arm:
    arm: str
    switch_back: bool
    topic: str
    warehouse: str
    setup_s: float | None = None
    stream_start_to_caught_up_s: float | None = None
    burst_produce_s: float | None = None
    burst_end_offsets: dict = field(default_factory=dict)
    caught_up_s: float | None = None            # burst's first record -> CAUGHT_UP past the burst
    caught_up_from: str | None = None           # "log" (a CAUGHT_UP entry) or "progress" (never fell behind)
    caught_up_offsets_behind: int | None = None
    caught_up_state_updates_behind: int | None = None  # updates sent but not yet merged into `state` then
    burst_read_s: float | None = None           # burst -> both readers past its last record (from the progress)
    falling_behind_s: float | None = None
    switch_back_s: float | None = None          # burst -> REBASE_REQUESTED (the decision)
    switch_back_behind: int | None = None
    paused_s: float | None = None
    handoff_committed_s: float | None = None
    rebase_s: float | None = None               # the rebase's own figure: pause -> HANDOFF_COMMITTED
    rebase_tiles_s: dict | None = None          # of it, the tiles run's steps (archived days not yet tiled)
    rebase_commit_s: dict | None = None         # of it, the commit's steps (BACKFILL_COMMITTED's commit_s)
    switched_again_s: float | None = None       # burst -> SWITCHED of the new handoff
    rebases: int = 0
    reconciliation_keys_different: int | None = None
    peak_offsets_behind: int = 0
    trickle_at_caught_up: int | None = None
    trickle_sent: int = 0
    trickle_stopped_before_caught_up: bool = False
    final_caught_up_s: float | None = None      # trickle's end -> offsets behind 0 and state current
    exit_code: int | None = None
    peak_jvm_mb: float = 0.0
    peak_python_mb: float = 0.0
    state_rows: int | None = None
    dead_letter_rows: int | None = None
    statuses: list = field(default_factory=list)  # the log after the burst: (seconds since the burst, status, handoff)
    timeline: list = field(default_factory=list)  # (seconds since the burst, offsets behind or None while rebasing)


def _wall(at: datetime) -> float:
    """A log entry's `at` (naive UTC) as epoch seconds."""
    return (at if at.tzinfo else at.replace(tzinfo=timezone.utc)).timestamp()


def current_handoff_id(entries: list) -> str | None:
    """The handoff the stream streams (the last HANDOFF_COMMITTED in `entries`)."""
    committed = [e for e in entries if e.status == Status.HANDOFF_COMMITTED]
    return committed[-1].handoff_id if committed else None


def progress_of(tables: Tables, handoff_id: str | None) -> dict | None:
    """The stream's progress.json of a handoff: its lag, the latest offsets, `state`'s updates behind."""
    from switchyard.state_handoff.stream.layout import read_json, stream_dir

    return read_json(stream_dir(tables, handoff_id) / "progress.json") if handoff_id else None


def offsets_behind(figures: dict | Lag | None) -> int | None:
    """Offsets behind latest over every partition, from a progress snapshot or a CAUGHT_UP or FALLING_BEHIND
    entry's figures."""
    lag = figures.offsets_behind if isinstance(figures, Lag) else (figures or {}).get("offsets_behind")
    return sum(int(v) for v in lag.values()) if isinstance(lag, dict) else None


def position_passed(figures: dict | Lag, end: dict[int, int]) -> bool:
    """Whether latest - behind (the slower reader's position) has reached `end` in every partition."""
    if isinstance(figures, Lag):
        latest, lag = figures.latest_offsets or {}, figures.offsets_behind or {}
    else:
        latest, lag = figures.get("latest_offsets") or {}, figures.get("offsets_behind") or {}
    try:
        return all(int(latest[str(p)]) - int(lag[str(p)]) >= o for p, o in end.items())
    except (KeyError, TypeError, ValueError):
        try:  # an in-memory dict keyed by int
            return all(int(latest[p]) - int(lag[p]) >= o for p, o in end.items())
        except (KeyError, TypeError, ValueError):
            return False


class ArmRun:
    """Set up, start the stream, trickle, burst, measure, stop; the parent process never starts a JVM."""

    def __init__(self, arm: Arm, bootstrap: str, args: dict, log: Path, out):
        self.arm, self.bootstrap, self.args, self.log, self.out = arm, bootstrap, args, log, out
        self.tables = Tables(arm.warehouse, PIPELINE)
        self.proc: subprocess.Popen | None = None
        self.trickle: Trickle | None = None
        self.burst_start: float | None = None
        self._sampling = threading.Event()

    # ------------------------------------------------------------ helpers

    def say(self, line: str) -> None:
        self.out(f"  [{self.arm.arm}] {line}")

    def entries(self) -> list:
        return handoff_log.entries(self.tables)

    def check_alive(self, entries: list | None = None) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"arm {self.arm.arm}: the stream exited with {self.proc.returncode}; see {self.log}")
        for e in entries or []:
            if e.status == Status.FAILED:
                raise RuntimeError(f"arm {self.arm.arm}: FAILED in the log: {details.of(e).reason}; "
                                   f"see {self.log}")

    def _sample(self) -> None:
        memory = MemorySampler(self.proc.pid)
        while not self._sampling.is_set() and self.proc is not None and self.proc.poll() is None:
            jvm, python = memory.sample()
            self.arm.peak_jvm_mb = max(self.arm.peak_jvm_mb, round(jvm))
            self.arm.peak_python_mb = max(self.arm.peak_python_mb, round(python))
            if self.burst_start is not None:
                try:
                    progress = progress_of(self.tables, current_handoff_id(self.entries())) or {}
                except Exception:  # the log mid-commit: next time
                    progress = {}
                fresh = progress.get("updated", 0) >= time.time() - 2
                behind = offsets_behind(progress) if fresh else None
                if behind is not None:
                    self.arm.peak_offsets_behind = max(self.arm.peak_offsets_behind, behind)
                    end = self.arm.burst_end_offsets
                    if self.arm.burst_read_s is None and end and position_passed(progress, end):
                        self.arm.burst_read_s = round(progress["updated"] - self.burst_start, 2)
                since = round(time.time() - self.burst_start)
                if not self.arm.timeline or self.arm.timeline[-1][0] != since:
                    self.arm.timeline.append((since, behind))
            time.sleep(0.5)

    # ------------------------------------------------------------ the phases

    def setup(self) -> None:
        a = self.args
        from switchyard.state_handoff.io.kafka_io import create_topic, produce

        create_topic(self.bootstrap, self.arm.topic, partitions=a["partitions"])
        produce(self.bootstrap, self.arm.topic,
                (backlog_record(i, a["backlog"], a["keys"], a["seed"]) for i in range(a["backlog"])))
        self.say(f"backlog of {a['backlog']:,} records on {self.arm.topic}; archive + backfill + handoff")
        done = run_fresh(worker_command("burst_arm", self.arm.warehouse, self.bootstrap, self.arm.topic), self.log)
        if done.returncode != 0:
            raise RuntimeError(f"arm {self.arm.arm}: the setup failed ({done.returncode}); see {self.log}")
        figures = done.figures()
        self.arm.setup_s = figures["seconds"]
        self.say(f"set up in {figures['seconds']:.1f}s (handoff {figures['handoff_id']})")

    def start_stream(self) -> None:
        a = self.args
        cmd = switchyard_command("stream", "--pipeline", PIPELINE, "--warehouse", self.arm.warehouse,
                                 "--bootstrap", self.bootstrap, "--caught-up-lag", a["caught_up_lag"])
        if self.arm.switch_back:
            cmd += ["--switch-back-lag", str(a["switch_back_lag"]), "--switch-back-after", str(a["switch_back_after"])]
        else:
            cmd += ["--no-switch-back"]
        self.proc = start_service(cmd, self.log)
        threading.Thread(target=self._sample, daemon=True).start()
        started = time.monotonic()
        shown = started
        handoff_id = current_handoff_id(self.entries())
        while True:
            entries = self.entries()
            self.check_alive(entries)
            if any(e.status == Status.CAUGHT_UP and e.handoff_id == handoff_id for e in entries):
                break
            if time.monotonic() - started > a["timeout"]:
                raise RuntimeError(f"arm {self.arm.arm}: the stream was not caught up within {a['timeout']:.0f}s")
            if time.monotonic() - shown >= 15:
                shown = time.monotonic()
                self.say(f"waiting for the stream: {entries[-1].status if entries else '-'} after "
                         f"{shown - started:.0f}s")
            time.sleep(0.5)
        self.arm.stream_start_to_caught_up_s = round(time.monotonic() - started, 1)
        self.say(f"stream SWITCHED and CAUGHT_UP {self.arm.stream_start_to_caught_up_s:.1f}s after its start")

    def warm_up(self, stop_at: int | None) -> None:
        """The trickle on, for `warmup_seconds` and until the stream is caught up under it."""
        a = self.args
        self.trickle = Trickle(self.bootstrap, self.arm.topic, a["rate"], a["keys"], a["seed"], stop_at=stop_at)
        self.trickle.start()
        started = time.monotonic()
        time.sleep(a["warmup_seconds"])
        while True:
            entries = self.entries()
            self.check_alive(entries)
            handoff_id = current_handoff_id(entries)
            mine = [e for e in entries if e.handoff_id == handoff_id]
            if mine and mine[-1].status == Status.CAUGHT_UP:
                break
            if time.monotonic() - started > a["timeout"]:
                raise RuntimeError(f"arm {self.arm.arm}: not caught up under the trickle within {a['timeout']:.0f}s")
            time.sleep(0.5)
        progress = progress_of(self.tables, current_handoff_id(self.entries())) or {}
        self.say(f"trickle at {a['rate']:,}/s for {time.monotonic() - started:.0f}s ({self.trickle.sent:,} sent), "
                 f"offsets behind {offsets_behind(progress)}; the burst of {a['events']:,} records")

    def burst(self) -> None:
        from switchyard.state_handoff.io.kafka_io import offset_bounds, produce

        a = self.args
        self.burst_start = time.time()

        def progress(sent: int) -> None:
            self.say(f"burst: {sent:,} of {a['events']:,} produced in {time.time() - self.burst_start:.0f}s")

        produce(self.bootstrap, self.arm.topic, burst_records(a["events"], a["keys"], a["seed"]),
                on_progress=progress, progress_every=max(100_000, a["events"] // 10))
        self.arm.burst_produce_s = round(time.time() - self.burst_start, 2)
        # Every burst record lies below the topic's ends now (the trickle's records around them too).
        self.arm.burst_end_offsets = {p: hi for p, (_, hi) in offset_bounds(self.bootstrap, self.arm.topic).items()}
        self.say(f"burst produced in {self.arm.burst_produce_s:.1f}s ({a['events'] / self.arm.burst_produce_s:,.0f} "
                 f"records/s); ends {self.arm.burst_end_offsets}")

    def wait_caught_up_after_burst(self) -> None:
        a, arm = self.args, self.arm
        t0, end = self.burst_start, arm.burst_end_offsets
        shown = time.monotonic()
        while True:
            entries = self.entries()
            self.check_alive([e for e in entries if _wall(e.at) >= t0])
            after = [e for e in entries if _wall(e.at) >= t0]
            current = current_handoff_id(entries)
            for e in after:
                s = round(_wall(e.at) - t0, 2)
                if e.status == Status.FALLING_BEHIND and arm.falling_behind_s is None:
                    arm.falling_behind_s = s
                    arm.peak_offsets_behind = max(arm.peak_offsets_behind, offsets_behind(details.of(e)) or 0)
                elif e.status == Status.REBASE_REQUESTED and arm.switch_back_s is None:
                    behind = requests.read(e).fields.get("behind")  # a switch back's lag (jobs/stream/monitor.py)
                    arm.switch_back_s, arm.switch_back_behind = s, behind
                    arm.peak_offsets_behind = max(arm.peak_offsets_behind, behind or 0)
                elif e.status == Status.PAUSED and arm.paused_s is None:
                    arm.paused_s = s
                elif e.status == Status.BACKFILL_COMMITTED and arm.rebase_commit_s is None:
                    arm.rebase_tiles_s, arm.rebase_commit_s = details.of(e).tiles_s, details.of(e).commit_s
                elif e.status == Status.HANDOFF_COMMITTED and arm.handoff_committed_s is None:
                    arm.handoff_committed_s, arm.rebase_s = s, details.of(e).rebase_s
                elif e.status == Status.SWITCHED and arm.switched_again_s is None:
                    arm.switched_again_s = s
            caught = next((e for e in after if e.status == Status.CAUGHT_UP and e.handoff_id == current
                           and position_passed(details.of(e), end)), None)
            if caught is not None:
                arm.caught_up_s, arm.caught_up_from = round(_wall(caught.at) - t0, 2), "log"
                arm.caught_up_offsets_behind = offsets_behind(details.of(caught))
                arm.caught_up_state_updates_behind = details.of(caught).state_updates_behind
                break
            # Under live input the events query's batches set how far behind a caught-up stream hovers (after a
            # burst its window tables are larger, its batches longer): both readers past the burst's end is
            # caught up whether or not the lag has come under the stream's own bar. How far `state` trails the
            # updates then is a figure of its own (it converges once the input stops, before the comparison).
            progress = progress_of(self.tables, current) or {}
            if progress.get("updated", 0) > t0 + arm.burst_produce_s and position_passed(progress, end):
                arm.caught_up_s = round(progress["updated"] - t0, 2)
                arm.caught_up_from = "progress"
                arm.caught_up_offsets_behind = offsets_behind(progress)
                arm.caught_up_state_updates_behind = progress.get("state_updates_behind")
                break
            if time.time() - t0 > a["timeout"]:
                raise RuntimeError(f"arm {arm.arm}: not caught up within {a['timeout']:.0f}s of the burst")
            if time.monotonic() - shown >= 15:
                shown = time.monotonic()
                progress = progress_of(self.tables, current) or {}
                state = after[-1].status if after else "CAUGHT_UP (before the burst)"
                self.say(f"{time.time() - t0:.0f}s since the burst: {state}, offsets behind "
                         f"{offsets_behind(progress)}, peak {arm.peak_offsets_behind:,}, "
                         f"trickle {self.trickle.sent:,} sent")
            time.sleep(0.5)
        arm.trickle_at_caught_up = self.trickle.sent
        arm.trickle_stopped_before_caught_up = self.trickle.stop_at is not None and \
            self.trickle.sent >= self.trickle.stop_at
        self.say(f"CAUGHT_UP {arm.caught_up_s:.1f}s after the burst's first record "
                 f"({arm.caught_up_offsets_behind} offsets behind, {arm.caught_up_state_updates_behind} updates not "
                 f"yet in state, trickle {arm.trickle_at_caught_up:,} sent)")

    def finish(self, stop_at: int) -> None:
        """The trickle to `stop_at`, the stream to offsets behind 0 with the state current, then SIGTERM."""
        a, arm = self.args, self.arm
        self.trickle.stop_at = stop_at
        shown = time.monotonic()
        while self.trickle.is_alive():
            self.check_alive()
            if time.monotonic() - shown >= 15:
                shown = time.monotonic()
                self.say(f"trickle to {stop_at:,}: {self.trickle.sent:,} sent")
            time.sleep(0.5)
        if self.trickle.failures:
            raise RuntimeError(f"arm {arm.arm}: {len(self.trickle.failures)} trickle records not acknowledged: "
                               f"{self.trickle.failures[0]!r}")
        arm.trickle_sent = self.trickle.sent
        ended = self.trickle.finished_at
        while True:
            entries = self.entries()
            self.check_alive([e for e in entries if _wall(e.at) >= self.burst_start])
            progress = progress_of(self.tables, current_handoff_id(entries)) or {}
            if progress.get("updated", 0) > ended + 1 and offsets_behind(progress) == 0 and \
                    progress.get("state_updates_behind") == 0 and progress.get("lag_error") is None:
                break
            if time.time() - ended > a["timeout"]:
                raise RuntimeError(f"arm {arm.arm}: not at offsets behind 0 within {a['timeout']:.0f}s")
            time.sleep(0.5)
        arm.final_caught_up_s = round(time.time() - ended, 1)
        self.say(f"trickle stopped at {arm.trickle_sent:,}; offsets behind 0 {arm.final_caught_up_s:.1f}s later; "
                 "stopping the stream")
        arm.exit_code = self.stop_stream()
        if arm.exit_code != 0:
            raise RuntimeError(f"arm {arm.arm}: the stream exited with {arm.exit_code} on SIGTERM; see {self.log}")

    def stop_stream(self) -> int | None:
        if self.proc is None:
            return None
        try:
            return terminate(self.proc, timeout=180)
        finally:
            self._sampling.set()

    def collect(self) -> None:
        from switchyard.state_handoff.control.status import pipeline_status

        status = pipeline_status(self.tables)
        self.arm.rebases = status.get("rebases", 0)
        self.arm.reconciliation_keys_different = status.get("last_reconciliation_keys_different")
        self.arm.statuses = [(round(_wall(e.at) - self.burst_start, 2), e.status, e.handoff_id)
                             for e in self.entries() if _wall(e.at) >= self.burst_start]
        try:
            from deltalake import DeltaTable

            self.arm.dead_letter_rows = delta_cas.read(DeltaTable(self.tables.dead_letter), ["kafka_offset"]).num_rows
        except Exception:  # informative only
            self.arm.dead_letter_rows = None

    def close(self) -> None:
        if self.trickle is not None:
            self.trickle.halt()
        if self.proc is not None and self.proc.poll() is None:
            self.stop_stream()
        self._sampling.set()
