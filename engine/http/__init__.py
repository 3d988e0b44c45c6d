"""The HTTP edge: app factory and middleware, route families (native, OpenAI, rerank), replies."""
