"""Token shards: the writer used by curation and the loader used by training."""

from llmpipe.data.dataset import ShardDataset
from llmpipe.data.loader import Batch, TokenLoader
from llmpipe.data.writer import ShardWriter

__all__ = ["Batch", "ShardDataset", "ShardWriter", "TokenLoader"]
