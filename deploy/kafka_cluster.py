"""A local Kafka cluster of N KRaft nodes on 127.0.0.1, each a broker and a controller (a controller quorum of N):
node k's broker listens on P + 2k and its controller on P + 2k + 1. Files under `.switchyard/kafka/cluster-P/`."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from switchyard.deploy import kafka_broker, local_server
from switchyard.deploy.java import check_java
from switchyard.deploy.local_server import HOST
from switchyard.deploy.paths import kafka_cluster_home
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io import kafka_security

NODE_HEAP = "256m"
NODE_MIN_HEAP = "64m"
# N JVMs on a small machine: the quick compiler only and one GC thread start a node in less CPU time.
NODE_JVM_FLAGS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
SETTINGS = "cluster.properties"


@dataclass(frozen=True)
class Cluster:
    """The files of the cluster whose node 0 listens on `port`: its settings, and one folder per node."""

    port: int
    brokers: int
    home: Path
    cluster_id: str

    @property
    def voters(self) -> str:
        return ",".join(f"{k}@{HOST}:{self.port + 2 * k + 1}" for k in range(self.brokers))

    def node(self, k: int) -> kafka_broker.Broker:
        if not 0 <= k < self.brokers:
            raise UserError(f"the cluster at port {self.port} has nodes 0..{self.brokers - 1}: pick one of them for --node")
        return kafka_broker.Broker(self.port + 2 * k, self.home / f"node-{k}", node_id=k, voters=self.voters,
                                   cluster_size=self.brokers)

    @property
    def nodes(self) -> list[kafka_broker.Broker]:
        return [self.node(k) for k in range(self.brokers)]

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)


def existing(port: int, home: Path | None = None) -> Cluster | None:
    """The cluster formatted at `port`, if any."""
    home = Path(home) if home else kafka_cluster_home(port)
    try:
        lines = (home / SETTINGS).read_text().splitlines()
    except FileNotFoundError:
        return None
    settings = dict(line.split("=", 1) for line in lines if "=" in line)
    return Cluster(port, int(settings["brokers"]), home, settings["cluster.id"])


def at(port: int, brokers: int, home: Path | None = None) -> Cluster:
    """The cluster at `port`, recorded (brokers and cluster id) on first use."""
    found = existing(port, home)
    if found is not None:
        if found.brokers != brokers:
            raise UserError(f"the cluster at port {port} has {found.brokers} nodes, not {brokers}: pass "
                            f"--brokers {found.brokers}, or stop it and remove {found.home} to start another")
        return found
    if brokers < 2:
        raise UserError("a cluster needs --brokers 2 or more (the single broker is `kafka start` without --brokers)")
    home = Path(home) if home else kafka_cluster_home(port)
    home.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(port, brokers, home, kafka_broker.new_cluster_id())
    (home / SETTINGS).write_text(f"brokers={brokers}\ncluster.id={cluster.cluster_id}\n")
    return cluster


def require(port: int, home: Path | None = None) -> Cluster:
    found = existing(port, home)
    if found is None:
        raise UserError(f"no Kafka cluster at port {port}: start one with "
                        f"`switchyard dev kafka start --brokers 3 --port {port}`")
    return found


def _launch(cluster: Cluster, nodes: list[kafka_broker.Broker], java: str, sasl: bool) -> dict:
    return {node: kafka_broker.launch(node, java, sasl, cluster.cluster_id, NODE_HEAP, NODE_MIN_HEAP, NODE_JVM_FLAGS)
            for node in nodes}


def _wait_registered(cluster: Cluster, node_ids: set[int]) -> None:
    """Until every node in `node_ids` is an unfenced broker in the metadata of every running node: brokers learn
    of each other from the controller a moment apart, and a client may ask any of them."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError
    from kafka.protocol.metadata import MetadataRequest

    seen: set[int] = set()

    def registered() -> bool:
        nonlocal seen
        try:
            admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=5000,
                                     **kafka_security.client_kwargs())
            try:
                seen = {broker["node_id"] for broker in admin.describe_cluster()["brokers"]}
                if node_ids <= seen:
                    views = [{b["node_id"] for b in admin.send_request(MetadataRequest[1](topics=[]), node_id=node)
                              .to_object()["brokers"]} for node in sorted(seen)]
                    seen = set.intersection(*views)
            finally:
                admin.close()
        except (KafkaError, OSError):
            pass
        return node_ids <= seen

    if local_server.wait_until_ready(registered, kafka_broker.START_TIMEOUT_S):
        return
    raise UserError(f"nodes {sorted(node_ids - seen)} of the cluster at port {cluster.port} did not join within "
                    f"{kafka_broker.START_TIMEOUT_S}s: see their logs under {cluster.home}")


def start(cluster: Cluster, sasl: bool = False) -> str:
    """Start every node that is not running (idempotent) and wait until all of them serve as brokers."""
    down = [node for node in cluster.nodes if kafka_broker.running_pid(node) is None]
    for node in down:
        kafka_broker.check_ports_free(node)
    procs = _launch(cluster, down, check_java(), sasl) if down else {}
    for node in cluster.nodes:  # a quorum forms only once a majority runs: launch all, then wait
        kafka_broker.wait_until_up(node, procs.get(node))
    _wait_registered(cluster, {node.node_id for node in cluster.nodes})
    secured = f", SASL {cluster.nodes[0].sasl_file.read_text()}" if cluster.nodes[0].sasl_file.exists() else ""
    verb = f"started {len(down)} of {cluster.brokers} nodes" if down else "already running"
    return (f"kafka cluster {verb}: {cluster.brokers} KRaft nodes (broker on P+2k, controller on P+2k+1{secured}); "
            f"bootstrap {cluster.bootstrap}; logs under {cluster.home}")


def start_node(cluster: Cluster, k: int) -> str:
    node = cluster.node(k)
    if kafka_broker.running_pid(node) is not None:
        kafka_broker.wait_until_up(node, None)
        return f"{node.name} already running (pid {kafka_broker.running_pid(node)})"
    kafka_broker.check_ports_free(node)
    proc = _launch(cluster, [node], check_java(), False)[node]
    kafka_broker.wait_until_up(node, proc)
    _wait_registered(cluster, {node.node_id})
    return f"{node.name} started (pid {proc.pid}); logs in {node.log_file}"


def stop(cluster: Cluster) -> list[str]:
    """Stop every node at once (one by one, the last ones wait on a quorum that is gone)."""
    pids = {node: node.process.send_stop() for node in cluster.nodes}
    deadline = time.monotonic() + kafka_broker.STOP_TIMEOUT_S
    for node, pid in pids.items():
        if pid is not None:
            node.process.wait_stopped(pid, deadline)
    stopped = [f"node {node.node_id} (pid {pid})" for node, pid in pids.items() if pid is not None]
    if not stopped:
        return [f"kafka cluster at port {cluster.port} is not running"]
    return [f"kafka cluster at port {cluster.port} stopped: {', '.join(stopped)}"]


def stop_node(cluster: Cluster, k: int) -> str:
    return kafka_broker.stop(cluster.node(k))


def status(cluster: Cluster) -> tuple[bool, list[str]]:
    """Up when every node runs and answers."""
    lines, up = [], True
    for node in cluster.nodes:
        node_up, line = kafka_broker.status(node)
        up &= node_up
        lines.append(line)
    lines.append(f"bootstrap {cluster.bootstrap}")
    return up, lines
