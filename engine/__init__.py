"""shoal inference engine: catalogue, loading, batching, workers, queues, HTTP gateway."""
