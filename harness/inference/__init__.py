"""Inference on a grid's results: claims stated as data, and the statistical rule that gives them verdicts.

claims (the data), paired_tests (permutation and exact tests), intervals (BCa, P(better)), multiplicity (claim
families: Holm, Benjamini–Hochberg), rule (one claim's verdict), seeds_needed (how many seeds would decide an open
claim), verdicts (the table), overoptimization (Gao's forms fitted per condition, intervals over seeds, held-out
comparisons).

Works on tidy metrics tables (pandas, numpy, scipy.stats); imports only the engine's metric registry.
"""
