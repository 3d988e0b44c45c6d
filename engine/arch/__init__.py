"""Architecture families written out as packed (variable-length) forward passes, plus shared blocks."""
