"""The suite. The Dagster code location's daily partitions start where the tests' generated events do (the demo
generator's 2026-01-01, a day earlier for disorder), not at whatever archive ./warehouse may hold."""

import os

os.environ.setdefault("SWITCHYARD_FIRST_DAY", "2025-12-31")
