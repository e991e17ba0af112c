"""The one place crashpoint's version is written: packaging metadata reads it from here
(``[tool.setuptools.dynamic]`` in ``pyproject.toml``), and ``crashpoint.__version__`` is it."""

__version__ = "0.1.0"
