"""Experiments: training runs and (soon) comparisons. Nothing in the library imports this package."""
