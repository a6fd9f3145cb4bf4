"""The transaction coordinator: each transactional id's state (``store``: an object per id
alone, an etcd key in a cluster), its transitions (``coordinator``), and the markers and
group offsets one gateway writes to finish a transaction (``markers``). Each partition's
own transaction state lives with its log (``gateway/log``)."""
