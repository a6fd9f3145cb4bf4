"""``kafscale-admin``: operate any Kafka-protocol cluster (Kafscale gateways, or Kafka)
without Kafka's Java tools. :mod:`.operations` asks the cluster (through
:mod:`kafscale.kafka_client`) and returns rows; :mod:`.cli` parses the command line and
prints them as a table or JSON."""
