"""Dagster definitions of switchyard: assets, checks, jobs, schedules and sensors over jobs/ and state_handoff/."""

import warnings

import dagster as dg

# Observable source assets and single-run backfill policies are beta in Dagster 1.13: used knowingly.
warnings.filterwarnings("ignore", category=dg.BetaWarning)
