"""The driver JVM's options: its log4j configuration and, for quick starts, the fast compiler only and the
class-data archive (`class_archive_path`, made by warm_start/jvm_archive.py); a local Spark Connect
server's options likewise (`connect_server_java_options`).
"""

from __future__ import annotations

import os

from compaction_assets import settings

LOG4J = os.path.join(os.path.dirname(__file__), "log4j2.properties")


def _java_binary(env: settings.Settings) -> str | None:
    """The `java` that PySpark's launcher runs: JAVA_HOME's, else the first on PATH (None: not found)."""
    import shutil

    path = os.path.join(env.java_home, "bin", "java") if env.java_home else shutil.which("java")
    return os.path.realpath(path) if path and os.path.exists(path) else None


def class_archive_path(env: settings.Settings | None = None) -> str | None:
    """Where the driver JVM's class-data archive for this Java and this PySpark lives (None: no Java).

    A dynamic archive (JDK's AppCDS) holds the classes a cleaning loads, parsed and verified once, so a
    JVM maps them instead of loading and verifying them again, and a command's JVM starts sooner. It is
    valid only for the JVM and class path it was made with, so its name carries both."""
    import hashlib

    import pyspark

    env = env or settings.current()
    java = _java_binary(env)
    if java is None:
        return None
    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    stamp = f"{java}:{os.stat(java).st_mtime_ns}:{pyspark.__version__}:{jars}"
    key = hashlib.sha1(stamp.encode()).hexdigest()[:16]
    return os.path.join(env.jvm_archive_dir, f"spark-driver-{pyspark.__version__}-{key}.jsa")


def driver_java_options(
    env: settings.Settings, *, dump_archive_to: str | None = None, class_archive: bool = True
) -> str:
    """The driver JVM's options: the log4j configuration, and for quick starts C1 only with the class-data
    archive (read when it exists, or written at exit to `dump_archive_to`; none without `class_archive`)."""
    options = [f"-Dlog4j.configurationFile=file:{LOG4J}"]
    if env.jvm_quick_start:
        # A command lives seconds: the optimizing compiler (C2) would spend them, on few cores, compiling
        # code it barely runs.
        options.append("-XX:TieredStopAtLevel=1")
        if dump_archive_to:
            options.append(f"-XX:ArchiveClassesAtExit={dump_archive_to}")
        elif class_archive:
            archive = class_archive_path(env)
            if archive and os.path.isfile(archive):
                options.append(f"-XX:SharedArchiveFile={archive}")
        # the JVM's own warnings go to stderr, never into a command's output on stdout
        options += ["-Xlog:disable", "-Xlog:all=warning:stderr"]
    return " ".join(options)


def connect_server_java_options(env: settings.Settings | None = None) -> str:
    """The JVM options of a local Spark Connect server (scripts/spark-connect.sh): the log4j configuration,
    and with the quick start the fast compiler only.

    A server lives long, but on few cores the optimizing compiler competes with the queries for them, and
    every cleaning brings newly generated classes to compile. The class-data archive is the driver's: a
    server's class path differs."""
    return driver_java_options(env or settings.current(), class_archive=False)
