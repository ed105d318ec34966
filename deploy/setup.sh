#!/usr/bin/env bash
# Idempotent setup: check Java and Maven, make .venv with the pinned packages, fetch the JVM jars.
# Each step leaves a stamp and is skipped while its inputs are unchanged, so a rerun works offline.
set -euo pipefail
cd "$(dirname "$0")/.."

HOME_DIR="${SWITCHYARD_HOME:-$PWD/.switchyard}"
POM="${SWITCHYARD_POM:-deploy/pom.xml}"
PYTHON="${PYTHON:-python3.11}"
fail() { echo "switchyard setup: $*" >&2; exit 2; }

check_java() {
  command -v java >/dev/null 2>&1 || fail "java not found: install Java 17 or newer (apt-get install openjdk-17-jdk-headless)"
  local major
  major=$(java -version 2>&1 | sed -nE 's/.*version "([0-9]+)(\.([0-9]+))?.*/\1 \3/p' | head -1)
  set -- $major
  local m=${1:-0}; [ "$m" = 1 ] && m=${2:-0}
  [ "$m" -ge 17 ] || fail "Java $m is too old: install Java 17 or newer and put it first on PATH"
}

setup_python() {
  local stamp=.venv/.switchyard-installed
  if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ] && [ "$stamp" -nt constraints.txt ]; then return; fi
  command -v "$PYTHON" >/dev/null 2>&1 || fail "$PYTHON not found: install Python 3.11 (or set PYTHON=/path/to/python3.11)"
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  echo "switchyard setup: installing Python packages into .venv (first time takes a few minutes)"
  .venv/bin/python -m pip install -q --upgrade pip
  # --no-compile: compile_python below does it once, in parallel; pip compiles file by file, and dagster, pyspark
  # and GX hold many files
  # the package's ranges, held to the exact versions of constraints.txt; every extra
  .venv/bin/python -m pip install -q --no-compile -c constraints.txt -e '.[dagster,dev,bench,test]' \
    || fail "pip could not install the pinned packages (see the output above)"
  touch "$stamp"
}

compile_python() {
  # Byte-compile the installed packages once. Where PYTHONDONTWRITEBYTECODE is set (as on a CI machine), Python
  # never caches what it compiles, so every process would compile pandas, pyspark and the rest again on import,
  # and every short-lived command would start that much slower.
  local stamp=.venv/.switchyard-compiled
  if [ -f "$stamp" ] && [ "$stamp" -nt .venv/.switchyard-installed ]; then return; fi
  echo "switchyard setup: byte-compiling the Python packages (once)"
  local packages; packages=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  # a few packages ship files that are not Python 3 (templates, tests of old syntax): compileall reports them
  .venv/bin/python -m compileall -q -j 0 "$packages" >/dev/null 2>&1 || true
  touch "$stamp"
}

fetch_jars() {
  local profile=$1 dest="$HOME_DIR/jars/$1" stamp="$HOME_DIR/jars/.$1-fetched"
  if [ -f "$stamp" ] && [ "$stamp" -nt "$POM" ]; then return; fi
  command -v mvn >/dev/null 2>&1 || fail "mvn not found: install Maven (apt-get install maven)"
  echo "switchyard setup: fetching $profile jars with mvn into $dest"
  rm -rf "$dest"; mkdir -p "$dest"
  local log; log=$(mktemp)
  if ! mvn -B -q -s deploy/maven-settings.xml -f "$POM" -P "$profile" \
        dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$dest" >"$log" 2>&1; then
    local missing
    # Maven words it differently once a miss is cached in ~/.m2 ("Failure to find ..."); never let grep end the script.
    missing=$(grep -oE '(Could not find artifact|Could not transfer artifact|Failed to read artifact descriptor for|Failure to find) [^ ,]+|([A-Za-z0-9_.-]+:){3,4}[A-Za-z0-9_.-]+ was not found' "$log" | head -1 || true)
    rm -rf "$dest"
    fail "mvn could not fetch the $profile jars: ${missing:-see mvn -f deploy/pom.xml -P $profile dependency:copy-dependencies}"
  fi
  rm -f "$log"
  touch "$stamp"
}

apt_install() {
  # apt_install WHY PACKAGE [apt-get option...]: Debian's PACKAGE, as root (sudo when not), unless present
  local why=$1 package=$2; shift 2
  local as_root=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || fail "$package is missing and installing it needs root: run apt-get install -y $package as root"
    as_root=(sudo)
  fi
  command -v apt-get >/dev/null 2>&1 || fail "$package is missing and apt-get is not available: install Debian's $package package"
  echo "switchyard setup: installing Debian's $package with apt-get ($why)"
  { "${as_root[@]}" apt-get update -qq && "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" "$package"; } >/dev/null \
    || fail "apt-get could not install $package: run apt-get update && apt-get install -y $package as root"
}

install_debian_packages() {
  [ -x /usr/bin/chromium ] || apt_install "the UI test loads the Dagster asset graph in it" chromium
  # without the node exporter it recommends; the tests start their own server on a free port
  { [ -x /usr/bin/prometheus ] && [ -x /usr/bin/promtool ]; } \
    || apt_install "the metrics tests scrape with it and check the alert rules with promtool" prometheus --no-install-recommends
}

spark_class_archive() {
  # Drivers start faster with their classes archived (deploy/spark_cds.py); without it they only start slower.
  .venv/bin/python -m switchyard.jobs.spark_cds_build \
    || echo "switchyard setup: warning: no Spark class archive (see above); drivers start without it" >&2
}

check_java
setup_python
compile_python
fetch_jars spark
fetch_jars s3a
fetch_jars kafka
fetch_jars objectstore
# apt-get downloads and unpacks its packages while the JVM archives its classes; a failure of either stops setup.
install_debian_packages &
debian=$!
spark_class_archive
wait "$debian" || exit $?
