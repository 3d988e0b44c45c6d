"""The task contract: wire request schemas, the typed task envelope, and resolving a request into a task."""
