"""The extract task's work: GLiNER entities over word windows, zero-shot classes by NLI or embeddings."""
