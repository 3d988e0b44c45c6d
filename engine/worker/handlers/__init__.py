"""Task handlers, one per task kind (encode, score); the worker dispatches through their table."""
