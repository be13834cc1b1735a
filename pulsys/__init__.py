"""pulsys: a pull-through cache for the Hugging Face Hub.

Importing this package has no side effects; `python -m pulsys` runs the server.
"""

__version__ = "0.1.0"
