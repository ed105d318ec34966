"""A real S3-compatible object store on 127.0.0.1: S3Proxy (from Maven Central) with the bucket `switchyard`, run
in the background. It accepts the one identity in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, the same variables
every client of the warehouse reads (state_handoff/io/storage.py).

Objects live in the server's memory (jclouds' `transient` store), so they are gone when it stops. S3Proxy's
file-system stores do not keep S3's directory markers the way Hadoop's S3A relies on: on `filesystem` an empty
`dir/` marker vanishes from listings (a new streaming checkpoint's `offsets/` is "not found"), on
`filesystem-nio2` a folder answers a HEAD as an object (Delta's `_delta_log/_staged_commits` "is a file")."""

from __future__ import annotations

import os
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from switchyard.deploy import local_server
from switchyard.deploy.jars import objectstore_classpath
from switchyard.deploy.java import check_java
from switchyard.deploy.local_server import HOST
from switchyard.deploy.paths import objectstore_home
from switchyard.state_handoff import settings
from switchyard.state_handoff.errors import UserError

BUCKET = "switchyard"
HEAP_ENV = "SWITCHYARD_OBJECTSTORE_HEAP"
START_TIMEOUT_S = 90
STOP_TIMEOUT_S = 30
_MAIN = "org.gaul.s3proxy.Main"
# S3Proxy ships no logging configuration; logback's default logs every request at DEBUG.
_LOGBACK = """\
<configuration>
  <appender name="console" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{HH:mm:ss.SSS} %-5level %logger{36} - %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="console"/></root>
</configuration>
"""


@dataclass(frozen=True)
class ObjectStore:
    """The files of the object store that listens on `port`."""

    port: int
    home: Path

    @classmethod
    def at(cls, port: int, home: Path | None = None) -> "ObjectStore":
        return cls(port, Path(home) if home else objectstore_home(port))

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def config_file(self) -> Path:
        return self.home / "s3proxy.conf"

    @property
    def pid_file(self) -> Path:
        return self.home / "s3proxy.pid"

    @property
    def process(self) -> local_server.PidFile:
        """The server's process, tracked by its pid file (S3Proxy reading this store's configuration)."""
        return local_server.PidFile(self.pid_file, (_MAIN, str(self.config_file)))

    @property
    def log_file(self) -> Path:
        return self.home / "logs" / "s3proxy.log"


def _credentials() -> tuple[str, str]:
    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not key or not secret:
        raise UserError("the object store accepts the credentials in the environment: set AWS_ACCESS_KEY_ID and "
                        "AWS_SECRET_ACCESS_KEY before `switchyard dev objectstore start`")
    return key, secret


def _config(store: ObjectStore, key: str, secret: str) -> str:
    return f"""\
s3proxy.endpoint={store.endpoint}
s3proxy.authorization=aws-v2-or-v4
s3proxy.identity={key}
s3proxy.credential={secret}
# Clients send checksum headers S3Proxy does not evaluate (delta-rs' DeleteObjects carries x-amz-checksum-sha256).
s3proxy.ignore-unknown-headers=true
jclouds.provider=transient
"""


def _write_private(path: Path, text: str) -> None:
    """The configuration holds the secret: readable by its owner only, from the moment it exists."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def _answers(store: ObjectStore) -> bool:
    """True once the server answers S3 requests (an unsigned one is refused, which is an answer)."""
    try:
        urllib.request.urlopen(f"{store.endpoint}/", timeout=2).close()
        return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError):
        return False


def _create_bucket(store: ObjectStore, key: str, secret: str) -> None:
    from pyarrow import fs

    s3 = fs.S3FileSystem(access_key=key, secret_key=secret, region="us-east-1", endpoint_override=f"{HOST}:{store.port}",
                         scheme="http", allow_bucket_creation=True)
    if s3.get_file_info(BUCKET).type == fs.FileType.NotFound:
        s3.create_dir(BUCKET)


def start(store: ObjectStore) -> str:
    """Start the server (idempotent) and create the bucket; return a one-line description."""
    key, secret = _credentials()
    if store.process.running() is None:
        local_server.check_ports_free([store.port])
        java = check_java()
        (store.home / "logs").mkdir(parents=True, exist_ok=True)
        _write_private(store.config_file, _config(store, key, secret))
        (store.home / "logback.xml").write_text(_LOGBACK)
        proc = local_server.launch(
            [java, f"-Xmx{settings.value(HEAP_ENV)}", "-XX:+UseSerialGC", "-Djava.awt.headless=true",
             f"-Dlogback.configurationFile={store.home / 'logback.xml'}",
             "-cp", objectstore_classpath(), _MAIN, "--properties", str(store.config_file)],
            store.log_file, store.home)
        store.process.record(proc.pid)
        _wait_until_up(store, proc)
        started = f"started (pid {proc.pid})"
    else:
        _wait_until_up(store, None)
        started = f"already running (pid {store.process.running()})"
    _create_bucket(store, key, secret)
    return (f"objectstore {started} on {store.endpoint}, bucket {BUCKET} (in memory until stopped): "
            f"export SWITCHYARD_S3_ENDPOINT={store.endpoint} and use --warehouse s3a://{BUCKET}/warehouse")


def _wait_until_up(store: ObjectStore, process: subprocess.Popen | None) -> None:
    exited = f"the object store exited with code {{code}} while starting: see {store.log_file}"
    if store.process.wait_until_ready(lambda: _answers(store), START_TIMEOUT_S, process, exited, interval_s=0.3):
        return
    raise UserError(f"the object store did not answer on {store.endpoint} within {START_TIMEOUT_S}s: "
                    f"see {store.log_file}")


def stop(store: ObjectStore) -> str:
    """Stop the server this project started, by pid, and wait for it to exit; its objects go with it."""
    pid = store.process.stop(STOP_TIMEOUT_S)
    if pid is None:
        return f"objectstore on {store.endpoint} is not running"
    return f"objectstore on {store.endpoint} stopped (pid {pid})"


def status(store: ObjectStore) -> tuple[bool, str]:
    pid = store.process.running()
    if pid is None:
        return False, f"objectstore on {store.endpoint} is not running"
    if not _answers(store):
        return False, f"objectstore process {pid} runs but does not answer on {store.endpoint}: see {store.log_file}"
    return True, f"objectstore is up on {store.endpoint} (pid {pid}), bucket {BUCKET}"
