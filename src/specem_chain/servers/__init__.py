"""Servers that host a member over HTTP (needs the serve extra)."""
