"""Memory accounting vs the device's allocator, stage by stage (see paper_repro.simulate.memcheck).

    python tools/gpu_memory_check.py --model resnet34 --image-size 224 --num-classes 1000 \
        --stages 4 --micro-batch 8 --device cuda --out results/simulate/gpu_memory_check.md
    python tools/gpu_memory_check.py --device cpu     # saved-for-backward bytes only
"""
import sys

from paper_repro.simulate.memcheck import main

if __name__ == "__main__":
    sys.exit(main())
