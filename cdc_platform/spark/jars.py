"""The Apache Spark jars the platform installs, fetched once and then used offline.

Classic PySpark and a Spark Connect server started from pyspark's own jars lack two things:
delta-spark (MERGE INTO, ``VERSION AS OF`` on Delta tables) and hadoop-aws with the AWS SDK
(S3 through ``s3a``). ``scripts/setup.sh`` runs :func:`main` once:
Maven resolves :data:`ARTIFACTS` into its own local repository (``~/.m2``, outside the work
tree, so a second clone on the same machine reuses it), leaving out every jar pyspark already
ships, and the list of resolved files is written to a small manifest in the platform's cache
directory (``CDC_PLATFORM_CACHE``, default ``~/.cache/cdc-platform``). Sessions put those
files in ``spark.jars``: nothing is resolved when a session starts, so no network is needed
after the first fetch.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from xml.sax.saxutils import escape

from cdc_platform.errors import SparkSessionError

__all__ = [
    "ARTIFACTS",
    "DELTA_SPARK",
    "HADOOP_AWS",
    "cache_dir",
    "fetch",
    "installed_jars",
    "manifest_path",
    "pyspark_jar_names",
]

DELTA_SPARK = "io.delta:delta-spark_4.2_2.13:4.4.0"
"""delta-spark built for Spark 4.2 / Scala 2.13 (the pyspark pin). Delta names its artifacts
after the Spark version; 4.4.1 (the PyPI package's version) is not published on Maven
Central, so ``configure_spark_with_delta_pip`` cannot resolve and is not used."""

HADOOP_AWS = "org.apache.hadoop:hadoop-aws:3.5.0"
"""S3A for the Hadoop 3.5.0 inside pyspark; pulls the AWS SDK v2 bundle it was built with
(about 690 MB, hence the cache)."""

ARTIFACTS: tuple[str, ...] = (DELTA_SPARK, HADOOP_AWS)

_VERSIONED = re.compile(r"-\d")


def cache_dir() -> Path:
    """Where the manifest lives: ``CDC_PLATFORM_CACHE``, else ``$XDG_CACHE_HOME`` (or
    ``~/.cache``) ``/cdc-platform``."""
    given = os.environ.get("CDC_PLATFORM_CACHE")
    if given:
        return Path(given).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cdc-platform"


def _pyspark_jars_dir() -> Path:
    import pyspark  # noqa: PLC0415 (only to locate its jars)

    return Path(pyspark.__file__).parent / "jars"


def pyspark_jar_names() -> list[str]:
    """The artifact names pyspark ships, each way a file name can be read.

    ``zstd-jni-1.5.7-7.jar`` gives ``zstd-jni`` and ``zstd-jni-1.5.7``: excluding a name that
    is no artifact costs nothing, missing one would fetch a duplicate.
    """
    names: set[str] = set()
    for jar in _pyspark_jars_dir().glob("*.jar"):
        stem = jar.name.removesuffix(".jar")
        names.update(stem[: match.start()] for match in _VERSIONED.finditer(stem))
    return sorted(names)


def _key(excluded: list[str]) -> str:
    pyspark_version = metadata.version("pyspark")
    text = "\n".join([pyspark_version, *ARTIFACTS, *excluded])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def manifest_path(excluded: list[str] | None = None) -> Path:
    """The manifest for these artifacts and this pyspark (the key changes when either does)."""
    names = pyspark_jar_names() if excluded is None else excluded
    return cache_dir() / f"spark-jars-{_key(names)}.txt"


def _read(manifest: Path) -> list[str] | None:
    try:
        jars = [line for line in manifest.read_text().splitlines() if line.strip()]
    except OSError:
        return None
    return jars if jars and all(Path(j).is_file() for j in jars) else None


def installed_jars() -> list[str]:
    """The jar files ``scripts/setup.sh`` fetched, for ``spark.jars``.

    Raises SparkSessionError (not transient) when they were never fetched or a file is gone.
    """
    manifest = manifest_path()
    jars = _read(manifest)
    if jars is None:
        raise SparkSessionError(
            f"the Apache Spark jars ({', '.join(ARTIFACTS)}) are not installed (no complete "
            f"list at {manifest}): run scripts/setup.sh, which fetches them from Maven Central "
            "once"
        )
    return jars


def _pom(excluded: list[str]) -> str:
    exclusions = "".join(
        f"<exclusion><groupId>*</groupId><artifactId>{escape(n)}</artifactId></exclusion>"
        for n in excluded
    )
    dependencies = ""
    for coordinate in ARTIFACTS:
        group, artifact, version = coordinate.split(":")
        dependencies += (
            f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
            f"<version>{version}</version><exclusions>{exclusions}</exclusions></dependency>"
        )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>local.cdc-platform</groupId><artifactId>spark-jars</artifactId>"
        "<version>1</version><packaging>pom</packaging>"
        f"<dependencies>{dependencies}</dependencies></project>"
    )


def _maven_failure(output: str) -> str:
    """What Maven could not fetch, from its output (the artifact names, or its last error)."""
    missing = re.findall(r"(?:Could not (?:find|transfer) artifact|resolve) (\S+:\S+)", output)
    if missing:
        return "could not fetch " + ", ".join(dict.fromkeys(missing))
    errors = [line for line in output.splitlines() if "ERROR" in line]
    return errors[0].strip() if errors else output.strip()[-500:]


def fetch() -> tuple[list[str], bool]:
    """Resolve :data:`ARTIFACTS` with Maven unless the manifest is complete already.

    Returns the jar files and whether anything was resolved. Raises SparkSessionError naming
    what could not be fetched.
    """
    excluded = pyspark_jar_names()
    manifest = manifest_path(excluded)
    jars = _read(manifest)
    if jars is not None:
        return jars, False
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SparkSessionError(
            "mvn not found: Maven fetches the Apache Spark jars (scripts/setup.sh installs "
            "Debian's maven package)"
        )
    manifest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cdc-spark-jars-") as work:
        pom = Path(work) / "pom.xml"
        pom.write_text(_pom(excluded))
        listing = Path(work) / "classpath.txt"
        done = subprocess.run(
            [
                mvn,
                "-B",
                "-q",
                "-f",
                str(pom),
                "dependency:build-classpath",
                f"-Dmdep.outputFile={listing}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0 or not listing.exists():
            raise SparkSessionError(
                f"Maven could not fetch the Apache Spark jars {', '.join(ARTIFACTS)}: "
                f"{_maven_failure(done.stdout + done.stderr)}"
            )
        jars = [j for j in listing.read_text().strip().split(os.pathsep) if j]
    temporary = manifest.with_suffix(".tmp")
    temporary.write_text("".join(f"{j}\n" for j in jars))
    temporary.replace(manifest)
    return jars, True


def main() -> int:
    """What scripts/setup.sh runs: fetch if needed; quiet when nothing to do."""
    try:
        jars, fetched = fetch()
    except SparkSessionError as exc:
        print(f"setup: {exc}", file=sys.stderr)
        return 1
    if fetched:
        size = sum(Path(j).stat().st_size for j in jars) / 2**20
        print(
            f"setup: Apache Spark jars ready ({len(jars)} files, {size:.0f} MiB; list in "
            f"{manifest_path()})",
            file=sys.stderr,
        )
    return 0
