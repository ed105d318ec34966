"""The Java runtime check shared by Spark and the broker."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from switchyard.state_handoff.errors import UserError

MIN_JAVA = 17


def java_executable() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(os.path.join(java_home, "bin", "java"), os.X_OK):
        return os.path.join(java_home, "bin", "java")
    found = shutil.which("java")
    if not found:
        raise UserError(f"java not found: install Java {MIN_JAVA} or newer (e.g. apt-get install openjdk-17-jre-headless)")
    return found


def check_java() -> str:
    java = java_executable()
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        raise UserError(f"cannot tell the Java version of {java}: install Java {MIN_JAVA} or newer")
    major = int(match.group(1))
    if major == 1:  # "1.8.0" style
        major = int(match.group(2) or 0)
    if major < MIN_JAVA:
        raise UserError(f"Java {major} at {java} is too old: install Java {MIN_JAVA} or newer and put it on PATH or JAVA_HOME")
    return java
