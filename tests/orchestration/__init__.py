"""Tests of the Dagster definitions: assets, checks, sensors, steering, the UI in a real browser."""
