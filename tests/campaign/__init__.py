"""The fault campaign: from a seed, a random but valid history of what a pipeline lives through (records of every
kind, archive, backfill, handoff, stream, rebase, stop) interleaved with faults (a SIGKILL at a named crash point, a
frozen owner taken over, the broker down and back, retention, a corrupted archive file, a new partition, a second
actor, a changed setting); then the documented way on, and the tables checked against the independent oracle.

`python -m tests.campaign --seed S` replays one history; `--histories N` runs a long campaign and writes a summary.
`tests/campaign/test_campaign.py` runs the fixed seeds inside `make test`.
"""
