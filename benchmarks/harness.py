"""What every benchmark scenario shares: an arm in a fresh process (its own Python and JVM) while the parent
samples the memory of its whole process tree, stopping a long-running child, writing the JSON result, and charts.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from switchyard.jobs.cli.parser import common_options
from switchyard.state_handoff.faults import descendants

ROOT = Path(__file__).resolve().parents[1]
MB = 1024 * 1024


# ---------------------------------------------------------------- commands a benchmark starts

def add_connection(parser: argparse.ArgumentParser) -> None:
    """--warehouse and --bootstrap, with the defaults and environment settings of the `switchyard` commands."""
    common_options(parser)


def worker_command(module: str, *args: str) -> list[str]:
    """benchmarks.<module>'s worker(ARGS) in a fresh process (`python -m benchmarks worker MODULE ARGS`); it
    prints its figures as the last line of its stdout, one JSON object."""
    return [sys.executable, "-m", "benchmarks", "worker", module, *map(str, args)]


def scenario_command(scenario: str, *args: str) -> list[str]:
    """A scenario's own command line in a fresh process (for scenarios whose workers take flags)."""
    return [sys.executable, "-m", "benchmarks", scenario, *map(str, args)]


def switchyard_command(*args: str) -> list[str]:
    """An operator command of the `switchyard` command line, as its own process."""
    return [sys.executable, "-m", "switchyard.jobs.cli", *map(str, args)]


def delete_topics(bootstrap: str, topics: list[str]) -> None:
    """A benchmark's own topics deleted once it is done with them; a failure is reported, never raised."""
    from switchyard.state_handoff.io.kafka_io import admin_client

    try:
        with admin_client(bootstrap) as admin:
            admin.delete_topics(topics)
    except Exception as err:  # housekeeping only
        print(f"could not delete the bench topics {topics}: {err}", file=sys.stderr)


# ---------------------------------------------------------------- memory of a process tree

def _read(path: str, mode: str = "r"):
    try:
        with open(path, mode) as fh:
            return fh.read()
    except OSError:
        return None


def rss_bytes(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (the kernel's high-water mark), and VmRSS's parts RssAnon (the heap, native allocations) and
    RssFile (mapped files: jars, and shuffle or cached blocks Spark maps to read), in bytes, of a live process; empty
    when it is gone."""
    text = _read(f"/proc/{pid}/status") or ""
    found = {}
    for line in text.splitlines():
        name = line.split(":", 1)[0]
        if name in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            found[name] = int(line.split()[1]) * 1024
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process, all its threads (JIT, GC and task threads for a JVM)."""
    stat = _read(f"/proc/{pid}/stat")
    if not stat:
        return 0.0
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_kind(pid: int) -> str:
    """java, python, or pyspark.daemon / pyspark.worker (PySpark's per-row Python); "" when it is gone."""
    cmdline, comm = _read(f"/proc/{pid}/cmdline", "rb"), _read(f"/proc/{pid}/comm")
    if cmdline is None or comm is None:
        return ""
    if b"java" in cmdline.split(b"\0")[0]:
        return "java"
    text = cmdline.replace(b"\0", b" ").decode(errors="replace")
    return next((kind for kind in ("pyspark.daemon", "pyspark.worker") if kind in text), comm.strip())


class MemorySampler(threading.Thread):
    """Every `every` seconds while `pid` lives (or until stop()): its process tree's RSS, summed by JVM and by
    Python at each sample (peaks in MB), and each process's own peak (VmHWM) by kind. For the JVMs also: the
    sample's seconds since the start and its anonymous and file-mapped parts at their peak, and the anonymous part's
    own peak (what the JVM holds, against pages of mapped files the kernel may take back)."""

    def __init__(self, pid: int, every: float = 0.5):
        super().__init__(daemon=True, name=f"memory-{pid}")
        self.pid, self.every = pid, every
        self.peak_jvm_mb = self.peak_python_mb = 0.0
        self.started = time.monotonic()
        self.peak_jvm_at: dict[str, float] = {}  # at the JVMs' peak: seconds since the start, anon and file MB
        self.peak_jvm_anon_mb = 0.0
        self.peaks: dict[int, tuple[str, int]] = {}  # pid -> (kind, peak bytes)
        self._halt = threading.Event()

    def sample(self) -> tuple[float, float]:
        """(JVM MB, Python MB) of the tree now; each process's peak updated."""
        jvm = python = anon = mapped = 0
        for pid in [self.pid, *descendants(self.pid)]:
            status, kind = rss_bytes(pid), process_kind(pid)
            if not status or not kind:
                continue
            rss = status.get("VmRSS", 0)
            if kind == "java":
                jvm += rss
                anon, mapped = anon + status.get("RssAnon", 0), mapped + status.get("RssFile", 0)
            else:
                python += rss
            self.peaks[pid] = (kind, max(status.get("VmHWM", 0), rss, self.peaks.get(pid, ("", 0))[1]))
        if jvm / MB > self.peak_jvm_mb:
            self.peak_jvm_at = {"s": round(time.monotonic() - self.started, 1), "anon_mb": round(anon / MB),
                                "file_mb": round(mapped / MB)}
        self.peak_jvm_anon_mb = max(self.peak_jvm_anon_mb, anon / MB)
        self.peak_jvm_mb = max(self.peak_jvm_mb, jvm / MB)
        self.peak_python_mb = max(self.peak_python_mb, python / MB)
        return jvm / MB, python / MB

    def run(self) -> None:
        while not self._halt.is_set() and Path(f"/proc/{self.pid}").exists():
            self.sample()
            self._halt.wait(self.every)

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join()

    def peak_of(self, kind: str) -> int:
        """The highest peak in bytes of one process of `kind`; "driver-python" is the sampled process itself."""
        return max((rss for pid, (k, rss) in self.peaks.items()
                    if (pid == self.pid if kind == "driver-python" else k == kind)), default=0)

    @property
    def python_workers(self) -> int:
        """How many PySpark Python worker processes (per-row Python) were seen."""
        return sum(1 for kind, _ in self.peaks.values() if kind.startswith("pyspark."))


# ---------------------------------------------------------------- a run in a fresh process

class CpuSampler(threading.Thread):
    """Every `every` seconds while `pid` lives (or until stop()): the CPU seconds its process tree's live processes
    have used, with the wall time (time.time()) of the sample; cores_between() is their average use of cores."""

    def __init__(self, pid: int, every: float = 1.0):
        super().__init__(daemon=True, name=f"cpu-{pid}")
        self.pid, self.every = pid, every
        self.samples: list[tuple[float, dict[int, float]]] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set() and Path(f"/proc/{self.pid}").exists():
            self.samples.append((time.time(), {p: cpu_seconds(p) for p in [self.pid, *descendants(self.pid)]}))
            self._halt.wait(self.every)

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join()

    def cores_between(self, start: float, end: float) -> float | None:
        """The tree's average cores in use from the first sample at or after `start` to the last at or before `end`
        (a process counted while it lived in both), or None with fewer than two samples there."""
        inside = [(at, cpu) for at, cpu in self.samples if start <= at <= end]
        if len(inside) < 2:
            return None
        (first_at, first), (last_at, last) = inside[0], inside[-1]
        used = sum(last[p] - first[p] for p in last if p in first)
        return round(used / (last_at - first_at), 3)


@dataclass
class FreshRun:
    returncode: int
    stdout: str
    seconds: float
    memory: MemorySampler

    def figures(self) -> dict:
        """The worker's last stdout line, its JSON figures."""
        return json.loads(self.stdout.strip().splitlines()[-1])


def run_fresh(argv: list[str], log: Path, env: dict | None = None, echo: str | None = None) -> FreshRun:
    """Run `argv` in a fresh process from the project's root, stderr appended to `log`, its process tree's
    memory sampled until it exits; `echo` prefixes its stdout lines printed as they come."""
    started = time.monotonic()
    lines = []
    with open(log, "a") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, cwd=ROOT, text=True, env=env)
        memory = MemorySampler(proc.pid)
        memory.start()
        for line in proc.stdout:
            lines.append(line)
            if echo is not None:
                print(echo + line.rstrip(), flush=True)
        code = proc.wait()
    memory.stop()
    return FreshRun(code, "".join(lines), time.monotonic() - started, memory)


def start_service(argv: list[str], log: Path, env: dict | None = None) -> subprocess.Popen:
    """A long-running child (a stream) in its own session, stdout and stderr to `log`; stop it with terminate."""
    with open(log, "a") as fh:
        fh.write(f"\n$ {' '.join(argv)}\n")
    return subprocess.Popen(argv, stdout=open(log, "a"), stderr=subprocess.STDOUT, cwd=ROOT, env=env,
                            start_new_session=True)


def terminate(proc: subprocess.Popen, timeout: float) -> int | None:
    """SIGTERM, then its whole session killed if it has not exited within `timeout`; its exit code, or None when
    it had to be killed."""
    if proc.poll() is not None:
        return proc.returncode
    os.kill(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


# ---------------------------------------------------------------- results

def machine(memory: bool = True) -> str:
    """This machine in a few words: cores and memory."""
    if not memory:
        return f"{os.cpu_count()} cores"
    return f"{os.cpu_count()} cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GB"


def write_json(path: str | Path, result) -> None:
    """A result as indented JSON, its folder made if needed."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(result, indent=2, default=str))


def pyplot():
    """matplotlib's pyplot drawing to files (no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    pyplot().close(fig)


def bar_chart(path: str | Path, labels: list[str], seconds: list[float], colors: list[str], xlabel: str,
              title: str) -> None:
    """Horizontal bars of wall seconds, one per arm, top to bottom in the order given."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    bars = ax.barh(labels, seconds, color=colors)
    ax.bar_label(bars, labels=[f"{v:.0f} s" for v in seconds], padding=4)
    ax.set_xlim(0, max(seconds) * 1.2)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    save_figure(fig, path)
