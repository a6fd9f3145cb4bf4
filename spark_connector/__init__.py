"""The PySpark data source ``kafscale`` (``spark.read.format("kafscale")``).

Importing this package is light; the pyspark classes load from
:mod:`.datasource` when Spark (or ``register``) asks for them.
"""

__all__ = ["register"]


def register(spark) -> None:
    from .datasource import register as _register

    _register(spark)
