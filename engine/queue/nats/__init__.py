"""The work queue on NATS JetStream: subjects, gateway side, worker side, deliveries and dead letters."""
