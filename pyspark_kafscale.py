"""Spark data-source discovery hook: Spark imports top-level ``pyspark_*`` modules."""
