#!/usr/bin/env python3
"""Run a real single-node Apache Kafka (KRaft) broker on 127.0.0.1 from Maven Central jars.

    python scripts/kafka_broker.py fetch               # download the jars (needs mvn + java 17)
    python scripts/kafka_broker.py run --port 29092    # run a broker in the foreground (Ctrl-C stops)

The jars are cached in ~/.cache/memstream/kafka-<version>/lib. The test suite imports this module
(tier 2, `scripts/test --kafka`) to start a throwaway broker with its data in a temporary folder.
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from memstream.embedded.parent_death import die_with_parent

KAFKA_VERSION = os.environ.get("MEMSTREAM_KAFKA_VERSION", "4.1.0")
CACHE = Path(os.environ.get("MEMSTREAM_KAFKA_CACHE", Path.home() / ".cache" / "memstream"))

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>memstream.dev</groupId><artifactId>kafka-broker-jars</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{version}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId>
      <version>2.24.3</version></dependency>
  </dependencies>
</project>
"""


def lib_dir(version: str = KAFKA_VERSION) -> Path:
    return CACHE / f"kafka-{version}" / "lib"


def fetch(version: str = KAFKA_VERSION) -> Path:
    """Download kafka_2.13:<version> and its runtime dependencies (idempotent)."""
    lib = lib_dir(version)
    marker = lib / ".complete"
    if marker.is_file():
        return lib
    for tool in ("mvn", "java"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"`{tool}` is not on PATH: install OpenJDK 17 and Maven to run the Kafka tier")
    work = lib.parent
    work.mkdir(parents=True, exist_ok=True)
    (work / "pom.xml").write_text(_POM.format(version=version))
    print(
        f"fetching Apache Kafka {version} jars from Maven Central into {lib} ...", file=sys.stderr, flush=True
    )
    subprocess.run(
        [
            "mvn",
            "-q",
            "-B",
            "-f",
            str(work / "pom.xml"),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={lib}",
            "-DincludeScope=runtime",
        ],
        check=True,
    )
    marker.write_text(version)
    return lib


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def new_cluster_id() -> str:
    """A random KRaft cluster id (22 base64url characters) that does not start with "-": the
    storage tool would read such an id as an option and refuse to format (1 start in 64 failed so).
    Kafka's own `Uuid.randomUuid()` makes the same choice."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class KafkaBroker:
    """A throwaway KRaft broker+controller. `bootstrap` is `127.0.0.1:PORT`."""

    def __init__(self, data_dir: Path, port: int | None = None, version: str = KAFKA_VERSION) -> None:
        self.data_dir = data_dir
        self.port = port or _free_port()
        self.controller_port = _free_port()
        self.version = version
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _write_config(self) -> Path:
        logs = self.data_dir / "kraft-logs"
        config = self.data_dir / "server.properties"
        config.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    "node.id=1",
                    f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
                    f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
                    f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
                    "controller.listener.names=CONTROLLER",
                    "inter.broker.listener.name=PLAINTEXT",
                    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                    f"log.dirs={logs}",
                    "num.partitions=1",
                    "offsets.topic.replication.factor=1",
                    "offsets.topic.num.partitions=4",
                    "transaction.state.log.replication.factor=1",
                    "transaction.state.log.min.isr=1",
                    "group.initial.rebalance.delay.ms=0",
                    "auto.create.topics.enable=false",
                    "log.cleaner.backoff.ms=1000",
                    "",
                ]
            )
        )
        log4j = self.data_dir / "log4j2.properties"
        log4j.write_text(
            "rootLogger.level=WARN\nrootLogger.appenderRef.out.ref=OUT\n"
            "appender.out.type=Console\nappender.out.name=OUT\n"
            "appender.out.layout.type=PatternLayout\nappender.out.layout.pattern=%d %p %c: %m%n\n"
        )
        return config

    def _java(self, main: str, *args: str) -> list[str]:
        lib = lib_dir(self.version)
        return [
            "java",
            "-Xmx512m",
            "-XX:+UseSerialGC",
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            "-cp",
            f"{lib}/*",
            main,
            *args,
        ]

    def start(self, timeout: float = 90.0) -> None:
        fetch(self.version)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self._write_config()
        cluster_id = new_cluster_id()
        subprocess.run(
            self._java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(config)),
            check=True,
            capture_output=True,
        )
        log = (self.data_dir / "broker.log").open("ab")
        self.proc = subprocess.Popen(
            self._java("kafka.Kafka", str(config)),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent(signal.SIGTERM),  # a killed test session takes its broker along
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = (self.data_dir / "broker.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"Kafka broker exited with {self.proc.returncode}:\n{tail}")
            if self._answers():
                return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"Kafka broker not ready within {timeout}s (log: {self.data_dir / 'broker.log'})")

    def _answers(self) -> bool:
        from confluent_kafka.admin import AdminClient

        try:
            meta = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0}).list_topics(timeout=2)
        except Exception:
            return False
        return bool(meta.brokers)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fetch", help="download the broker jars")
    run = sub.add_parser("run", help="run a broker in the foreground")
    run.add_argument("--port", type=int, default=29092)
    run.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args()
    if args.cmd == "fetch":
        print(fetch())
        return
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="memstream-kafka-"))
    broker = KafkaBroker(data_dir, args.port)
    broker.start()
    print(f"Apache Kafka {broker.version} ready on {broker.bootstrap} (data: {data_dir}); Ctrl-C stops it")
    try:
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
