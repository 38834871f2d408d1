"""Memory accounting vs the device's allocator, stage by stage (see research.simulator_validation.memcheck).

    python -m research.simulator_validation.gpu_memory_check --model resnet34 --image-size 224 --num-classes 1000 \
        --stages 4 --micro-batch 8 --device cuda --out results/simulate/gpu_memory_check.md
    python -m research.simulator_validation.gpu_memory_check --device cpu     # saved-for-backward bytes only
"""
import sys

from .memcheck import main

if __name__ == "__main__":
    sys.exit(main())
