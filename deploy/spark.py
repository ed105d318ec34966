"""The one place that builds a SparkSession: Delta, the local jars, UTC, quiet logs, profiles; or a Spark Connect
session where SPARK_REMOTE names a server."""

from __future__ import annotations

import os
import re
import shlex
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from switchyard.deploy import spark_cds
from switchyard.deploy.jars import spark_extra_jars
from switchyard.deploy.java import check_java
from switchyard.deploy.shipped_code import ship_project_code
from switchyard.deploy.spark_secrets import launched_without_secrets
from switchyard.state_handoff import settings
from switchyard.state_handoff.errors import UserError

_LOG_CONFIG = Path(__file__).with_name("log4j2.properties")

PROFILES = {
    "default": {
        "spark.sql.shuffle.partitions": "8",
        "spark.ui.showConsoleProgress": "false",
        # Each Delta table load replays its log; Delta's default of 50 tasks makes every load slow on a few cores.
        "spark.databricks.delta.snapshotPartitions": "4",
    },
    # Tests: one small, quiet, fast session.
    "test": {
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
        "spark.sql.adaptive.coalescePartitions.initialPartitionNum": "2",
        # Interpreted expressions: a test's rows are few, and generating and compiling each plan's Java code cost
        # more than it saved (docs/cluster.md).
        "spark.sql.codegen.wholeStage": "false",
        "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    },
}


# JVM options per profile (the figures behind them: docs/performance.md).
#
# Tests start many short-lived JVMs (each CLI step, each stream) on few cores, where the C2 compiler's threads take
# cores from the work before it pays off: they compile with C1 only. The code cache keeps the tiered size: without
# tiered compilation the JVM reserves 48 MB, which a stream fills, and then the JIT stops and the interpreter's
# deeper frames overflow the query planner's stack.
#
# Every other driver sends a method to C2 only when it is ten times hotter than HotSpot's defaults require: a stream
# compiles new generated code in every small batch, and C2's threads would take the cores from its first batches;
# the loops of a big batch job, a catch-up or a rebase still reach C2 within seconds. C1 alone starts a stream
# sooner still, but runs a long catch-up much slower.
PROFILE_JVM_OPTIONS = {
    "test": "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m",
    "default": "-XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=6000 "
               "-XX:Tier4CompileThreshold=150000 -XX:Tier4BackEdgeThreshold=400000",
}


def spark_master() -> str:
    return settings.value("SWITCHYARD_SPARK_MASTER")


def driver_addresses() -> tuple[str, str]:
    """(host executors reach the driver at, address it binds to): loopback unless the environment says otherwise."""
    host = settings.value("SWITCHYARD_DRIVER_HOST")
    return host, settings.value("SWITCHYARD_DRIVER_BIND_ADDRESS") or host


def _shuffle_partitions() -> dict:
    """SWITCHYARD_SHUFFLE_PARTITIONS overrides the profile's shuffle partitions (batch jobs and the stream's
    stateless shuffles; the stream's state-store partitions are SWITCHYARD_STATE_PARTITIONS)."""
    partitions = settings.value("SWITCHYARD_SHUFFLE_PARTITIONS")
    return {} if partitions is None else {"spark.sql.shuffle.partitions": str(partitions)}


def object_store_conf() -> dict:
    """S3A for s3a:// warehouses: static keys from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, read
    by the SDK's environment provider, on executors too), else the AWS SDK's default chain (AWS_PROFILE, web
    identity, the instance's role); with SWITCHYARD_S3_ENDPOINT an S3-compatible store addressed path-style, over
    plain HTTP when the endpoint says http. Inert while no path is s3a://."""
    from switchyard.state_handoff.io.storage import s3_credentials, s3_endpoint, s3_region

    provider = "EnvironmentVariableCredentialsProvider" if s3_credentials() else "DefaultCredentialsProvider"
    conf = {
        "spark.hadoop.fs.s3a.aws.credentials.provider": f"software.amazon.awssdk.auth.credentials.{provider}",
        "spark.hadoop.fs.s3a.endpoint.region": s3_region(),
    }
    endpoint = s3_endpoint()
    if endpoint is not None:
        conf.update({
            "spark.hadoop.fs.s3a.endpoint": endpoint,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": str(endpoint.startswith("https://")).lower(),
        })
    if not spark_master().startswith("local"):  # executors run in the workers' environment, not this one
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
            if settings.given(name):
                conf[f"spark.executorEnv.{name}"] = settings.given(name)
    return conf


def _avro_limits() -> str:
    """Avro's decoder allocates what a length prefix claims before it reads the bytes: no string, bytes or collection
    inside a record parsed is longer than the record (SWITCHYARD_MAX_RECORD_BYTES), so a longer claim fails the
    decoding (the record is dead-lettered) instead of allocating gigabytes."""
    limit = settings.value("SWITCHYARD_MAX_RECORD_BYTES")
    return " ".join(f"-Dorg.apache.avro.limits.{kind}.maxLength={limit}"
                    for kind in ("string", "bytes", "collectionItems"))


def existing_session():
    """The session this process already has (its thread's active one, else the default one), or None: a notebook's,
    the platform's, or one an earlier command of this process built."""
    from pyspark.sql import SparkSession

    try:
        return SparkSession.active()
    except Exception:  # noqa: BLE001 - pyspark's NO_ACTIVE_OR_DEFAULT_SESSION, an error class of its own
        return None


UTC_NAMES = {"UTC", "Etc/UTC", "GMT", "Etc/GMT", "Z", "+00:00"}


def _check_utc(zone: str | None, whose: str) -> None:
    """Event days, windows and every timestamp switchyard writes are in UTC; a session in another zone would
    file events under other days."""
    if zone is not None and zone not in UTC_NAMES:
        raise UserError(f"{whose} spark.sql.session.timeZone is {zone}: switchyard computes event days and windows "
                        "in UTC; set spark.sql.session.timeZone=UTC for its session")


def platform_conf() -> dict[str, str]:
    """The Spark settings the platform already gives this driver, which win over switchyard's defaults. Under
    `spark-submit` (its JVM started this interpreter): that JVM's conf (--master, --conf, --jars, --packages and
    spark-defaults.conf alike). Otherwise what the driver PySpark launches will read besides switchyard's settings:
    PYSPARK_SUBMIT_ARGS and the spark-defaults.conf of SPARK_CONF_DIR (else SPARK_HOME/conf)."""
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        from pyspark import SparkConf, SparkContext

        SparkContext._ensure_initialized()  # connects to spark-submit's JVM: no JVM of its own
        return dict(SparkConf(_jvm=SparkContext._jvm).getAll())
    given = _defaults_file()
    given.update(_submit_args(os.environ.get("PYSPARK_SUBMIT_ARGS", "")))
    return given


def _defaults_file() -> dict[str, str]:
    folder = os.environ.get("SPARK_CONF_DIR") or (os.path.join(os.environ["SPARK_HOME"], "conf")
                                                  if os.environ.get("SPARK_HOME") else None)
    path = Path(folder, "spark-defaults.conf") if folder else None
    if path is None or not path.is_file():
        return {}
    given = {}
    for line in path.read_text().splitlines():  # java.util.Properties: "key value", "key=value" or "key: value"
        match = re.match(r"\s*([^#!\s=:][^\s=:]*)\s*[\s=:]\s*(.*?)\s*$", line)
        if match:
            given[match[1]] = match[2]
    return given


_SUBMIT_FLAGS = {"--master": "spark.master", "--jars": "spark.jars", "--packages": "spark.jars.packages",
                 "--driver-memory": "spark.driver.memory", "--driver-java-options": "spark.driver.extraJavaOptions",
                 "--name": "spark.app.name"}


def _submit_args(text: str) -> dict[str, str]:
    given, words = {}, shlex.split(text)
    for flag, value in zip(words, words[1:]):
        if flag in _SUBMIT_FLAGS:
            given[_SUBMIT_FLAGS[flag]] = value
        elif flag == "--conf" and "=" in value:
            key, _, setting = value.partition("=")
            given[key] = setting
    return given


# The runtime SQL settings switchyard gives its session: a new classic one takes them with the rest, a Spark
# Connect one (whose server owns the master, jars and JVM) takes those its server lets a session set.
SESSION_SQL_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.databricks.delta.schema.autoMerge.enabled": "false",
    # Delta 4.4 refuses to read a version older than the table's deletedFileRetentionDuration. The live
    # handoff's state version is such a read (a seed rewritten, a rebase's streamed state), and its files are
    # kept past vacuums until its stream has switched (state_handoff/control/kept_versions.py), so the age
    # alone says nothing here.
    "spark.databricks.delta.vacuum.enforceTimeTravelWithinDeletedFileRetentionDuration": "false",
    # Cached DataFrames (a backfill's parsed records, read by its tiles and its dead letters) stay uncompressed:
    # they live on local disk for one job, and compressing them costs more than reading them back.
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
    # Parquet timestamps as microseconds, Spark's own unit: delta-rs (Arrow) reads Spark's default INT96 as
    # nanoseconds, which hold only 1677-2262, so a MERGE through delta-rs rewrote an event time of year 2 in a
    # file it copied as one of 1755.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}


def session_conf(app_name: str, profile: str | None = None, extra_conf: dict | None = None) -> dict[str, str]:
    """A new session's settings: `extra_conf` (a command's --conf, a Dagster resource's spark_config) over what the
    platform gives (`platform_conf`), over switchyard's own (the master, Delta and its jars, UTC, the profile)."""
    driver_host, bind_address = driver_addresses()
    profile = profile or settings.value("SWITCHYARD_SPARK_PROFILE")
    # SWITCHYARD_JVM_OPTIONS: more options for the driver's and executors' JVMs (flags, -Xshare archives)
    jvm_options = " ".join(filter(None, [f"-Dlog4j2.configurationFile=file:{_LOG_CONFIG}", _avro_limits(),
                                         PROFILE_JVM_OPTIONS.get(profile), settings.value("SWITCHYARD_JVM_OPTIONS")]))
    ours = {
        "spark.app.name": app_name,
        "spark.master": spark_master(),
        "spark.jars": ",".join(str(j) for j in spark_extra_jars()),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.driver.host": driver_host,
        "spark.driver.bindAddress": bind_address,
        # the driver maps its classes from the archive setup made (deploy/spark_cds.py); executors elsewhere have
        # other jars
        "spark.driver.extraJavaOptions": " ".join(filter(None, [jvm_options, spark_cds.driver_options()])),
        "spark.executor.extraJavaOptions": jvm_options,
        "spark.driver.memory": settings.value("SWITCHYARD_DRIVER_MEMORY"),
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        # The stream's queries run in pools of their own, so the keyed (update) jobs never queue behind a
        # Delta write of the other query; one job at a time, as in batch, behaves as under FIFO.
        "spark.scheduler.mode": "FAIR",
        # Spark keeps 100 generated classes by default; a stream's three queries and their Delta commands cycle
        # through more, so the same source would be compiled again every few batches, each a Janino compile, a
        # class load and its JIT work.
        "spark.sql.codegen.cache.maxEntries": "2000",
        # Parquet 1.16 reads a row group's column chunks as vectored reads, and on a local file system each chunk
        # goes through a JDK pool thread that keeps a direct buffer of the chunk's size for the thread's life: a
        # scan of 32-55 MB chunks peaked 0.6-1.1 GB higher (336-391 MB of it direct buffers) than with vectored
        # reads off, in the same time (`python -m benchmarks scan-memory`). An object-store warehouse can take them
        # back with --conf spark.hadoop.parquet.hadoop.vectored.io.enabled=true (docs/platforms.md, "The Spark
        # session").
        "spark.hadoop.parquet.hadoop.vectored.io.enabled": "false",
        **SESSION_SQL_CONF,
        **object_store_conf(),
        **PROFILES[profile],
        **_shuffle_partitions(),
    }
    given = platform_conf()
    conf = {**{k: v for k, v in ours.items() if k not in given}, **(extra_conf or {})}
    _check_utc(conf.get("spark.sql.session.timeZone", given.get("spark.sql.session.timeZone")), "the given")
    return conf


def connect_asked() -> bool:
    """The environment asks for Spark Connect (PySpark's own variables)."""
    return bool(os.environ.get("SPARK_REMOTE") or os.environ.get("SPARK_CONNECT_MODE_ENABLED"))


def is_connect(spark) -> bool:
    """`spark` is a Spark Connect session: a client of a server's driver, with no SparkContext in this process."""
    try:
        from pyspark.sql.connect.session import SparkSession as ConnectSession
    except ImportError:  # Spark Connect's client dependencies (grpcio) are not installed: no session can be one
        return False
    return isinstance(spark, ConnectSession)


def check_classic(spark=None) -> None:
    """The stream needs a classic session: refused in one line, before any work, where Spark Connect is asked for
    (no `spark` yet) or given."""
    connect = is_connect(spark) if spark is not None else connect_asked()
    if connect:
        raise UserError("the stream needs a classic Spark session (its queries keep state in foreachBatch, listen to "
                        "their progress and run in scheduler pools), and Spark Connect (SPARK_REMOTE) gives none: "
                        "run the stream where a classic session is, on a cluster's driver or under spark-submit, "
                        "with SPARK_REMOTE unset; archive, backfill, handoff and status run over Spark Connect")


def _connect_session(extra_conf: dict | None):
    """A new Spark Connect session on SPARK_REMOTE's server. The server owns the master, the jars, the JVM and
    Delta's extension; the session takes the runtime SQL settings switchyard needs where the server lets it (some
    platforms allow only a few), then the command's own, each refused in one line when the server does not allow
    it."""
    from pyspark.sql import SparkSession

    url = os.environ.get("SPARK_REMOTE")
    try:
        spark = (SparkSession.builder.remote(url) if url else SparkSession.builder).getOrCreate()
    except ImportError as err:  # PySpark's check of the client's dependencies (grpcio, protobuf)
        raise UserError(f"SPARK_REMOTE is set and the Spark Connect client cannot load ({str(err).splitlines()[0]}): "
                        "install the Spark Connect client (pip install 'switchyard[connect]')") from None
    for key, value in {**SESSION_SQL_CONF, **_shuffle_partitions()}.items():
        try:
            spark.conf.set(key, value)
        except Exception:  # noqa: BLE001 - the server's to refuse (CANNOT_MODIFY_CONFIG, CONFIG_NOT_AVAILABLE)
            continue
    for key, value in (extra_conf or {}).items():
        try:
            spark.conf.set(key, value)
        except Exception as err:  # noqa: BLE001 - any refusal from the server is the user's to fix
            raise UserError(f"--conf {key}: the Spark Connect server does not let a session set it "
                            f"({str(err).splitlines()[0][:200]}): set it on the server instead") from None
    return spark


@contextmanager
def _environment_while(values: dict[str, str]):
    """`values` in the process's environment for the block, and the environment as it was afterwards."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, text in before.items():
            if text is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = text


def build_spark(app_name: str = "switchyard", profile: str | None = None, extra_conf: dict | None = None):
    """Return the process's SparkSession: the one it already has, untouched (its settings are its owner's), or a new
    one. A new one takes, in this order of precedence, `extra_conf` (a command's --conf, a Dagster resource's
    spark_config), what the platform gives (`platform_conf`: spark-submit's master, jars and confs), then
    switchyard's settings (the master, Delta and its jars, UTC, the profile). With SPARK_REMOTE set, a new one is a
    Spark Connect session on that server (`_connect_session`)."""
    # The one change to the process that outlives the call: PySpark turns collected timestamps into naive local
    # datetimes, so local time must be UTC, as the session's is, for every timestamp switchyard reads back.
    if os.environ.get("TZ") != "UTC":
        os.environ["TZ"] = "UTC"
        time.tzset()
    session = existing_session()
    if session is not None:
        _check_utc(session.conf.get("spark.sql.session.timeZone", None), "the session's")
        return session
    if connect_asked():
        session = _connect_session(extra_conf)
        _check_utc(session.conf.get("spark.sql.session.timeZone", None), "the Spark Connect session's")
        return session
    check_java()
    from pyspark.sql import SparkSession

    driver_host, bind_address = driver_addresses()
    # Read while the session is made, and only then: the JVM binds loopback unless told otherwise (it copies the
    # environment when it starts), and Python workers run this interpreter unless PYSPARK_PYTHON names another
    # (PySpark's SparkContext reads the variable once, not the conf). The process's environment is left as it was.
    with _environment_while({"SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP") or bind_address,
                             "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON") or sys.executable}), \
            launched_without_secrets(session_conf(app_name, profile, extra_conf)) as conf:
        builder = SparkSession.builder
        for key, value in conf.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if not spark.sparkContext.master.startswith("local"):  # executors elsewhere do not see this checkout
        ship_project_code(spark.sparkContext)
    return spark
