"""Seeding the stream's keyed state from the backfill's state: the two mechanisms DESIGN.md names, measured.

(a) what `switchyard stream` does: the state snapshot as a second (file) stream source, unioned with the event
    partials and merged by the built-in streaming aggregation on RocksDB. The seed's files are recorded in the
    checkpoint's source log, so a restart never seeds again.
(b) `transformWithStateInPandas(initialState=...)`: the snapshot as the operator's initial state, one
    `handleInitialState` call per key in the first batch, state kept in a ValueState.

Each run starts a fresh query on the same seed (K keys in the demo pipeline's state layout) and a small event
batch (E events on existing keys) and times the first batch, i.e. the switch; then it checks both end in the same
state for the touched keys. Usage:

    .venv/bin/python -m benchmarks seeding --keys 10000,100000 [--events 1000] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from pyspark.sql import functions as F

from benchmarks.harness import write_json
from switchyard.deploy.spark import build_spark
from switchyard.jobs.seed import EVENTS_SEEN
from switchyard.jobs.stream.keyed import keyed_input, merged_state
from switchyard.state_handoff.language.aggregates import event_aggregations, flatten_last, partial_columns
from switchyard.state_handoff.language.pipelines import get_pipeline

PIPELINE = get_pipeline("demo")


def _typed_events(spark, keys: int, per_key: int, seed: int):
    """Well-formed typed events (the parser's output schema) for `keys` keys."""
    return (spark.range(keys * per_key)
            .select((F.col("id") % keys).cast("string").alias("key"),
                    F.concat(F.lit(f"e{seed}-"), F.col("id").cast("string")).alias("event_id"),
                    (F.lit("2024-01-01 00:00:00").cast("timestamp")
                     + F.make_dt_interval(F.lit(0), F.lit(0), F.lit(0), (F.col("id") * 7 + seed) % 86400))
                    .alias("event_time"),
                    ((F.col("id") * 31 + seed) % 1000 / 10.0).alias("amount"),
                    F.lit("buy").alias("kind"), F.lit(None).cast("string").alias("error")))


def _seed(spark, keys: int, folder: Path) -> Path:
    aggs = PIPELINE.aggregations
    state = (_typed_events(spark, keys, 3, 1).groupBy("key")
             .agg(*event_aggregations(PIPELINE, aggs, keyed=True))
             .select("key", *flatten_last(aggs, keyed=True)))
    path = folder / "seed"
    state.select("key", *partial_columns(aggs, keyed=True), F.lit(0).cast("long").alias(EVENTS_SEEN)) \
        .write.mode("overwrite").parquet(str(path))
    return path


def _events(spark, events: int, keys: int, folder: Path) -> Path:
    path = folder / "events"
    _typed_events(spark, keys, 1, 2).limit(events).write.mode("overwrite").parquet(str(path))
    return path


def run_builtin(spark, seed: Path, events: Path, work: Path) -> tuple[float, list]:
    """(a) seed as a file stream source, unioned, built-in streaming aggregation."""
    event_stream = spark.readStream.schema(spark.read.parquet(str(events)).schema).parquet(str(events))
    seed_stream = spark.readStream.schema(spark.read.parquet(str(seed)).schema).parquet(str(seed))
    out = work / "a_out"
    started = time.monotonic()
    query = (merged_state(PIPELINE, keyed_input(PIPELINE, event_stream).unionByName(seed_stream))
             .writeStream.outputMode("update")
             .foreachBatch(lambda df, _id: df.where(F.col(EVENTS_SEEN) > 0).drop(EVENTS_SEEN)
                           .write.mode("append").parquet(str(out)))
             .option("checkpointLocation", str(work / "a_ckpt")).trigger(availableNow=True).start())
    query.awaitTermination()
    seconds = time.monotonic() - started
    return seconds, _comparable(spark.read.parquet(str(out)).collect())


def _processor_class():
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor

    columns = ["key", *partial_columns(PIPELINE.aggregations, keyed=True)]

    class SeededState(StatefulProcessor):
        """The demo pipeline's keyed partial in one ValueState; merges input rows in pandas."""

        def init(self, handle):
            self.state = handle.getValueState("partial", _state_schema())

        def handleInitialState(self, key, initialState, timerValues):
            row = initialState.iloc[0]
            self.state.update(tuple(_plain(row[c]) for c in columns[1:]))

        def handleInputRows(self, key, rows, timerValues):
            events = pd.concat(list(rows))
            current = dict(zip(columns[1:], self.state.get())) if self.state.exists() else None
            merged = {
                "event_count": len(events), "amount_sum": events["amount"].sum(),
                "amount_min": events["amount"].min(), "amount_max": events["amount"].max()}
            newest = events.sort_values(["event_time", "event_id"]).iloc[-1]
            last = {"last_by_time": newest["event_time"], "last_by_event_id": newest["event_id"],
                    "last_event_time": newest["event_time"], "last_amount": newest["amount"]}
            if current is not None:
                merged["event_count"] += current["event_count"]
                merged["amount_sum"] += current["amount_sum"]
                merged["amount_min"] = min(merged["amount_min"], current["amount_min"])
                merged["amount_max"] = max(merged["amount_max"], current["amount_max"])
                if (current["last_by_time"], current["last_by_event_id"]) > (last["last_by_time"],
                                                                             last["last_by_event_id"]):
                    last = {k: current[k] for k in last}
            merged.update(last)
            self.state.update(tuple(_plain(merged[c]) for c in columns[1:]))
            yield pd.DataFrame([{"key": key[0], **merged}])[columns]

        def close(self):
            pass

    return SeededState


def _plain(value):
    """numpy and pandas scalars to the Python values the state client serialises."""
    if hasattr(value, "to_pydatetime"):
        return value.to_pydatetime()
    return value.item() if hasattr(value, "item") else value


def _comparable(rows: list) -> list:
    return sorted(tuple(sorted((k, round(v, 6) if isinstance(v, float) else v) for k, v in r.asDict().items()))
                  for r in rows)


def _state_schema():
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType, TimestampType

    types = {"event_count": LongType(), "amount_sum": DoubleType(), "amount_min": DoubleType(),
             "amount_max": DoubleType(), "last_by_time": TimestampType(), "last_by_event_id": StringType(),
             "last_event_time": TimestampType(), "last_amount": DoubleType()}
    return StructType([StructField(name, kind) for name, kind in types.items()])


def run_transform_with_state(spark, seed: Path, events: Path, work: Path) -> tuple[float, list]:
    """(b) the snapshot as transformWithStateInPandas' initial state."""
    from pyspark.sql.types import StringType, StructField, StructType

    event_stream = spark.readStream.schema(spark.read.parquet(str(events)).schema).parquet(str(events))
    initial = spark.read.parquet(str(seed)).drop(EVENTS_SEEN)
    output = StructType([StructField("key", StringType()), *_state_schema().fields])
    out = work / "b_out"
    started = time.monotonic()
    query = (event_stream.where("error IS NULL").select("key", "event_id", "event_time", "amount")
             .groupBy("key")
             .transformWithStateInPandas(statefulProcessor=_processor_class()(), outputStructType=output,
                                         outputMode="Update", timeMode="None",
                                         initialState=initial.groupBy("key"))
             .writeStream.outputMode("update")
             .foreachBatch(lambda df, _id: df.write.mode("append").parquet(str(out)))
             .option("checkpointLocation", str(work / "b_ckpt")).trigger(availableNow=True).start())
    query.awaitTermination()
    seconds = time.monotonic() - started
    return seconds, _comparable(spark.read.parquet(str(out)).collect())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks seeding", description=__doc__.splitlines()[0])
    parser.add_argument("--keys", default="10000,100000", help="seed sizes, comma separated")
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    spark = build_spark("switchyard-seeding-bench")
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    results = []
    for keys in (int(k) for k in args.keys.split(",")):
        work = Path(tempfile.mkdtemp(prefix=f"seeding-{keys}-"))
        try:
            seed, events = _seed(spark, keys, work), _events(spark, args.events, keys, work)
            a_s, a_rows = run_builtin(spark, seed, events, work)
            b_s, b_rows = run_transform_with_state(spark, seed, events, work)
            same = a_rows == b_rows
            result = {"seed_keys": keys, "events": args.events, "builtin_union_s": round(a_s, 2),
                      "transform_with_state_s": round(b_s, 2), "same_state": same}
            print(json.dumps(result), flush=True)
            results.append(result)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        write_json(args.json, results)
    return 0 if all(r["same_state"] for r in results) else 1
