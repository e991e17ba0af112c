"""The stand-in services: the ledger and its HTTP front, SMTP, the LLM, PostgreSQL."""
