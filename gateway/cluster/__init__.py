"""Several gateways sharing one store: node ids under leases, the view of the others, ownership and hand-overs (the etcd client is ``gateway/etcd.py``)."""
