"""Export a run as a HuggingFace model: a thin wrapper over ``llmpipe.train.export_hf``.

python train/export_hf.py RUN_DIR --out HF_DIR [--step N] [--max-shard-size 5GB]
llmpipe export RUN_DIR --out HF_DIR            (the same, as a command)
"""

import sys

from llmpipe.extras import run_main

if __name__ == "__main__":
    sys.exit(run_main("llmpipe.train.export_hf"))
