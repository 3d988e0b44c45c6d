"""The work queue between gateway and workers: its protocol, the in-process queue and NATS JetStream."""
