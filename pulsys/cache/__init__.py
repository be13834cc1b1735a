"""Cache state: the in-memory index, the on-disk store, and in-flight fills."""
