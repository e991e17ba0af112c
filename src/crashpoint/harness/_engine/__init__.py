"""The engine: trials, campaigns, the fork server, fault accounting."""
