"""Test doubles for pulsys; stdlib only, independent of the rest of pulsys (see fake_hub)."""
