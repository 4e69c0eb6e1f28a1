"""The package version (pyproject.toml's), one owner: speccond.__version__ and the checkpoints read it."""
__version__ = "0.1.0"
