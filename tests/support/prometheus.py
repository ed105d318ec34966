"""A real Prometheus server (Debian's package, which setup installs) on 127.0.0.1, scraping given targets every
second with switchyard's alert rules loaded; and a reader of a /metrics page."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from switchyard.deploy.local_server import free_port

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "switchyard-rules.yml"


def binary(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is missing: `make setup` installs Debian's prometheus package"
    return path


@contextmanager
def prometheus(targets: list[str], folder: Path):
    """A Prometheus server scraping `targets` (HOST:PORT) as job `switchyard`; yields its query function."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(RULES, folder / RULES.name)
    (folder / "prometheus.yml").write_text(json.dumps({  # JSON is YAML
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [RULES.name],
        "scrape_configs": [{"job_name": "switchyard", "static_configs": [{"targets": targets}]}]}))
    port = free_port()
    with open(folder / "prometheus.log", "w") as log:
        proc = subprocess.Popen([binary("prometheus"), f"--config.file={folder / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={folder / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        yield lambda promql: query(port, promql)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def query(port: int, promql: str) -> list[dict] | None:
    """The instant vector's samples as {labels..., "value": float}; None while the server is not up."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            body = json.load(response)
    except urllib.error.HTTPError as err:  # the server is up and refused the query: say why
        raise AssertionError(f"Prometheus refused {promql!r}: {err.read().decode()}") from None
    except OSError:
        return None
    return [{**s["metric"], "value": float(s["value"][1])} for s in body["data"]["result"]]


def wait_for(condition, what: str, timeout: float = 60):
    """Poll `condition()` until it returns something truthy; that value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def scrape(url: str) -> dict[tuple, float]:
    """A /metrics page as {(name, (label, value), ...): value}."""
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    return {(s.name, *sorted(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}
