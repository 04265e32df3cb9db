"""Generating text from a trained model: sampling (temperature, top-k, top-p, greedy) and beam search."""
