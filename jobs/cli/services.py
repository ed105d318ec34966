"""`switchyard dev kafka|spark|objectstore start|stop|status`: the local services a pipeline runs against. A start or
stop is logged; a status is the command's result, printed."""

from __future__ import annotations

import logging

from switchyard.state_handoff.errors import UserError

logger = logging.getLogger(__name__)


def add_service_commands(commands, common) -> None:
    kafka = commands.add_parser("kafka", help="start, stop or check a local KRaft broker (or a cluster of N nodes)")
    kafka.add_argument("action", choices=["start", "stop", "status"])
    kafka.add_argument("--port", type=int, default=9092,
                       help="broker port P on 127.0.0.1 (controller on P+1); node k of a cluster: P+2k and P+2k+1")
    kafka.add_argument("--brokers", type=int, default=1,
                       help="nodes (broker and controller each); more than 1 starts a cluster (default 1)")
    kafka.add_argument("--node", type=int, help="one node K of the cluster at --port: take it down or bring it back")
    kafka.add_argument("--sasl", action="store_true",
                       help="a SASL/SCRAM listener, credentials from the SWITCHYARD_KAFKA_* settings (fixed at format)")
    common(kafka)
    kafka.set_defaults(handler=run_kafka)

    spark = commands.add_parser("spark", help="start, stop or check a local Spark standalone master and workers")
    spark.add_argument("action", choices=["start", "stop", "status"])
    spark.add_argument("--port", type=int, default=7077, help="master port on 127.0.0.1 (default 7077)")
    spark.add_argument("--workers", type=int, default=2, help="workers to start (default 2)")
    spark.add_argument("--cores", type=int, default=1, help="cores each worker offers (default 1)")
    spark.add_argument("--memory", default="2g", help="memory each worker offers its executors (default 2g)")
    spark.add_argument("--webui-port", type=int, help="master web UI port on 127.0.0.1 (default: a free one)")
    spark.set_defaults(handler=run_spark)

    objectstore = commands.add_parser("objectstore", help="start, stop or check a local S3-compatible object store "
                                                          "(bucket switchyard; credentials from AWS_ACCESS_KEY_ID and "
                                                          "AWS_SECRET_ACCESS_KEY)")
    objectstore.add_argument("action", choices=["start", "stop", "status"])
    objectstore.add_argument("--port", type=int, default=9000, help="port on 127.0.0.1 (default 9000)")
    objectstore.set_defaults(handler=run_objectstore)


def run_objectstore(args) -> int:
    from switchyard.deploy import objectstore

    store = objectstore.ObjectStore.at(args.port)
    if args.action == "start":
        logger.info(objectstore.start(store))
        return 0
    if args.action == "stop":
        logger.info(objectstore.stop(store))
        return 0
    up, line = objectstore.status(store)
    print(line)
    return 0 if up else 1


def run_kafka(args) -> int:
    """One broker at --port, unless --brokers N or --node K asks for the cluster; `stop` and `status` on a
    cluster's port reach the cluster too."""
    from switchyard.deploy import kafka_broker, kafka_cluster

    if args.node is not None or args.brokers > 1:
        return _run_kafka_cluster(args)
    broker = kafka_broker.Broker.at(args.port)
    if args.action == "start":
        logger.info(kafka_broker.start(broker, sasl=args.sasl))
        return 0
    cluster = kafka_cluster.existing(args.port)
    if args.action == "stop":
        stopped = kafka_broker.stop(broker)
        if cluster is None or "stopped" in stopped:
            logger.info(stopped)
        if cluster is not None:
            logger.info("\n".join(kafka_cluster.stop(cluster)))
        return 0
    if cluster is not None and kafka_broker.running_pid(broker) is None:
        return _run_kafka_cluster(args)
    up, line = kafka_broker.status(broker)
    print(line)
    return 0 if up else 1


def _run_kafka_cluster(args) -> int:
    from switchyard.deploy import kafka_broker, kafka_cluster

    if args.action == "start" and args.node is None:
        logger.info(kafka_cluster.start(kafka_cluster.at(args.port, args.brokers), sasl=args.sasl))
        return 0
    if args.sasl and args.action == "start":
        raise UserError("--sasl is fixed when the cluster is formatted: pass it with --brokers N on its first start")
    cluster = kafka_cluster.require(args.port)
    if args.action == "start":
        logger.info(kafka_cluster.start_node(cluster, args.node))
        return 0
    if args.action == "stop":
        logger.info(kafka_cluster.stop_node(cluster, args.node) if args.node is not None
                    else "\n".join(kafka_cluster.stop(cluster)))
        return 0
    if args.node is not None:
        up, line = kafka_broker.status(cluster.node(args.node))
        lines = [line]
    else:
        up, lines = kafka_cluster.status(cluster)
    print("\n".join(lines))
    return 0 if up else 1


def run_spark(args) -> int:
    from switchyard.deploy import spark_cluster

    cluster = spark_cluster.Cluster.at(args.port)
    if args.action == "start":
        logger.info(spark_cluster.start(cluster, workers=args.workers, cores=args.cores, memory=args.memory,
                                        webui_port=args.webui_port))
        return 0
    if args.action == "stop":
        logger.info(spark_cluster.stop(cluster))
        return 0
    up, lines = spark_cluster.status(cluster)
    print(lines)
    return 0 if up else 1
