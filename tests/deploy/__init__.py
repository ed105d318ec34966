"""Tests of deploy: setup, the local broker, cluster and object store, Spark on a cluster, scale-out."""
