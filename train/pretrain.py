"""Pretrain on llmpipe shards: the documented entry point, a thin wrapper over ``llmpipe.train``.

torchrun --nproc_per_node=N train/pretrain.py --data SHARDS --config configs/train/tiny.yaml --out RUN
torchrun --nproc_per_node=N -m llmpipe.train --data SHARDS --config tiny --out RUN   (the same, any directory)
"""

import sys

from llmpipe.extras import run_main

if __name__ == "__main__":
    sys.exit(run_main("llmpipe.train.pretrain"))
