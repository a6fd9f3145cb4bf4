"""Request handlers, one module per API family; importing this package registers them all."""

from . import api_versions, coordinator, fetch, list_offsets, metadata, produce, producer_ids, topics  # noqa: F401
from .base import REGISTRY, Handler, advertised_versions

__all__ = ["REGISTRY", "Handler", "advertised_versions"]
