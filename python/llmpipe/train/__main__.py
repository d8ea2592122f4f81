"""``torchrun --nproc_per_node=N -m llmpipe.train --data SHARDS --config tiny --out RUN``."""

import sys

from llmpipe.train.pretrain import main

sys.exit(main())
