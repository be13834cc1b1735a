"""The admin plane: its own listener and thread; a slow path that may allocate freely."""
