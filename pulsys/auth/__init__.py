"""Client API keys: their format and hashing (keys.py) and the in-memory table the data
plane checks them against (gate.py). No database here: reactors and worker processes
import this package, and they never touch the store (docs/decisions/0009)."""
