"""Share groups (KIP-932): Kafka's queues. Many members read one partition together; each
record is acquired by one member for a time and acknowledged, released or rejected one by one."""
