"""Probing local learning: gradient cosine, linear CKA, first-layer filters, random labels.

* :mod:`.gradients` the cosine between each block's local update and its backprop gradient
* :mod:`.cka`       linear CKA (biased and unbiased HSIC) and block-by-block CKA tables
* :mod:`.filters`   first-layer conv filters as one image
* :mod:`.studies`   the runs of each study (methods x seeds) and their comparison with the paper

The settings of each study live in :mod:`paper_repro.settings`, the figures in
:mod:`paper_repro.plots.similarity`.
"""
from .cka import block_features, cka_table, linear_cka
from .filters import filter_mosaic, first_conv
from .gradients import GradientCosineRecorder, block_gradients, cosine, gradient_cosine, preserved_buffers
from .studies import (PAPER_GREEDY_COSINE, PAPER_RANDOM_LABELS, feature_claims, gradient_claims,
                      gradient_similarity_runs, initial_net, load_data, ordering_holds, random_label_claims,
                      random_label_runs, train_nets)

__all__ = ["PAPER_GREEDY_COSINE", "PAPER_RANDOM_LABELS", "GradientCosineRecorder", "block_features",
           "block_gradients", "cka_table", "cosine", "feature_claims", "filter_mosaic", "first_conv",
           "gradient_claims", "gradient_cosine", "gradient_similarity_runs", "initial_net", "linear_cka",
           "load_data", "ordering_holds", "preserved_buffers", "random_label_claims", "random_label_runs",
           "train_nets"]
