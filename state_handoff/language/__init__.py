"""The pipeline language: a pipeline declared once for both phases (spec), its aggregate algebra, its parser (JSON or
Avro, with which writer schemas read each record), its definition's version and what changed between two, the
input record's size limit, and the registry of pipelines by name."""
