"""What a handoff's stream leaves for others to read, without a JVM: where its files live (layout), its committed
batches in Delta (progress), what its Spark checkpoints say (checkpoints), its update latency sampled from Kafka, the
updates topic's record shape, and the start offsets Kafka no longer retains (lost_offsets)."""
