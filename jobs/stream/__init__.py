"""`switchyard stream`: the live phase of a pipeline. The supervisor owns the lifecycle (supervisor.py), the
monitor watches the lag (monitor.py), one module per query (keyed.py, events.py, state.py), and the reports to
Dagster go through Pipes (pipes.py)."""

from switchyard.jobs.stream.settings import StreamFailed, StreamResult, StreamSettings
from switchyard.jobs.stream.supervisor import run_stream, stream_until_caught_up

__all__ = ["StreamFailed", "StreamResult", "StreamSettings", "run_stream", "stream_until_caught_up"]
