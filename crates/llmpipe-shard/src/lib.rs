//! llmpipe-shard: filled in by its issue.
