"""Where control state and data meet storage and Kafka: URIs and object-store options, Delta compare-and-swap
and upkeep through delta-rs, Kafka clients and their security settings, the archive's files and commit record."""
