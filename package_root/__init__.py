"""Kafscale: a Kafka-compatible gateway on object storage.

The subpackages live in top-level folders of the repository and are mapped
under this package at install time (see ``pyproject.toml``).
"""

__version__ = "0.1.0"
