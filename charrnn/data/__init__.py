"""Text and data: the vocabulary, reading and caching corpora, the built-in datasets, the
train/validation split and the truncated-BPTT stream batches."""
