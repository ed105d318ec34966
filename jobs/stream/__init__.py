"""`switchyard stream`: the live phase of a pipeline. The supervisor owns the lifecycle (supervisor.py), the
monitor watches the lag (monitor.py), one module per query (keyed.py, events.py, state.py), and the reports to
Dagster go through Pipes (pipes.py)."""

from switchyard.jobs.stream.options import StreamFailed, StreamOptions, StreamResult
from switchyard.jobs.stream.supervisor import run_stream, stream_until_caught_up

__all__ = ["StreamFailed", "StreamResult", "StreamOptions", "run_stream", "stream_until_caught_up"]
