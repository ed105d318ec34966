"""The seed source's schema, read from a Parquet footer without a Spark job, equals what Spark's read gives."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import functions as F

from switchyard.jobs.seed import seed_schema


def test_the_footer_schema_is_sparks_own_read_every_field_nullable(spark, tmp_path):
    seed = str(tmp_path / "seed")
    # a literal is non-nullable when written; nested types carry their own nullability flags
    (spark.range(3).select(F.col("id").cast("string").alias("key"), F.lit(0).cast("long").alias("stream_events"),
                           F.struct(F.lit(1).alias("n"), F.current_timestamp().alias("t")).alias("last"),
                           F.array(F.lit(1.5)).alias("values"), F.create_map(F.lit("a"), F.lit(1)).alias("counts"))
     .write.parquet(seed))
    footer = seed_schema(spark, seed)
    assert footer == spark.read.parquet(seed).schema
    assert all(f.nullable for f in footer.fields)


def test_files_without_sparks_schema_fall_back_to_sparks_read(spark, tmp_path):
    seed = tmp_path / "seed"
    seed.mkdir()
    pq.write_table(pa.table({"key": ["a"], "event_count": pa.array([1], pa.int64())}), seed / "part-00000.parquet")
    assert seed_schema(spark, str(seed)) == spark.read.parquet(str(seed)).schema
