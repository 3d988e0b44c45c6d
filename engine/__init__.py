"""shoal's inference engine, one room per subpackage (docs/architecture.md): http, tasks, queue, worker, model,
catalogue, residency, arch, client; runtime.py composes them."""
