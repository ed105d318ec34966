"""Tests of state_handoff: the spec's algebra, parsing, the handoff log and its lifecycle, the lease."""
