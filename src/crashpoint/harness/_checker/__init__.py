"""The checks of Contract 2, their verdicts and hints."""
