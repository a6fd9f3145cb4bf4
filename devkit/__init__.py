"""What the tests, the benchmarks and the scripts share, none of it shipped: real servers to
start (etcd, an S3 server, SeaweedFS), a certificate authority, a raw Kafka wire client, free
ports and the fuzzing campaign. Tests import it; it imports no test module."""
