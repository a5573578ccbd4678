"""Inference on a grid's results: claims stated as data, and the statistical rule that gives them verdicts.

Works on tidy metrics tables (pandas, numpy, scipy.stats); imports only the engine's metric registry.
"""
