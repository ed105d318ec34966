"""Where the warehouse lives: a local folder or an S3-compatible object store (`s3a://bucket/prefix`).

The one place that turns a warehouse URI into a file system (pyarrow's, so `status`, the Dagster sensor and the
control code read without a JVM), into delta-rs storage options, and into the location's one identity
(how fencing knows a table however it is spelled). Object-store settings come only from the
environment: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (with AWS_SESSION_TOKEN), else the AWS default credential
chain (AWS_PROFILE, web identity, the instance's role); SWITCHYARD_S3_ENDPOINT (e.g. http://127.0.0.1:9000; unset
means AWS itself) and AWS_REGION (default us-east-1)."""

from __future__ import annotations

import functools
import os
import posixpath
from urllib.parse import unquote, urlparse

from switchyard.state_handoff import settings
from switchyard.state_handoff.errors import UserError

S3_SCHEMES = ("s3a", "s3")
ENDPOINT_ENV = "SWITCHYARD_S3_ENDPOINT"
DEFAULT_REGION = "us-east-1"


class Uri(str):
    """A local path or an object-store URL that `/` extends by one segment, as pathlib does; still a plain string
    for Spark, delta-rs and messages."""

    def __truediv__(self, segment: str) -> "Uri":
        return Uri(f"{self.rstrip('/')}/{segment}")


def is_object_store(uri: str) -> bool:
    return urlparse(str(uri)).scheme in S3_SCHEMES


def s3_credentials() -> tuple[str, str, str | None] | None:
    """Static keys from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, and AWS_SESSION_TOKEN for
    temporary ones), or None: then Spark's S3A, delta-rs and pyarrow each take the AWS SDK's default chain (AWS_PROFILE
    with the shared credentials and config files, web identity, the container's or the instance's role)."""
    env = settings.environment()
    key, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
    if bool(key) != bool(secret):
        raise UserError("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY go together: set both, or neither to use the "
                        "AWS default credential chain (AWS_PROFILE, web identity, the instance's role)")
    return (key, secret, env.get("AWS_SESSION_TOKEN") or None) if key else None


@functools.lru_cache(maxsize=None)
def profile_keys(profile: str) -> tuple[str, str, str | None]:
    """The keys of AWS profile `profile`, from the shared credentials file or the config file
    (AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE, else ~/.aws/), as the AWS SDKs read them."""
    import configparser

    env = settings.environment()
    places = [(env.get("AWS_SHARED_CREDENTIALS_FILE") or "~/.aws/credentials", profile),
              (env.get("AWS_CONFIG_FILE") or "~/.aws/config",
               profile if profile == "default" else f"profile {profile}")]
    for path, section in places:
        parser = configparser.RawConfigParser()
        parser.read(os.path.expanduser(path))
        if parser.has_option(section, "aws_access_key_id") and parser.has_option(section, "aws_secret_access_key"):
            token = parser.get(section, "aws_session_token", fallback=None)
            return parser.get(section, "aws_access_key_id"), parser.get(section, "aws_secret_access_key"), token
    raise UserError(f"AWS_PROFILE {profile} holds no keys in {places[0][0]} or {places[1][0]}: delta-rs reads a "
                    "profile's keys only; for an SSO or assumed-role profile export its credentials into the "
                    f"environment (`aws configure export-credentials --profile {profile} --format env`)")


def s3_endpoint() -> str | None:
    """The object store's endpoint URL, None for AWS itself."""
    return settings.value(ENDPOINT_ENV)


def s3_region() -> str:
    env = settings.environment()
    return env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION


def delta_options(uri: str) -> dict[str, str] | None:
    """delta-rs storage options for a table at `uri`; None for a local one.

    Commits are put with If-None-Match: * (object_store's `conditional_put`), so a commit at a version that
    another writer took fails instead of overwriting it: the compare-and-swap state_handoff/io/delta_cas.py relies on.
    """
    if not is_object_store(uri):
        return None
    options = {"AWS_REGION": s3_region(), "conditional_put": "etag"}
    # delta-rs resolves web identity, the container's and the instance's credentials by itself, not a profile
    profile = settings.given("AWS_PROFILE")
    keys = s3_credentials() or (profile_keys(profile) if profile else None)
    if keys is not None:  # static keys: no need to ask the instance's metadata service
        options.update({"AWS_ACCESS_KEY_ID": keys[0], "AWS_SECRET_ACCESS_KEY": keys[1],
                        "AWS_EC2_METADATA_DISABLED": "true"})
        if keys[2]:
            options["AWS_SESSION_TOKEN"] = keys[2]
    endpoint = s3_endpoint()
    if endpoint is not None:
        options["AWS_ENDPOINT_URL"] = endpoint
        options["AWS_ALLOW_HTTP"] = str(endpoint.startswith("http://")).lower()
    return options


@functools.lru_cache(maxsize=None)
def _s3(endpoint: str | None, region: str, keys: tuple[str, str, str | None] | None):
    from pyarrow import fs

    extra = {}
    if endpoint is not None:
        parsed = urlparse(endpoint)
        extra = {"endpoint_override": parsed.netloc, "scheme": parsed.scheme}
        # pyarrow's AWS SDK sends CRC64NVME checksums by default, which S3-compatible stores (S3Proxy among them)
        # refuse; checksums only where the S3 API requires them. Read when the SDK client is made.
        os.environ.setdefault("AWS_REQUEST_CHECKSUM_CALCULATION", "WHEN_REQUIRED")
        os.environ.setdefault("AWS_RESPONSE_CHECKSUM_VALIDATION", "WHEN_REQUIRED")
    if keys is not None:
        extra.update(access_key=keys[0], secret_key=keys[1], session_token=keys[2])
    return fs.S3FileSystem(region=region, **extra)  # without keys: the AWS SDK's default chain


def filesystem(uri: str):
    """(pyarrow file system, path within it) for a local path or an s3a:// / s3:// URL."""
    from pyarrow import fs

    uri = str(uri)
    parsed = urlparse(uri)
    if parsed.scheme in S3_SCHEMES:
        return _s3(s3_endpoint(), s3_region(), s3_credentials()), f"{parsed.netloc}{parsed.path}".rstrip("/")
    if parsed.scheme == "file":
        return fs.LocalFileSystem(), parsed.path
    return fs.LocalFileSystem(), os.path.abspath(uri)


def identity(uri: str) -> str:
    """The one name of the location `uri` spells, however it is spelled: a local path (or `file://` URL, its
    percent-escapes decoded) absolute, normalized, its symlinks resolved and each existing folder named as the file
    system stores it (case and Unicode form, where the file system ignores them); an object-store URL as `s3://`,
    its bucket in lower case and its key decoded and normalized. Two spellings of one table (a Tables path and
    delta-rs's `table_uri`, say) have the same identity."""
    uri = str(uri)
    parsed = urlparse(uri)
    if parsed.scheme in S3_SCHEMES:
        key = posixpath.normpath("/" + unquote(parsed.path)).lstrip("/")
        return f"s3://{parsed.netloc.lower()}/{key}".rstrip("/")
    path = unquote(parsed.path) if parsed.scheme == "file" else uri
    return _as_stored(os.path.realpath(os.path.abspath(path)))


def _as_stored(path: str) -> str:
    """`path` (absolute, symlinks resolved) with each existing component as its folder lists it: on a file system
    that ignores case or Unicode form, the spelling the folder holds rather than the one asked for."""
    parts = [part for part in path.split("/") if part]
    stored = "/"
    for depth, part in enumerate(parts):
        asked = os.path.join(stored, part)
        if not os.path.exists(asked):  # below here nothing exists yet: the rest as given
            return posixpath.join(stored, *parts[depth:])
        stored = os.path.join(stored, _stored_name(stored, part))
    return stored


def _stored_name(folder: str, name: str) -> str:
    """The spelling under which `folder` lists its existing entry `name` (as given when the folder cannot be
    listed: a folder one may pass through but not read)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return name
    if name in names:
        return name
    asked = os.path.join(folder, name)
    return next((entry for entry in names if _same(os.path.join(folder, entry), asked)), name)


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def join(base: str, *segments: str) -> str:
    return "/".join([str(base).rstrip("/"), *segments])


def relative(path: str, root: str) -> str:
    """`path` below `root`, as a relative path with `/` (both named the same way, as listing returns them)."""
    prefix = str(root).rstrip("/") + "/"
    if not str(path).startswith(prefix):
        raise ValueError(f"{path} is not below {root}")
    return str(path)[len(prefix):]


def exists(uri: str) -> bool:
    from pyarrow import fs

    filesystem_, path = filesystem(uri)
    return filesystem_.get_file_info(path).type != fs.FileType.NotFound


def is_dir(uri: str) -> bool:
    from pyarrow import fs

    filesystem_, path = filesystem(uri)
    return filesystem_.get_file_info(path).type == fs.FileType.Directory


def list_dir(uri: str) -> list[str]:
    """Names of the entries directly below `uri`, sorted; empty when there is no such folder."""
    from pyarrow import fs

    filesystem_, path = filesystem(uri)
    try:
        infos = filesystem_.get_file_info(fs.FileSelector(path, allow_not_found=True))
    except NotADirectoryError:
        return []
    return sorted(info.base_name for info in infos)


def list_files(uri: str) -> list[str]:
    """Every file below the folder `uri`, at any depth, each named from `uri` on; sorted."""
    from pyarrow import fs

    filesystem_, path = filesystem(uri)
    try:
        infos = filesystem_.get_file_info(fs.FileSelector(path, recursive=True, allow_not_found=True))
    except NotADirectoryError:
        return []
    prefix = path.rstrip("/") + "/"
    return sorted(join(uri, info.path[len(prefix):]) for info in infos
                  if info.type == fs.FileType.File and info.path.startswith(prefix))


def read_bytes(uri: str) -> bytes:
    """The file's content; FileNotFoundError when there is none."""
    filesystem_, path = filesystem(uri)
    with filesystem_.open_input_stream(path) as stream:
        return stream.read()


def read_text(uri: str) -> str:
    return read_bytes(uri).decode()


def open_input(uri: str):
    """A seekable reader (for pyarrow.parquet)."""
    filesystem_, path = filesystem(uri)
    return filesystem_.open_input_file(path)


def write_text_atomic(uri: str, text: str) -> None:
    """Readers see the old content or the new, never a part: locally a temporary file renamed over the old one
    (atomic on a POSIX file system), on an object store one PUT (an object appears whole or not at all)."""
    uri = str(uri)
    if is_object_store(uri):
        filesystem_, path = filesystem(uri)
        with filesystem_.open_output_stream(path) as stream:
            stream.write(text.encode())
        return
    path = os.path.abspath(uri)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def delete(uri: str) -> None:
    """Delete a file; nothing when it is gone already."""
    filesystem_, path = filesystem(uri)
    try:
        filesystem_.delete_file(path)
    except FileNotFoundError:
        pass


def delete_tree(uri: str) -> None:
    """Delete a folder and everything below it; nothing when it is gone already."""
    filesystem_, path = filesystem(uri)
    try:
        filesystem_.delete_dir(path)
    except FileNotFoundError:
        pass
