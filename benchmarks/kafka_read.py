"""What a batch read of a Kafka range costs, step by step: the fetch (twice: the second from a warm page cache), the
fetch with the pipeline's parse, and the fetch, parse and sort-based tiles, each forced by a no-op write in one
SparkSession. This is what a rebase pays per read of the records past the archive (jobs/rebase/run.py reads them three
times). Needs the broker and a topic (`bench` and `burst` leave theirs, e.g. bench.n10000000.k100000.p4.s42). Usage:

    .venv/bin/python -m benchmarks kafka-read --topic bench.n10000000.k100000.p4.s42 [--records N] [--json F]
"""

from __future__ import annotations

import argparse
import time

from benchmarks.harness import write_json
from switchyard.state_handoff import settings


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks kafka-read", description=__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True)
    parser.add_argument("--records", type=int, help="at most this many, spread over the partitions (default all)")
    parser.add_argument("--pipeline", default="demo")
    parser.add_argument("--bootstrap", default=settings.value("SWITCHYARD_BOOTSTRAP"))
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)

    from switchyard.deploy.spark import build_spark
    from switchyard.jobs.backfill import kafka_range
    from switchyard.jobs.rebase.cut import tiles_of
    from switchyard.state_handoff.io.kafka_io import offset_bounds
    from switchyard.state_handoff.language.parsing import parse_events
    from switchyard.state_handoff.language.pipelines import get_pipeline

    bounds = offset_bounds(args.bootstrap, args.topic)
    if not bounds or all(hi <= lo for lo, hi in bounds.values()):
        raise SystemExit(f"benchmarks kafka-read: topic {args.topic} holds no records")
    share = None if args.records is None else args.records // len(bounds)
    start = {p: lo for p, (lo, _) in bounds.items()}
    end = {p: hi if share is None else min(hi, lo + share) for p, (lo, hi) in bounds.items()}
    records = sum(end[p] - start[p] for p in end)
    spark = build_spark("benchmarks-kafka-read")
    pipeline = get_pipeline(args.pipeline)
    raw = kafka_range(spark, args.bootstrap, args.topic, start, end)
    figures: dict = {"topic": args.topic, "records": records, "spark_version": spark.version, "seconds": {}}
    for name, frame in (("fetch", raw), ("fetch_again", raw), ("fetch_and_parse", parse_events(pipeline, raw)),
                        ("fetch_parse_and_tiles", tiles_of(pipeline, parse_events(pipeline, raw)))):
        started = time.monotonic()
        frame.write.format("noop").mode("overwrite").save()
        figures["seconds"][name] = round(time.monotonic() - started, 1)
        print(f"{name:<22} {figures['seconds'][name]:>6.1f} s  {records / figures['seconds'][name]:>11,.0f} records/s",
              flush=True)
    s = figures["seconds"]
    figures["parse_s"] = round(s["fetch_and_parse"] - s["fetch_again"], 1)
    figures["tiles_s"] = round(s["fetch_parse_and_tiles"] - s["fetch_and_parse"], 1)
    print(f"of a fetch, parse and tiles: the parse ~{figures['parse_s']} s, the tiles ~{figures['tiles_s']} s")
    if args.json:
        write_json(args.json, figures)
    return 0
