"""Every `SWITCHYARD_*` setting in one table: its name, default, what it sets, what kind of value it takes and
whether it is a secret.

`value(name)` is how a module reads one: the environment's text (an empty one counts as unset), else the default
declared here, parsed by the setting's kind; a bad value is a UserError of one line that names the setting, what it
must be and the value given. `Settings.from_env()` reads them all into one typed object, which is how the command
line checks every setting before any work. The table is also where a user finds them all, what `switchyard config`
prints with the value in effect and where it came from, and what docs/cli.md's settings table is made from. A test
keeps it whole: a `SWITCHYARD_*` name read anywhere in the code and missing here fails it.
"""

from __future__ import annotations

import os
import re
import threading
from collections import ChainMap
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from switchyard.state_handoff.errors import UserError

# The folder above the package's subpackages: a checkout's root, or site-packages/switchyard in an installed copy.
CHECKOUT = Path(__file__).resolve().parents[1]
IN_CHECKOUT = (CHECKOUT / "pyproject.toml").is_file() and (CHECKOUT / "deploy" / "setup.sh").is_file()
PREFIX = "SWITCHYARD_"
# Where an installed copy keeps its jars and local servers: the user's cache folder, as pip's and Ivy's are.
USER_CACHE_HOME = str(Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache") / "switchyard")


class Hint(ValueError):
    """A kind's refusal that says more than what the value must be (the values it knows, say)."""


@dataclass(frozen=True)
class Kind:
    """How a setting's text becomes its value: `parse` returns the value or raises ValueError; `must` says what
    the text must be, in the error and in the docs."""

    must: str
    parse: Callable[[str], Any]


def _whole(at_least: int, at_most: int, unit: str) -> Kind:
    def parse(text: str) -> int:
        number = int(text)
        if not at_least <= number <= at_most:
            raise ValueError(text)
        return number

    return Kind(f"a whole number of {unit} from {at_least} to {at_most}", parse)


def _number(above: float, at_most: float, unit: str) -> Kind:
    def parse(text: str) -> float:
        number = float(text)
        if not above < number <= at_most:  # nan and the infinities too
            raise ValueError(text)
        return number

    return Kind(f"a number of {unit} above {above:g} and at most {at_most:g}", parse)


def _one_of(*choices: str) -> Kind:
    """Any case; the value is the choice as written here."""
    by_lower = {choice.lower(): choice for choice in choices}

    def parse(text: str) -> str:
        try:
            return by_lower[text.strip().lower()]
        except KeyError:
            raise ValueError(text) from None

    return Kind(f"one of {', '.join(choices[:-1])} or {choices[-1]}", parse)


def _bool(text: str) -> bool:
    flag = {"true": True, "1": True, "false": False, "0": False}.get(text.strip().lower())
    if flag is None:
        raise ValueError(text)
    return flag


def _memory(text: str) -> str:
    if not re.fullmatch(r"[1-9][0-9]*[kmgt]?", text.strip().lower()):
        raise ValueError(text)
    return text.strip()


def _url(text: str) -> str:
    if urlparse(text).scheme not in ("http", "https") or not urlparse(text).netloc:
        raise ValueError(text)
    return text


def _crash_point(text: str) -> tuple[str, int, bool]:
    from switchyard.state_handoff.crash_points import POINTS

    point, *rest = text.split(":")
    if point not in POINTS:
        raise Hint(f"the points: {', '.join(POINTS)}")
    fail = bool(rest) and rest[-1] == "fail"
    rest = rest[:-1] if fail else rest
    if len(rest) > 1:
        raise ValueError(text)
    n = int(rest[0]) if rest else 1
    if n < 1:
        raise ValueError(text)
    return point, n, fail


MASK = "********"
# an option whose name says it holds a secret: -Djavax.net.ssl.keyStorePassword=..., -Dfs.s3a.secret.key=...
_SECRET_OPTION = re.compile(r"""(?P<name>(?<!\S)[^\s=]*(?:pass|pwd|secret|token|key|credential)[^\s=]*=)"""
                            r"""(?P<value>"[^"]*"|'[^']*'|\S*)""", re.IGNORECASE)


def _mask_secret_options(text: str) -> str:
    """Command-line options with the value of each whose name names a secret masked."""
    return _SECRET_OPTION.sub(lambda option: option["name"] + MASK, text)


def split_secret_options(text: str) -> tuple[str, list[str]]:
    """Command-line options apart: the text without the options whose names name a secret, and those options."""
    found = [option.group(0) for option in _SECRET_OPTION.finditer(text)]
    return " ".join(_SECRET_OPTION.sub("", text).split()), found


TEXT = Kind("any text", str)
BOOL = Kind("true or false (or 1 or 0)", _bool)
MEMORY = Kind("a JVM memory size such as 512m or 2g", _memory)
URL = Kind("an http:// or https:// URL such as http://127.0.0.1:9000", _url)
DAY = Kind("a day as YYYY-MM-DD", date.fromisoformat)
FILE = Kind("a path", lambda text: Path(text).expanduser())
CHECKOUT_PATH = Kind("a path (a relative one from the checkout)",
                     lambda text: (CHECKOUT / Path(text).expanduser()).resolve())
HOME_PATH = Kind("a path (a relative one from the checkout, or in an installed copy from the working folder)",
                 lambda text: ((CHECKOUT if IN_CHECKOUT else Path.cwd()) / Path(text).expanduser()).resolve())
CRASH_POINT = Kind("`point[:n][:fail]`: a crash point of state_handoff/faults.py, its n-th arrival (n at least 1); "
                   "`fail`: an exception there instead of the kill",
                   _crash_point)

KAFKA_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
KAFKA_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
MOST_PARTITIONS = 100_000
SPARK_PROFILES = ("default", "test")  # deploy/spark.py's PROFILES
ENVIRONMENTS = ("local", "test")  # orchestration/resources.py's


@dataclass(frozen=True)
class Setting:
    name: str
    default: str | None  # as the user would write it; None: unset unless given
    meaning: str
    kind: Kind = TEXT
    secret: bool = False  # shown as MASK
    masks: Callable[[str], str] | None = None  # shows the text with the secrets inside it masked

    def shown(self, text: str) -> str:
        """`text` as `switchyard config` and logs show it: a secret masked, or the secrets inside it."""
        if self.secret:
            return MASK
        return self.masks(text) if self.masks else text

    @property
    def attribute(self) -> str:
        """Its name in `Settings`: SWITCHYARD_LEASE_SECONDS is `lease_seconds`."""
        return self.name.removeprefix(PREFIX).lower()


SETTINGS: tuple[Setting, ...] = (
    Setting("SWITCHYARD_PIPELINE", None, "the pipeline `--pipeline` names when not given (the CLI and "
            "`python -m switchyard.orchestration.run`, default `demo` there)"),
    Setting("SWITCHYARD_WAREHOUSE", "./warehouse", "the warehouse: a directory or an `s3a://` URL"),
    Setting("SWITCHYARD_BOOTSTRAP", "127.0.0.1:9092", "Kafka's bootstrap servers"),
    Setting("SWITCHYARD_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT", "the security protocol of every Kafka client and "
            "Spark's Kafka source and sink", _one_of(*KAFKA_PROTOCOLS)),
    Setting("SWITCHYARD_KAFKA_SASL_MECHANISM", None, "the SASL mechanism", _one_of(*KAFKA_MECHANISMS)),
    Setting("SWITCHYARD_KAFKA_SASL_USERNAME", None, "the SASL user"),
    Setting("SWITCHYARD_KAFKA_SASL_PASSWORD", None, "the SASL password", secret=True),
    Setting("SWITCHYARD_KAFKA_SSL_CAFILE", None, "the CA certificate (PEM) that signs the brokers' certificates",
            FILE),
    Setting("SWITCHYARD_KAFKA_SSL_CHECK_HOSTNAME", "true", "whether TLS checks the broker's host name", BOOL),
    Setting("SWITCHYARD_KAFKA_PROPERTIES", None, "a Kafka client properties file (the Java client's format, as "
            "`kafka-console-consumer --consumer.config` takes): any client property, for Spark as given and mapped "
            "for the Python clients; instead of the other SWITCHYARD_KAFKA_* settings", FILE),
    Setting("SWITCHYARD_CONSUMER_GROUP", None, "the consumer group a stream commits the input offsets it has "
            "processed to, for Kafka's own tools and lag dashboards (unset: `switchyard.<pipeline>`; `off`: none)"),
    Setting("SWITCHYARD_UPDATES_TOPIC", None, "the compacted topic a new handoff's stream sends its updates to: "
            "one created ahead with the stream's Read and Write rights (unset: `<pipeline>.updates.<warehouse>`, "
            "created by the stream)"),
    Setting("SWITCHYARD_SCHEMA_REGISTRY_URL", None, "a Confluent-compatible schema registry's URL, where an Avro "
            "pipeline that names a `subject` finds its records' writer schemas by id", URL),
    Setting("SWITCHYARD_SCHEMA_REGISTRY_USER_INFO", None, "`user:password` for the schema registry's basic "
            "authentication (Confluent's `basic.auth.user.info`)", secret=True),
    Setting("SWITCHYARD_S3_ENDPOINT", None, "an S3-compatible store's endpoint (unset: AWS); keys from "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, else the AWS default chain (AWS_PROFILE, web identity, "
            "roles)", URL),
    Setting("SWITCHYARD_SPARK_MASTER", "local[*]", "Spark's master URL"),
    Setting("SWITCHYARD_SPARK_PROFILE", "default", "the Spark profile the CLI's jobs build",
            _one_of(*SPARK_PROFILES)),
    Setting("SWITCHYARD_ENV", "local", "the Dagster resources' environment (`test`: its Spark profile)",
            _one_of(*ENVIRONMENTS)),
    Setting("SWITCHYARD_DRIVER_MEMORY", "2g", "the Spark driver's memory", MEMORY),
    Setting("SWITCHYARD_DRIVER_HOST", "127.0.0.1", "the address executors reach the driver at"),
    Setting("SWITCHYARD_DRIVER_BIND_ADDRESS", None, "the address the driver binds (default: the driver host)"),
    Setting("SWITCHYARD_JVM_OPTIONS", None, "more options for the driver's and executors' JVMs (shown with the "
            "value of each option naming a password, secret, token or key masked)", masks=_mask_secret_options),
    Setting("SWITCHYARD_SPARK_CDS", "true", "whether drivers start with the class-data archive setup made", BOOL),
    Setting("SWITCHYARD_SHUFFLE_PARTITIONS", None, "overrides the Spark profile's shuffle partitions",
            _whole(1, MOST_PARTITIONS, "partitions")),
    Setting("SWITCHYARD_STATE_PARTITIONS", "2", "the stream's state-store partitions (fixed by a handoff's first "
            "checkpoint)", _whole(1, MOST_PARTITIONS, "partitions")),
    Setting("SWITCHYARD_SWITCH_BACK", "cost", "how a stream far behind decides to switch back to the batch path: "
            "`cost` (when a rebase is estimated to end sooner than streaming the backlog) or `lag` (whenever the lag "
            "stays above --switch-back-lag for --switch-back-after seconds)", _one_of("cost", "lag")),
    Setting("SWITCHYARD_REDEPLOY_NICE", "10", "the niceness `switchyard redeploy` and `rollback` run at (their JVM "
            "too, in local mode), so the live stream's batches go first while the redeploy's pass runs beside it on the "
            "same cores; with Linux autogroups, in a session of its own whose autogroup carries it, since the stream "
            "runs in another (0: as any process, in the caller's session)", _whole(0, 19, "niceness steps")),
    Setting("SWITCHYARD_TIDY_EVERY", "100", "batches between two compactions and vacuums of a stream's tables",
            _whole(1, 1_000_000, "batches")),
    Setting("SWITCHYARD_LEASE_SECONDS", "60", "how long a pipeline's lease lasts unrenewed (renewed every sixth)",
            _number(0, 24 * 60 * 60, "seconds")),
    # at least the prefix of a record a dead letter keeps (record_limits.DEAD_LETTER_PREFIX_BYTES)
    Setting("SWITCHYARD_MAX_RECORD_BYTES", "1048576", "records above this size are dead-lettered as `too_large`",
            _whole(1024, 1 << 30, "bytes")),
    Setting("SWITCHYARD_FIRST_DAY", "2025-12-01", "the first day of the shipped code location's daily partitions",
            DAY),
    Setting("SWITCHYARD_FAULT", None, "a crash point to die at (tests and drills only)", CRASH_POINT),
    Setting("SWITCHYARD_HOME", "./.switchyard" if IN_CHECKOUT else USER_CACHE_HOME,
            "fetched jars, the local servers' data and logs (an installed copy's default: `~/.cache/switchyard`)",
            HOME_PATH),
    Setting("SWITCHYARD_SPARK_JARS", "auto", "where Spark's Delta, Kafka and S3A jars come from: `auto` (the home's, "
            "fetched by setup or resolved from Maven Central on first use) or `provided` (the platform's Spark has "
            "them)", _one_of("auto", "provided")),
    Setting("SWITCHYARD_POM", "deploy/pom.xml", "the Maven project setup fetches jars with", CHECKOUT_PATH),
    Setting("SWITCHYARD_OBJECTSTORE_HEAP", "1g", "the local object store's JVM heap (it holds every object)",
            MEMORY),
    Setting("SWITCHYARD_LOG_FORMAT", "text", "the command line's log lines: `text` (the message alone) or `json` "
            "(one object per line); `--log-format` over it", _one_of("text", "json")),
)

BY_NAME = {setting.name: setting for setting in SETTINGS}


# Settings a caller gave this process's work explicitly (a Dagster resource's fields, for its run), over the
# environment's, without writing them into it: no child process, library or other code location sees them unless it
# is handed them (`environment()`). A stack: the innermost giver wins; each takes its own off when its work ends.
_GIVEN: list[dict[str, str]] = []
_GIVEN_LOCK = threading.Lock()


def environment() -> Mapping[str, str]:
    """The settings in effect as text: what a caller gave (`given_to_process`) over the process's environment. Read
    it where the environment would be read, and hand `overrides()` to a child process that must see the same."""
    with _GIVEN_LOCK:
        return ChainMap(*reversed([dict(layer) for layer in _GIVEN]), os.environ)


def overrides() -> dict[str, str]:
    """What callers gave over the environment: the part of `environment()` a child process does not inherit."""
    with _GIVEN_LOCK:
        return {name: text for layer in _GIVEN for name, text in layer.items()}


@contextmanager
def given_to_process(values: Mapping[str, str | None]) -> Iterator[None]:
    """The settings in `values` (None: left as they are) in effect for this process's work until the block ends,
    without a write to `os.environ`."""
    layer = {name: text for name, text in values.items() if text is not None}
    with _GIVEN_LOCK:
        _GIVEN.append(layer)
    try:
        yield
    finally:
        with _GIVEN_LOCK:
            _GIVEN.remove(layer)


def given(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The text in effect for the setting (`environment()`'s, or `env`'s); None when it is unset or empty."""
    text = (environment() if env is None else env).get(name)
    return text if text else None


def parse(name: str, text: str | None) -> Any:
    """`text` as the setting's kind reads it (None stays None); a UserError of one line when it cannot."""
    setting = BY_NAME[name]
    if text is None:
        return None
    try:
        return setting.kind.parse(text)
    except ValueError as refused:
        hint = f" ({refused})" if isinstance(refused, Hint) else ""
        raise UserError(f"{name} must be {setting.kind.must}, not {text!r}{hint}") from None


def value(name: str, env: Mapping[str, str] | None = None) -> Any:
    """The setting's typed value in effect: the environment's when set there, else its declared default."""
    text = given(name, env)
    return parse(name, BY_NAME[name].default if text is None else text)


def default(name: str) -> Any:
    """The setting's declared default, typed: what it is when the environment leaves it unset."""
    return parse(name, BY_NAME[name].default)


@dataclass(frozen=True)
class Settings:
    """Every setting's typed value in effect, one attribute each (named as `Setting.attribute` says)."""

    pipeline: str | None
    warehouse: str
    bootstrap: str
    kafka_security_protocol: str
    kafka_sasl_mechanism: str | None
    kafka_sasl_username: str | None
    kafka_sasl_password: str | None
    kafka_ssl_cafile: Path | None
    kafka_ssl_check_hostname: bool
    kafka_properties: Path | None
    consumer_group: str | None
    updates_topic: str | None
    schema_registry_url: str | None
    schema_registry_user_info: str | None
    s3_endpoint: str | None
    spark_master: str
    spark_profile: str
    env: str
    driver_memory: str
    driver_host: str
    driver_bind_address: str | None
    jvm_options: str | None
    spark_cds: bool
    shuffle_partitions: int | None
    state_partitions: int
    switch_back: str
    redeploy_nice: int
    tidy_every: int
    lease_seconds: float
    max_record_bytes: int
    first_day: date
    fault: tuple[str, int] | None
    home: Path
    spark_jars: str
    pom: Path
    objectstore_heap: str
    log_format: str

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Every setting read and checked: the first bad one is the UserError."""
        return cls(**{setting.attribute: value(setting.name, env) for setting in SETTINGS})

    def __repr__(self) -> str:  # a secret stays out of logs and tracebacks
        def shown(setting: Setting) -> str:
            held = getattr(self, setting.attribute)
            return repr(setting.shown(held)) if isinstance(held, str) else repr(held)

        return f"Settings({', '.join(f'{setting.attribute}={shown(setting)}' for setting in SETTINGS)})"


def effective(env: Mapping[str, str] | None = None) -> list[tuple[Setting, str | None, str]]:
    """Each setting with its text in effect (a secret's masked) and where it came from: the environment, or the
    default."""
    rows = []
    for setting in SETTINGS:
        text = given(setting.name, env)
        if text is not None:
            rows.append((setting, setting.shown(text), "environment"))
        else:
            rows.append((setting, setting.default, "default" if setting.default is not None else "unset"))
    return rows


def markdown_table() -> str:
    """The settings as docs/cli.md shows them."""
    lines = ["| setting | default | what it sets | its value must be |", "|---|---|---|---|"]
    for s in SETTINGS:
        default_shown = f"`{s.default}`" if s.default is not None else ""
        lines.append(f"| `{s.name}` | {default_shown} | {s.meaning} | {s.kind.must} |")
    return "\n".join(lines)
