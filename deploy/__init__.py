"""What starts or fetches real components: setup, jars, the local Kafka broker and cluster, object store and Spark
cluster, the one SparkSession builder, the Dagster instance, the demo. Imports nothing above it but state_handoff/."""
