"""Authentication (TLS, SASL PLAIN and SCRAM) and authorization (Kafka ACLs).

The mechanism and ACL modules are plain logic, no I/O: ``scram`` and ``plain`` turn
client messages into server messages, ``acl`` decides requests. ``store`` keeps
credentials and ACLs in the metadata store, ``tls`` holds certificates, ``session``
is one connection's state.
"""
