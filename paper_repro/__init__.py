"""paper_repro: a reproduction of "Parallel Training of Deep Networks with Local Updates"
(Laskin, Metz et al., arXiv:2012.03837)."""
__version__ = "0.1.0"
