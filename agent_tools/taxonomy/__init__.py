"""Hierarchical taxonomies: parse (tree), embed (index), score and decide (scorer), classify, fit, tune.

One scorer (agent_tools/taxonomy/scorer.py) gives every leaf its score for a text, zero-shot or fitted,
and one decision turns those scores into the answer; `classify`, `fit` and `tune` all go through it.
"""

from __future__ import annotations

from agent_tools.taxonomy.options import ClassifyOptions as ClassifyOptions
