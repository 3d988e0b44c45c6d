"""Task handlers, one per task kind (encode, score, extract); the worker dispatches through their table."""
