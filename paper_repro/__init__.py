"""paper_repro: a reproduction of "Parallel Training of Deep Networks with Local Updates"
(Laskin, Metz et al., arXiv:2012.03837).

Where things are: :mod:`.settings` (every study's quick | cpu | full settings), :mod:`.data`,
:mod:`.models`, :mod:`.methods`, :mod:`.train`, :mod:`.cost`, :mod:`.sweep` (grids of runs),
:mod:`.analysis` (tables of the compute study), :mod:`.probes` (gradient cosine, CKA,
filters, random labels), :mod:`.distributed` (the multi-process pipeline), :mod:`.plots`
(every figure), :mod:`.notebooks` (the Papermill runner) and :mod:`.cli` (the
``paper-repro`` command). Imports of these modules go one way; ``tests/test_imports.py``
fails on a cycle.
"""
__version__ = "0.1.0"
