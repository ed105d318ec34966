"""Dagster definitions of switchyard: assets, checks, jobs, schedules and sensors over jobs/ and state_handoff/."""

import warnings

import dagster as dg

# Observable source assets, single-run backfill policies and partitioned checks are beta/preview in Dagster 1.13.
warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)
