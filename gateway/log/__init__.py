"""The log engine: every partition's log in object storage, and its own background work.

The request layer sees this face only: the :class:`LogManager` of a gateway's partitions,
a :class:`PartitionLog` and the :class:`FlushTicket` an append waits on, the internal topics,
and the timestamp lookups of ListOffsets. Inside: the shared log objects and their writer
(``log_writer``, ``log_objects``, ``fencing``), one log per partition (``partition_log``,
with its transaction book ``partition_transactions`` and its ``producers``), reading what is
stored (``stored_log``, ``segments``, ``recovery``, ``cache``, ``damage``) and maintenance
(``compaction``, ``merging``, ``cleaner``, ``retention``).
"""

from .logs import INTERNAL_TOPICS, LogManager
from .partition_log import FlushTicket, PartitionLog
from .timestamps import max_timestamp_offset, offset_for_timestamp

__all__ = ["LogManager", "PartitionLog", "FlushTicket", "INTERNAL_TOPICS", "offset_for_timestamp",
           "max_timestamp_offset"]
