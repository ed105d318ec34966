"""`switchyard bench-burst`: a stream live at a steady rate receives a burst; the time until it is caught up
again, (A) without switch back and (B) with it, one arm after the other, both ending in identical state.

Each arm has a warehouse folder and a topic of its own (an archive grows along one topic only) and the same
records: a small archived backlog (backfill + handoff in a fresh process), a deterministic trickle at `rate`
events/s (record i is the same in both arms, its event time derived from i, never from the clock) and a
deterministic burst of `events` records produced as fast as the client can. The clock runs from the burst's
first record until the stream on its current handoff has both readers past the burst's last record: the first
CAUGHT_UP entry past it, or the first progress snapshot past it, whichever comes first. The progress counts
because under live input a caught-up stream hovers as far behind as its events query's batches are long (5 s
trigger plus the batch), and after a burst its window tables are larger and its batches longer: at 10^6 arm A
hovered 20-45k offsets behind at 1,000 events/s, above the stream's own bar of `rate` x `caught_up_seconds`,
long after it had read the burst. How many updates `state` still had to merge then is reported beside it.

The trickle goes on through the burst and stops at one fixed count for both arms: the first arm (A) sets it
to its count when caught up plus `margin_seconds` of input, and keeps trickling until there; B stops at the
same count. Then each stream catches up to offsets behind 0 and is stopped with SIGTERM (exit 0 expected),
and the two `state` tables are compared key by key (doubles to 1e-9 relative).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from state_handoff import delta_cas, handoff_log
from state_handoff.errors import UserError
from state_handoff.tables import Tables

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = "demo"
ARMS = {"A": "no switch back", "B": "switch back"}

# Event times: the backlog in the two hours before BASE, every streamed record (trickle and burst) inside the
# nine minutes after it, so no streamed record is ever late (the demo allows 10 minutes) however the arms batch.
BASE = datetime(2026, 1, 1, tzinfo=timezone.utc)
STREAMED_SPAN_US = 9 * 60 * 1_000_000
MALFORMED_SHARE = 0.001
ZIPF_EXPONENT = 1.1
_CHUNK = 1 << 16
_MASK = (1 << 64) - 1


# ---------------------------------------------------------------- the records (deterministic)

def _mix(x: int) -> int:
    """splitmix64's finalizer on a Python int."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _value(event_id: str, key: str, when_us: int, cents: int, kind: str) -> bytes:
    when = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=when_us)
    return (f'{{"event_id":"{event_id}","key":"{key}","event_time":"{when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}",'
            f'"amount":{cents / 100!r},"kind":"{kind}"}}').encode()


def _base_us() -> int:
    return (BASE - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(microseconds=1)


def backlog_record(i: int, n: int, keys: int, seed: int) -> tuple[bytes, bytes]:
    """Record i of the archived backlog: event times spread over BASE - 2h .. BASE - 20min."""
    h = _mix(i ^ (seed << 40) ^ 0x5EED)
    key = f"key-{h % keys:06d}"
    when = _base_us() - 2 * 3600 * 1_000_000 + i * (100 * 60 * 1_000_000 // max(n, 1))
    return key.encode(), _value(f"s{seed}-{i}", key, when, (h >> 24) % 110_001 - 10_000, "backlog")


def trickle_record(i: int, keys: int, seed: int) -> tuple[bytes, bytes]:
    """Record i of the steady input: the same in every arm, whenever it is sent."""
    h = _mix(i ^ (seed << 40) ^ 0x7121C)
    key = f"key-{h % keys:06d}"
    when = _base_us() + (h >> 20) % STREAMED_SPAN_US
    return key.encode(), _value(f"t{seed}-{i}", key, when, (h >> 8) % 110_001 - 10_000, "trickle")


def burst_records(n: int, keys: int, seed: int):
    """The burst: `n` records, Zipf-skewed keys, a 0.1% share malformed; same arguments, same bytes."""
    import numpy as np

    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, keys + 1, dtype=np.float64) ** ZIPF_EXPONENT
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    base_us = _base_us()
    for lo in range(0, n, _CHUNK):
        size = min(n, lo + _CHUNK) - lo
        key_idx = np.minimum(np.searchsorted(cdf, rng.random(size), side="right"), keys - 1).tolist()
        when = (base_us + rng.integers(0, STREAMED_SPAN_US, size=size)).astype("datetime64[us]")
        times = np.datetime_as_string(when, unit="us", timezone="UTC").tolist()
        amounts = (rng.integers(-10_000, 100_000, size=size, endpoint=True) / 100).tolist()
        bad = (rng.random(size) < MALFORMED_SHARE).tolist()
        for j in range(size):
            key = f"key-{key_idx[j]:06d}"
            if bad[j]:
                yield key.encode(), b"not json {"
            else:
                yield key.encode(), (f'{{"event_id":"b{seed}-{lo + j}","key":"{key}","event_time":"{times[j]}",'
                                     f'"amount":{amounts[j]!r},"kind":"burst"}}').encode()


class Trickle(threading.Thread):
    """Sends trickle_record(0), (1), ... at `rate` per second until `stop_at` records (when set) or halt()."""

    def __init__(self, bootstrap: str, topic: str, rate: int, keys: int, seed: int, stop_at: int | None = None):
        super().__init__(daemon=True, name=f"trickle-{topic}")
        self.bootstrap, self.topic, self.rate, self.keys, self.seed = bootstrap, topic, rate, keys, seed
        self.stop_at = stop_at
        self.sent = 0
        self.failures: list = []
        self.finished_at: float | None = None
        self._halt = threading.Event()

    def halt(self) -> None:
        self._halt.set()

    def run(self) -> None:
        from state_handoff.kafka_io import paced, produce

        def records():
            for n in itertools.count():
                if self.stop_at is not None and n >= self.stop_at:
                    return
                self.sent = n + 1  # handed to the producer, which sends it at once
                yield trickle_record(n, self.keys, self.seed)

        try:
            produce(self.bootstrap, self.topic, paced(records(), self.rate, self._halt.is_set), linger_ms=5)
        except (RuntimeError, UserError) as err:  # records not acknowledged, or the broker gone: the burst reports them
            self.failures.append(err)
        finally:
            self.finished_at = time.time()


# ---------------------------------------------------------------- the setup worker (its own process and JVM)

def _setup_worker(warehouse: str, bootstrap: str, topic: str) -> dict:
    from deploy.spark import build_spark
    from jobs.archive import archive_cut, run_archive
    from jobs.backfill import run_backfill
    from state_handoff.handoff import run_handoff
    from state_handoff.pipelines import get_pipeline

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


# ---------------------------------------------------------------- one arm

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


def _current_handoff_id(entries: list) -> str | None:
    committed = [e for e in entries if e.status == handoff_log.HANDOFF_COMMITTED]
    return committed[-1].handoff_id if committed else None


def _progress(tables: Tables, handoff_id: str | None) -> dict | None:
    from state_handoff.stream_layout import read_json, stream_dir

    return read_json(stream_dir(tables, handoff_id) / "progress.json") if handoff_id else None


def _behind(figures: dict | None) -> int | None:
    lag = (figures or {}).get("offsets_behind")
    return sum(int(v) for v in lag.values()) if isinstance(lag, dict) else None


def _position_passed(figures: dict, end: dict[int, int]) -> bool:
    """Whether latest - behind (the slower reader's position) has reached `end` in every partition."""
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
        return handoff_log.entries(None, self.tables)

    def check_alive(self, entries: list | None = None) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"arm {self.arm.arm}: the stream exited with {self.proc.returncode}; see {self.log}")
        for e in entries or []:
            if e.status == handoff_log.FAILED:
                raise RuntimeError(f"arm {self.arm.arm}: FAILED in the log: {handoff_log.details(e).get('reason')}; "
                                   f"see {self.log}")

    def _sample(self) -> None:
        from jobs.bench import _tree_rss_mb

        while not self._sampling.is_set() and self.proc is not None and self.proc.poll() is None:
            jvm, python = _tree_rss_mb(self.proc.pid)
            self.arm.peak_jvm_mb = max(self.arm.peak_jvm_mb, round(jvm))
            self.arm.peak_python_mb = max(self.arm.peak_python_mb, round(python))
            if self.burst_start is not None:
                try:
                    progress = _progress(self.tables, _current_handoff_id(self.entries())) or {}
                except Exception:  # the log mid-commit: next time
                    progress = {}
                fresh = progress.get("updated", 0) >= time.time() - 2
                behind = _behind(progress) if fresh else None
                if behind is not None:
                    self.arm.peak_offsets_behind = max(self.arm.peak_offsets_behind, behind)
                    end = self.arm.burst_end_offsets
                    if self.arm.burst_read_s is None and end and _position_passed(progress, end):
                        self.arm.burst_read_s = round(progress["updated"] - self.burst_start, 2)
                since = round(time.time() - self.burst_start)
                if not self.arm.timeline or self.arm.timeline[-1][0] != since:
                    self.arm.timeline.append((since, behind))
            time.sleep(0.5)

    # ------------------------------------------------------------ the phases

    def setup(self) -> None:
        a = self.args
        from state_handoff.kafka_io import create_topic, produce

        create_topic(self.bootstrap, self.arm.topic, partitions=a["partitions"])
        produce(self.bootstrap, self.arm.topic,
                (backlog_record(i, a["backlog"], a["keys"], a["seed"]) for i in range(a["backlog"])))
        self.say(f"backlog of {a['backlog']:,} records on {self.arm.topic}; archive + backfill + handoff")
        cmd = [sys.executable, "-m", "jobs.burst", "setup", self.arm.warehouse, self.bootstrap, self.arm.topic]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=open(self.log, "a"), cwd=ROOT, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"arm {self.arm.arm}: the setup failed ({done.returncode}); see {self.log}")
        figures = json.loads(done.stdout.strip().splitlines()[-1])
        self.arm.setup_s = figures["seconds"]
        self.say(f"set up in {figures['seconds']:.1f}s (handoff {figures['handoff_id']})")

    def start_stream(self) -> None:
        a = self.args
        cmd = [sys.executable, "-m", "jobs.cli", "stream", "--pipeline", PIPELINE, "--warehouse", self.arm.warehouse,
               "--bootstrap", self.bootstrap, "--caught-up-lag", str(a["caught_up_lag"])]
        if self.arm.switch_back:
            cmd += ["--switch-back-lag", str(a["switch_back_lag"]), "--switch-back-after", str(a["switch_back_after"])]
        else:
            cmd += ["--no-switch-back"]
        with open(self.log, "a") as fh:
            fh.write(f"\n$ {' '.join(cmd)}\n")
        self.proc = subprocess.Popen(cmd, stdout=open(self.log, "a"), stderr=subprocess.STDOUT, cwd=ROOT,
                                     start_new_session=True)
        threading.Thread(target=self._sample, daemon=True).start()
        started = time.monotonic()
        shown = started
        handoff_id = _current_handoff_id(self.entries())
        while True:
            entries = self.entries()
            self.check_alive(entries)
            if any(e.status == handoff_log.CAUGHT_UP and e.handoff_id == handoff_id for e in entries):
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
            handoff_id = _current_handoff_id(entries)
            mine = [e for e in entries if e.handoff_id == handoff_id]
            if mine and mine[-1].status == handoff_log.CAUGHT_UP:
                break
            if time.monotonic() - started > a["timeout"]:
                raise RuntimeError(f"arm {self.arm.arm}: not caught up under the trickle within {a['timeout']:.0f}s")
            time.sleep(0.5)
        progress = _progress(self.tables, _current_handoff_id(self.entries())) or {}
        self.say(f"trickle at {a['rate']:,}/s for {time.monotonic() - started:.0f}s ({self.trickle.sent:,} sent), "
                 f"offsets behind {_behind(progress)}; the burst of {a['events']:,} records")

    def burst(self) -> None:
        from state_handoff.kafka_io import offset_bounds, produce

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
            current = _current_handoff_id(entries)
            for e in after:
                s = round(_wall(e.at) - t0, 2)
                details = handoff_log.details(e)
                if e.status == handoff_log.FALLING_BEHIND and arm.falling_behind_s is None:
                    arm.falling_behind_s = s
                    arm.peak_offsets_behind = max(arm.peak_offsets_behind, _behind(details) or 0)
                elif e.status == handoff_log.REBASE_REQUESTED and arm.switch_back_s is None:
                    arm.switch_back_s, arm.switch_back_behind = s, details.get("behind")
                    arm.peak_offsets_behind = max(arm.peak_offsets_behind, details.get("behind") or 0)
                elif e.status == handoff_log.PAUSED and arm.paused_s is None:
                    arm.paused_s = s
                elif e.status == handoff_log.HANDOFF_COMMITTED and arm.handoff_committed_s is None:
                    arm.handoff_committed_s, arm.rebase_s = s, details.get("rebase_s")
                elif e.status == handoff_log.SWITCHED and arm.switched_again_s is None:
                    arm.switched_again_s = s
            caught = next((e for e in after if e.status == handoff_log.CAUGHT_UP and e.handoff_id == current
                           and _position_passed(handoff_log.details(e), end)), None)
            if caught is not None:
                arm.caught_up_s, arm.caught_up_from = round(_wall(caught.at) - t0, 2), "log"
                arm.caught_up_offsets_behind = _behind(handoff_log.details(caught))
                arm.caught_up_state_updates_behind = handoff_log.details(caught).get("state_updates_behind")
                break
            # Under live input the events query's batches set how far behind a caught-up stream hovers (after a
            # burst its window tables are larger, its batches longer): both readers past the burst's end is
            # caught up whether or not the lag has come under the stream's own bar. How far `state` trails the
            # updates then is a figure of its own (it converges once the input stops, before the comparison).
            progress = _progress(self.tables, current) or {}
            if progress.get("updated", 0) > t0 + arm.burst_produce_s and _position_passed(progress, end):
                arm.caught_up_s = round(progress["updated"] - t0, 2)
                arm.caught_up_from = "progress"
                arm.caught_up_offsets_behind = _behind(progress)
                arm.caught_up_state_updates_behind = progress.get("state_updates_behind")
                break
            if time.time() - t0 > a["timeout"]:
                raise RuntimeError(f"arm {arm.arm}: not caught up within {a['timeout']:.0f}s of the burst")
            if time.monotonic() - shown >= 15:
                shown = time.monotonic()
                progress = _progress(self.tables, current) or {}
                state = after[-1].status if after else "CAUGHT_UP (before the burst)"
                self.say(f"{time.time() - t0:.0f}s since the burst: {state}, offsets behind {_behind(progress)}, "
                         f"peak {arm.peak_offsets_behind:,}, trickle {self.trickle.sent:,} sent")
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
            progress = _progress(self.tables, _current_handoff_id(entries)) or {}
            if progress.get("updated", 0) > ended + 1 and _behind(progress) == 0 and \
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
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            return None
        finally:
            self._sampling.set()

    def collect(self) -> None:
        from state_handoff.status import pipeline_status

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


# ---------------------------------------------------------------- the comparison

def read_state(warehouse: str):
    from deltalake import DeltaTable

    return delta_cas.read(DeltaTable(Tables(warehouse, PIPELINE).state), order_by="key")


def compare_states(left, right, rel: float = 1e-9) -> dict:
    """Key by key, column by column; doubles to `rel` relative (sums add in a different order per arm)."""
    import math

    import pyarrow as pa

    result = {"rows": [left.num_rows, right.num_rows], "identical": False, "columns_different": {}, "examples": []}
    if sorted(left.column_names) != sorted(right.column_names):
        result["columns"] = [left.column_names, right.column_names]
        return result
    if left.num_rows != right.num_rows or left.column("key").to_pylist() != right.column("key").to_pylist():
        lk, rk = set(left.column("key").to_pylist()), set(right.column("key").to_pylist())
        result["keys_only_left"] = sorted(lk - rk)[:5]
        result["keys_only_right"] = sorted(rk - lk)[:5]
        return result
    keys = left.column("key").to_pylist()
    for name in left.column_names:
        a, b = left.column(name).to_pylist(), right.column(name).to_pylist()
        floating = pa.types.is_floating(left.schema.field(name).type)

        def same(x, y):
            if x is None or y is None:
                return x is None and y is None
            if floating:
                if math.isnan(x) or math.isnan(y):
                    return math.isnan(x) and math.isnan(y)
                return x == y or abs(x - y) <= rel * max(abs(x), abs(y))
            return x == y

        bad = [i for i, (x, y) in enumerate(zip(a, b)) if not same(x, y)]
        if bad:
            result["columns_different"][name] = len(bad)
            result["examples"] += [{"key": keys[i], "column": name, "left": str(a[i]), "right": str(b[i])}
                                   for i in bad[:3]]
    result["identical"] = not result["columns_different"]
    return result


# ---------------------------------------------------------------- the bench

def run_burst_bench(bootstrap: str, events: int = 1_000_000, rate: int = 1000, json_file: str | None = None,
                    out_dir: str = "bench-out", keys: int = 100_000, partitions: int = 4, backlog: int = 10_000,
                    switch_back_lag: int = 100_000, switch_back_after: float = 10.0,
                    caught_up_seconds: float = 20.0, warmup_seconds: float = 10.0, margin_seconds: float = 30.0,
                    seed: int = 42, timeout: float = 3600.0, keep_topics: bool = False, out=print) -> dict:
    if events < 1 or rate < 1 or backlog < 1 or keys < 1 or partitions < 1:
        raise UserError("--events, --rate, --backlog, --keys and --partitions must be at least 1")
    if switch_back_lag >= events:
        out(f"note: --switch-back-lag {switch_back_lag:,} is not below the burst ({events:,}): B may never switch back")
    stamp = int(time.time())
    base = Path(out_dir).resolve() / f"burst-n{events}-r{rate}-s{seed}"
    base.mkdir(parents=True, exist_ok=True)
    caught_up_lag = max(1, int(rate * caught_up_seconds))
    args = {"events": events, "rate": rate, "keys": keys, "partitions": partitions, "backlog": backlog,
            "switch_back_lag": switch_back_lag, "switch_back_after": switch_back_after,
            "caught_up_lag": caught_up_lag, "caught_up_seconds": caught_up_seconds,
            "falling_behind_lag": max(10 * caught_up_lag, 1000), "warmup_seconds": warmup_seconds,
            "margin_seconds": margin_seconds, "seed": seed, "timeout": timeout,
            "max_offsets_per_trigger": "stream default"}
    out(f"switchyard bench-burst: a stream at {rate:,} events/s receives a burst of {events:,} records; "
        f"A without switch back, B with it (lag > {switch_back_lag:,} for {switch_back_after:g}s); "
        f"caught up at <= {caught_up_lag:,} offsets behind ({caught_up_seconds:g}s of input)")
    arms: dict[str, Arm] = {}
    stop_at: int | None = None
    topics = []
    try:
        for label, switch_back in (("A", False), ("B", True)):
            folder = base / label
            shutil.rmtree(folder, ignore_errors=True)  # an archive grows along one topic only: a fresh one per arm
            folder.mkdir(parents=True)
            arm = Arm(label, switch_back, f"burst.{stamp}.{label}", str(folder / "warehouse"))
            topics.append(arm.topic)
            arms[label] = arm
            out(f"arm {label} ({ARMS[label]}): {folder}")
            run = ArmRun(arm, bootstrap, args, folder / "arm.log", out)
            try:
                run.setup()
                run.start_stream()
                run.warm_up(stop_at)
                run.burst()
                run.wait_caught_up_after_burst()
                if stop_at is None:  # the first arm fixes the trickle's count for both
                    stop_at = run.trickle.sent + int(rate * margin_seconds)
                    out(f"  [{label}] the trickle stops at {stop_at:,} records in both arms")
                run.finish(stop_at)
                run.collect()
            finally:
                run.close()
    finally:
        if not keep_topics:
            _delete_topics(bootstrap, topics)
    comparison = compare_states(read_state(arms["A"].warehouse), read_state(arms["B"].warehouse))
    for arm in arms.values():
        arm.state_rows = comparison["rows"][0 if arm.arm == "A" else 1]
    a, b = arms["A"], arms["B"]
    speedup = round(a.caught_up_s / b.caught_up_s, 3) if a.caught_up_s and b.caught_up_s else None
    result = {
        "events": events, "rate": rate, "parameters": args, "machine": f"{os.cpu_count()} cores",
        "seconds_to_caught_up": {"A": a.caught_up_s, "B": b.caught_up_s},
        "speedup_A_over_B": speedup, "aim_2x_met": speedup is not None and speedup >= 2.0,
        "seconds_to_burst_read": {"A": a.burst_read_s, "B": b.burst_read_s},
        # B's rebase moves its readers past the burst at once, with the input that came during the rebase still
        # ahead of them: past the burst *and* under the stream's own bar is the stricter common finish line.
        "seconds_to_under_bar": {k: _first_under(arm, args["caught_up_lag"]) for k, arm in arms.items()},
        "states_identical": comparison["identical"], "comparison": comparison,
        "trickle_records": stop_at, "arms": {k: asdict(v) for k, v in arms.items()},
    }
    if json_file:
        Path(json_file).parent.mkdir(parents=True, exist_ok=True)
        Path(json_file).write_text(json.dumps(result, indent=2, default=str))
    out(burst_table(result))
    if not comparison["identical"]:
        raise RuntimeError(f"A and B ended in different state: {json.dumps(comparison, default=str)[:2000]}")
    return result


def _delete_topics(bootstrap: str, topics: list[str]) -> None:
    from state_handoff.kafka_io import admin_client

    try:
        with admin_client(bootstrap) as admin:
            admin.delete_topics(topics)
    except Exception as err:  # housekeeping only
        print(f"could not delete the bench topics {topics}: {err}", file=sys.stderr)


def _first_under(arm: Arm, bar: int) -> float | None:
    """Seconds from the burst to the first sampled moment, once its readers were past it, at or under `bar`."""
    if arm.caught_up_s is None:
        return None
    return next((float(s) for s, behind in arm.timeline if behind is not None and s >= int(arm.caught_up_s)
                 and behind <= bar), None)


def burst_table(result: dict) -> str:
    def f(v, fmt="{:.1f}"):
        return "-" if v is None else fmt.format(v)

    lines = [f"burst of {result['events']:,} records into a stream live at {result['rate']:,} events/s",
             f"{'arm':<18} {'caught up s':>11} {'burst read s':>12} {'switch back s':>13} {'rebase s':>9} "
             f"{'rebases':>7} {'peak behind':>11} {'burst in s':>10} {'JVM MB':>7}"]
    for key, arm in result["arms"].items():
        lines.append(f"{key + ' ' + ARMS[key]:<18} {f(arm['caught_up_s']):>11} {f(arm['burst_read_s']):>12} "
                     f"{f(arm['switch_back_s']):>13} {f(arm['rebase_s']):>9} {arm['rebases']:>7} "
                     f"{arm['peak_offsets_behind']:>11,} {f(arm['burst_produce_s']):>10} {arm['peak_jvm_mb']:>7.0f}")
    speedup = result["speedup_A_over_B"]
    read_a, read_b = result["arms"]["A"]["burst_read_s"], result["arms"]["B"]["burst_read_s"]
    under = result["seconds_to_under_bar"]
    ratio = under["A"] / under["B"] if under["A"] and under["B"] else None
    lines.append("caught up: both readers past the burst's last record (a CAUGHT_UP entry or a progress snapshot); "
                 f"burst read: the sampler's first snapshot past it (A/B "
                 f"{f(read_a / read_b if read_a and read_b else None, '{:.2f}')})")
    lines.append(f"past the burst and under the caught-up bar of {result['parameters']['caught_up_lag']:,} offsets "
                 f"behind: A {f(under['A'])} s, B {f(under['B'])} s (A/B {f(ratio, '{:.2f}')})")
    lines.append(f"speedup A/B = {f(speedup, '{:.2f}')} (aim >= 2: {'met' if result['aim_2x_met'] else 'missed'}); "
                 f"states identical: {result['states_identical']} ({result['comparison']['rows'][0]:,} keys); "
                 f"trickle {result['trickle_records']:,} records in each arm")
    for key, arm in result["arms"].items():
        if arm["trickle_stopped_before_caught_up"]:
            lines.append(f"note: in arm {key} the trickle had reached its fixed count before the stream caught up")
        if arm["caught_up_from"] == "progress":
            lines.append(f"note: arm {key}'s end is the first progress snapshot with both readers past the burst (no "
                         f"CAUGHT_UP entry past it came first); {arm['caught_up_offsets_behind']:,} offsets behind "
                         f"then, {arm['caught_up_state_updates_behind'] or 0:,} updates not yet in state")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1] == "setup":
        print(json.dumps(_setup_worker(*sys.argv[2:5])))
    else:
        raise SystemExit(f"unknown worker {sys.argv[1]!r}")
