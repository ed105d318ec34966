"""The `archive_within_retention` check: the archive's cut against Kafka's retention, per partition, red once
Kafka's retention has passed the cut (no rebase could then recompute what the stream read in between)."""

import dagster as dg
from kafka import TopicPartition

from switchyard.jobs.archive import archive_cut, run_archive
from switchyard.jobs.inputs.generate import run_generate
from switchyard.orchestration.resources import KafkaResource, WarehouseResource
from switchyard.state_handoff.io.kafka_io import admin_client
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.tables import Tables
from tests.support.dagster_defs import checks_def, definitions
from tests.support.streams import QUIET

PIPELINE = get_pipeline("demo")


def _evaluate(tables: Tables, bootstrap: str):
    resources = {"switchyard_kafka": KafkaResource(bootstrap=bootstrap),
                 "switchyard_warehouse": WarehouseResource(warehouse=tables.warehouse)}
    check = checks_def(definitions(resources), "archive_within_retention")
    result = dg.materialize([check], resources=resources, selection=dg.AssetSelection.checks(check))
    (evaluation,) = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    return evaluation


def test_the_retention_check_turns_red_once_kafka_deletes_past_the_archives_cut(spark, bootstrap, topic_name,
                                                                                tmp_path):
    run_generate(bootstrap, topic_name, events=200, keys=8, partitions=2, days=1, seed=5, malformed_rate=0.0, out=QUIET)
    tables = Tables(str(tmp_path / "wh"), PIPELINE.name)
    cut = archive_cut(bootstrap, topic_name, fraction=0.5)
    run_archive(spark, PIPELINE, tables, bootstrap, topic_name, cut, out=lambda *_: None)

    within = _evaluate(tables, bootstrap)
    assert within.passed, within.description
    assert within.metadata["margin"].value == {str(p): hi - lo for p, (lo, hi) in cut.items()}
    assert within.asset_key.path[-1] == "handoff"

    retained_from = {0: cut[0][1] + 3, 1: cut[1][1]}  # partition 0 past the cut, partition 1 exactly at it
    with admin_client(bootstrap) as admin:
        admin.delete_records({TopicPartition(topic_name, p): o for p, o in retained_from.items()})
    passed = _evaluate(tables, bootstrap)
    assert not passed.passed
    assert passed.metadata["margin"].value == {"0": -3, "1": 0}
    assert f"partition 0 offsets {cut[0][1]}..{cut[0][1] + 2} deleted by Kafka's retention" in passed.description
    assert "partition 1" not in passed.description
