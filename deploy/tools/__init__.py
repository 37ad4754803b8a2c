"""Checking tools for `deploy/`: installed from registries into the user cache, then run."""
