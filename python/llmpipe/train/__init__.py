"""The trainer: FSDP2 pretraining on llmpipe shards (see docs/training.md)."""
