"""``torchrun --nproc_per_node=N -m llmpipe.train --data SHARDS --config tiny --out RUN``."""

import sys

from llmpipe.extras import run_main

sys.exit(run_main("llmpipe.train.pretrain"))
