"""Several gateways sharing one store: etcd client, metadata in etcd, leases and ownership."""
