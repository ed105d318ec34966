"""Watchers of the batch → stream transition."""

import dagster as dg

defs = dg.Definitions(sensors=[])
