"""Pretrain on llmpipe shards: the documented entry point, a thin wrapper over ``llmpipe.train``.

torchrun --nproc_per_node=N train/pretrain.py --data SHARDS --config configs/train/tiny.yaml --out RUN
torchrun --nproc_per_node=N -m llmpipe.train --data SHARDS --config tiny --out RUN   (the same, any directory)
"""

import sys

from llmpipe.train.pretrain import main

if __name__ == "__main__":
    sys.exit(main())
