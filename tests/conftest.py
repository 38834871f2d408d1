import os

import torch

# Tests use tiny models on a 2-core machine: one intra-op thread is faster and steadier.
torch.set_num_threads(1)
os.environ.setdefault("MPLBACKEND", "Agg")
