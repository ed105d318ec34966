"""The JVM jars Spark and the local servers need (versions live in deploy/pom.xml, shipped with the package).

A checkout's setup fetches every profile with `mvn` into <home>/jars/<profile>. An installed copy has no setup:
its first Spark session resolves the `spark` and `s3a` profiles from Maven Central (through Ivy, which pyspark
ships, and the local Maven repository first when there is one) into <home>/jars/resolved, once; `switchyard
setup-jars` does the same ahead, for machines that run offline. SWITCHYARD_SPARK_JARS=provided adds none: the
platform's Spark has Delta, the Kafka connector and S3A already."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from xml.sax.saxutils import quoteattr

from switchyard.deploy.paths import jar_dir, runtime_home
from switchyard.state_handoff import settings
from switchyard.state_handoff.errors import UserError

logger = logging.getLogger(__name__)

_VERSION_SUFFIX = re.compile(r"-\d[\w.\-]*\.jar$")
_POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}
SPARK_PROFILES = ("spark", "s3a")
RESOLVED = "resolved"  # <home>/jars/resolved: the Spark profiles as an installed copy resolves them
MAVEN_CENTRAL = "https://repo1.maven.org/maven2/"


def artifact_name(jar: Path) -> str:
    return _VERSION_SUFFIX.sub("", jar.name)


def fetched_jars(profile: str) -> list[Path]:
    jars = sorted(jar_dir(profile).glob("*.jar"))
    if not jars:
        where = "`make setup`" if settings.IN_CHECKOUT else "`switchyard setup-jars`"
        raise UserError(f"no {profile} jars in {jar_dir(profile)}: run {where} first")
    return jars


def _spark_jars_in_home() -> list[Path] | None:
    """The Spark profiles' jars already in the home (fetched by setup, or resolved before); None if neither."""
    if all(any(jar_dir(profile).glob("*.jar")) for profile in SPARK_PROFILES):
        return [jar for profile in SPARK_PROFILES for jar in fetched_jars(profile)]
    resolved = sorted(jar_dir(RESOLVED).glob("*.jar"))
    return resolved or None


def spark_extra_jars() -> list[Path]:
    """Delta, the Kafka connector and S3A, leaving out every artifact that pyspark/jars already ships."""
    import pyspark

    if settings.value("SWITCHYARD_SPARK_JARS") == "provided":
        return []
    jars = _spark_jars_in_home()
    if jars is None:
        if settings.IN_CHECKOUT:
            fetched_jars("spark")  # the checkout's one way: setup's mvn (the error names it)
        jars = resolve_spark_jars()
    shipped = {artifact_name(j) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return [j for j in jars if artifact_name(j) not in shipped]


def kafka_classpath() -> str:
    return ":".join(str(j) for j in fetched_jars("kafka"))


def objectstore_classpath() -> str:
    return ":".join(str(j) for j in fetched_jars("objectstore"))


def pom_dependencies(profile: str, pom: Path | None = None) -> list[tuple[str, str, str, list[tuple[str, str]]]]:
    """The profile's dependencies in the pom: (group, artifact, version, [(group, artifact) excluded])."""
    root = ET.parse(pom or settings.value("SWITCHYARD_POM")).getroot()
    properties = {child.tag.split("}")[1]: (child.text or "").strip()
                  for child in root.find("m:properties", _POM_NS) or []}

    def text(node, tag: str) -> str:
        return re.sub(r"\$\{([^}]+)\}", lambda m: properties[m.group(1)], node.findtext(f"m:{tag}", "", _POM_NS))

    for node in root.iterfind("m:profiles/m:profile", _POM_NS):
        if node.findtext("m:id", "", _POM_NS) == profile:
            return [(text(dep, "groupId"), text(dep, "artifactId"), text(dep, "version"),
                     [(text(ex, "groupId"), text(ex, "artifactId")) for ex in dep.iterfind("m:exclusions/m:exclusion",
                                                                                         _POM_NS)])
                    for dep in node.iterfind("m:dependencies/m:dependency", _POM_NS)]
    raise UserError(f"no profile {profile!r} in {pom or settings.value('SWITCHYARD_POM')}")


def _ivy_files(profiles: tuple[str, ...], cache: Path) -> tuple[str, str]:
    """ivy.xml (the profiles' dependencies, Maven's runtime scope) and ivysettings.xml (the local Maven repository
    when there is one, then Maven Central)."""
    deps = []
    for profile in profiles:
        for group, artifact, version, excluded in pom_dependencies(profile):
            excludes = "".join(f"<exclude org={quoteattr(g)} module={quoteattr(a)}/>" for g, a in excluded)
            deps.append(f"<dependency org={quoteattr(group)} name={quoteattr(artifact)} rev={quoteattr(version)} "
                        f"conf=\"default->runtime,master\">{excludes}</dependency>")
    ivy = ("<ivy-module version=\"2.0\"><info organisation=\"io.switchyard\" module=\"switchyard-jars\"/>"
           "<configurations><conf name=\"default\"/></configurations>"
           f"<dependencies>{''.join(deps)}</dependencies></ivy-module>")
    local = Path.home() / ".m2" / "repository"
    resolvers = (f"<ibiblio name=\"local-m2\" m2compatible=\"true\" root={quoteattr(local.as_uri())}/>"
                 if local.is_dir() else "")
    resolvers += f"<ibiblio name=\"central\" m2compatible=\"true\" root=\"{MAVEN_CENTRAL}\"/>"
    ivysettings = (f"<ivysettings><settings defaultResolver=\"chain\"/>"
                   f"<caches defaultCacheDir={quoteattr(str(cache))}/>"
                   f"<resolvers><chain name=\"chain\" returnFirst=\"true\">{resolvers}</chain></resolvers>"
                   "</ivysettings>")
    return ivy, ivysettings


def resolve_spark_jars(out=logger.info, replace: bool = False) -> list[Path]:
    """Resolve the Spark profiles' runtime closure into <home>/jars/resolved with the Ivy that pyspark ships; the
    jars. Jars another process resolved there meanwhile are kept unless `replace`."""
    import pyspark

    from switchyard.deploy.java import check_java

    check_java()
    ivy_jars = sorted((Path(pyspark.__file__).parent / "jars").glob("ivy-*.jar"))
    if not ivy_jars:
        raise UserError("pyspark ships no Ivy jar to resolve Spark's jars with: run `switchyard setup-jars` with "
                        "a pyspark of the supported range, or set SWITCHYARD_SPARK_JARS=provided")
    dest = jar_dir(RESOLVED)
    out(f"switchyard: resolving Delta, the Kafka connector and S3A from Maven Central into {dest} (once)")
    work = runtime_home() / "ivy"
    work.mkdir(parents=True, exist_ok=True)
    ivy, ivysettings = _ivy_files(SPARK_PROFILES, work / "cache")
    (work / "ivy.xml").write_text(ivy)
    (work / "ivysettings.xml").write_text(ivysettings)
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=".resolving-", dir=dest.parent))
    done = subprocess.run(["java", "-cp", str(ivy_jars[-1]), "org.apache.ivy.Main",
                           "-settings", str(work / "ivysettings.xml"), "-ivy", str(work / "ivy.xml"),
                           "-confs", "default",
                           "-retrieve", f"{partial}/[artifact]-[revision](-[classifier]).[ext]"],
                          capture_output=True, text=True)
    if done.returncode != 0 or not any(partial.glob("*.jar")):
        shutil.rmtree(partial, ignore_errors=True)
        unresolved = re.findall(r"::\s+([\w.\-]+#[\w.\-]+;[\w.\-]+): (.+)", done.stdout)
        why = f"{unresolved[0][0]} ({unresolved[0][1].strip()})" if unresolved else "see `switchyard setup-jars`"
        raise UserError(f"could not resolve Spark's jars from Maven Central: {why}; on a machine without it, "
                        f"copy {dest} from one that has it, or set SWITCHYARD_SPARK_JARS=provided")
    if any(dest.glob("*.jar")) and not replace:  # another process resolved them meanwhile, and may read them now
        shutil.rmtree(partial, ignore_errors=True)
    else:
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(partial, dest)
    jars = sorted(dest.glob("*.jar"))
    out(f"switchyard: {len(jars)} jars in {dest}")
    return jars


def setup_jars(force: bool = False, out=logger.info, classpath: bool = False) -> int:
    """`switchyard setup-jars`: the Spark jars resolved ahead of the first session (again with --force); with
    `classpath`, only their paths, comma-separated, as `spark-submit --jars` takes them (resolved first if need be)."""
    if classpath:
        print(",".join(str(j) for j in spark_extra_jars()))  # the command's result, not a log line
        return 0
    if settings.value("SWITCHYARD_SPARK_JARS") == "provided":
        out("switchyard: SWITCHYARD_SPARK_JARS=provided: the platform's Spark has the jars; nothing to resolve")
        return 0
    held = _spark_jars_in_home()
    if held and not force:
        out(f"switchyard: {len(held)} Spark jars already in {runtime_home() / 'jars'} (--force resolves again)")
        return 0
    resolve_spark_jars(out, replace=force)
    return 0

