"""The schedule simulator against real runs (see research/README.md): run from the repository root as
``python -m research.simulator_validation.MODULE``."""
