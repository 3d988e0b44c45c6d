"""One module per vector database behind one small protocol."""
