"""Probing local learning: gradient cosine, linear CKA, first-layer filters, random labels.

* :mod:`.gradients`   the cosine between each block's local update and its backprop gradient
* :mod:`.cka`         linear CKA (biased and unbiased HSIC) and block-by-block CKA tables
* :mod:`.filters`     first-layer conv filters as one image, and their low-frequency energy share
* :mod:`.studies`     the runs of each study (methods x seeds) and their comparison with the paper
* :mod:`.store`       a folder of finished units of work (resumable long runs)
* :mod:`.experiments` the long filter + CKA and random-label experiments, unit by unit
* :mod:`.ablation`    the gradient-cosine ablation (one change of the setting at a time)
* :mod:`.run`         ``python -m paper_repro.probes.run features|random_labels|ablation|all``

The settings of each study live in :mod:`paper_repro.settings`, the figures in
:mod:`paper_repro.plots.similarity`.
"""
from .ablation import ablation_net, paper_distance, run_ablation, summarise_ablation
from .cka import block_features, cka_table, linear_cka
from .experiments import (experiment, load_features, load_random_labels, load_table, run_features, run_random_labels,
                          summarise_features, summarise_random_labels)
from .filters import (filter_mosaic, filter_structure, first_conv, low_frequency_fraction,
                      noise_low_frequency_fraction)
from .gradients import GradientCosineRecorder, block_gradients, cosine, gradient_cosine, preserved_buffers
from .store import UnitStore
from .method_runs import (PAPER_GREEDY_COSINE, PAPER_RANDOM_LABELS, feature_claims, gradient_claims,
                      gradient_similarity_runs, initial_net, load_data, ordering_holds, random_label_claims,
                      random_label_runs, train_nets)

__all__ = ["PAPER_GREEDY_COSINE", "PAPER_RANDOM_LABELS", "GradientCosineRecorder", "UnitStore", "ablation_net",
           "block_features", "block_gradients", "cka_table", "cosine", "experiment", "feature_claims", "filter_mosaic",
           "filter_structure", "first_conv", "gradient_claims", "gradient_cosine", "gradient_similarity_runs",
           "initial_net", "linear_cka", "load_data", "load_features", "load_random_labels", "load_table",
           "low_frequency_fraction", "noise_low_frequency_fraction", "ordering_holds", "paper_distance",
           "preserved_buffers", "random_label_claims", "random_label_runs", "run_ablation", "run_features",
           "run_random_labels", "summarise_ablation", "summarise_features", "summarise_random_labels",
           "train_nets"]
