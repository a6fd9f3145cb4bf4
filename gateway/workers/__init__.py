"""Several gateway processes on one machine (``--workers``): the parent that runs them and the
coordination store it keeps for them when no etcd is configured."""
