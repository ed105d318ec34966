"""The bench's goals (`python -m benchmarks bench`): each figure of a result against its target, or not measured."""

from benchmarks.bench import goals, goals_table


def _result() -> dict:
    latency = {"results": [{"rate": 500, "p50_ms": 90.0, "p99_ms": 150.0},
                           {"rate": 1000, "p50_ms": 1200.0, "p99_ms": 1800.0}],
               "seconds_to_switched": 8.6846, "switched_in_process_s": 3.0}
    return {"ratio_streaming_over_switchyard": 4.2, "ratio_switchyard_over_batch_full": 1.33,
            "switchyard_stream_stage_s": 4.25, "generate_events_per_s": None, "latency": latency}


def test_each_goal_is_met_missed_or_not_measured():
    verdicts = goals(_result())
    assert {name: (g["figure"], g["met"]) for name, g in verdicts.items()} == {
        "streaming_over_switchyard": (4.2, True),
        "switchyard_over_batch_full": (1.33, False),
        "switchyard_stream_stage_s": (4.25, True),
        "latency_p50_s": (1.2, False),          # the 1,000 events/s run's, not the 500's
        "latency_p99_s": (1.8, False),
        "switched_s": (8.685, True),
        "switched_in_process_s": (3.0, True),   # at the target is met
        "generate_events_per_s": (None, None),  # the topic was there: not generated, not timed
    }
    assert verdicts["generate_events_per_s"]["target"] == ">= 200,000"
    table = goals_table(verdicts)
    assert "1.33 (goal <= 1.1) MISSED" in table and "not measured (goal >= 200,000)" in table


def test_a_run_without_latency_or_some_arms_measures_only_what_ran():
    verdicts = goals({"ratio_switchyard_over_batch_full": 1.08, "latency": None})
    assert verdicts["switchyard_over_batch_full"]["met"] is True
    assert all(g["figure"] is None and g["met"] is None for name, g in verdicts.items()
               if name != "switchyard_over_batch_full")


def test_the_latency_goals_read_p99_at_1000_per_s_and_the_highest_rate_within_2_s():
    from benchmarks.latency import goals as latency_goals

    def rate(events_per_s, p99_ms):
        return {"rate": events_per_s, "p99_ms": p99_ms}

    verdict = latency_goals([rate(1000, 1001), rate(8000, 1990), rate(16000, 2000), rate(24000, 3650)])
    assert verdict["p99_ms_at_1000_per_s"] == 1001 and verdict["p99_at_1000_per_s_met"] is False
    assert verdict["highest_rate_measured_with_p99_within"] == 16000  # at the bound is within
    none = latency_goals([rate(24000, 3650)])
    assert none["p99_at_1000_per_s_met"] is None and none["highest_rate_measured_with_p99_within"] is None


def test_a_latency_run_reports_each_querys_phases_over_the_batches_that_read_rows():
    from benchmarks.latency import batch_phases

    def batch(n, rows, add, commit=None):
        return {"batch_id": n, "rows": rows, "duration_ms": {"addBatch": add, "triggerExecution": add + 100},
                **({"state_ms": {"commitTimeMs": commit}} if commit is not None else {})}

    recent = {"demo-keyed": [batch(0, 0, 5000, 900), batch(1, 500, 300, 10), batch(2, 700, 500, 30),
                             batch(3, 600, 400, 20)],
              "demo-state": [batch(0, 0, 10)]}
    phases = batch_phases(recent)
    assert set(phases) == {"demo-keyed"}, "a query with no batch that read rows has no figures"
    keyed = phases["demo-keyed"]
    assert keyed["batches"] == 3 and keyed["rows_median"] == 600
    assert keyed["duration.addBatch"] == {"median": 400, "max": 500}
    assert keyed["duration.triggerExecution"] == {"median": 500, "max": 600}
    assert keyed["state.commitTimeMs"] == {"median": 20, "max": 30}
    assert batch_phases(recent, last=1)["demo-keyed"]["duration.addBatch"] == {"median": 400, "max": 400}


def test_a_stopped_stream_keeps_each_batchs_state_store_times_summed_over_its_operators():
    from switchyard.jobs.stream.queries import _state_store_ms

    operators = [{"numRowsTotal": 100, "allUpdatesTimeMs": 12, "allRemovalsTimeMs": 0, "commitTimeMs": 200,
                  "customMetrics": {"rocksdbCommitFileSyncLatencyMs": 150, "rocksdbCommitFlushLatency": 20,
                                    "rocksdbGetCount": 7, "rocksdbSstFileSize": 4096}},
                 {"numRowsTotal": 50, "allUpdatesTimeMs": 3, "commitTimeMs": 10, "customMetrics": {}}]
    assert _state_store_ms(operators) == {"allUpdatesTimeMs": 15, "allRemovalsTimeMs": 0, "commitTimeMs": 210,
                                          "rocksdbCommitFileSyncLatencyMs": 150, "rocksdbCommitFlushLatency": 20,
                                          "rocksdbSstFileSize": 4096, "rows": 150}
