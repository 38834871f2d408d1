"""Studies of this project's own tools (see research/README.md); not part of the installed package."""
