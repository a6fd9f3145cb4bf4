"""Feature levels (KIP-584) as ApiVersions v3+ tells them: what this gateway can serve
(supported ranges) and what the cluster serves now (finalized levels, under an epoch
that grows when they change). Kafka 4 clients read them to pick a protocol:
``transaction.version`` 2 turns on transactions v2 (KIP-890 part 2) in the Java client,
``group.version`` 1 says the consumer group protocol (KIP-848) is served, ``share.version`` 1
that share groups (KIP-932) are."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Features", "SUPPORTED_FEATURES", "GROUP_VERSION", "TRANSACTION_VERSION", "SHARE_VERSION"]

GROUP_VERSION = "group.version"
TRANSACTION_VERSION = "transaction.version"
SHARE_VERSION = "share.version"

# name -> (lowest, highest) level this gateway serves. metadata.version and kraft.version
# describe a KRaft quorum, which a gateway has none of.
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {GROUP_VERSION: (0, 1), TRANSACTION_VERSION: (0, 2),
                                                  SHARE_VERSION: (0, 1)}


@dataclass(frozen=True, slots=True)
class Features:
    levels: dict[str, int]  # the finalized level of each feature
    epoch: int  # grows with every change of the levels (clients keep the newest epoch's)

    def __post_init__(self) -> None:
        for name, level in self.levels.items():
            low, high = SUPPORTED_FEATURES[name]
            if not low <= level <= high:
                raise ValueError(f"{name} level {level} is not in [{low}, {high}]")

    def api_versions_fields(self) -> dict:
        """ApiVersions v3+'s tagged fields (kio's names)."""
        return dict(
            supported_features=[dict(name=name, min_version=low, max_version=high)
                                for name, (low, high) in sorted(SUPPORTED_FEATURES.items())],
            finalized_features_epoch=self.epoch,
            finalized_features=[dict(name=name, max_version_level=level, min_version_level=level)
                                for name, level in sorted(self.levels.items())])
