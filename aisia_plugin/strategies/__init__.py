"""Routing strategies, one module per family; all registered through the plugin hook."""
