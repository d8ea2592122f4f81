//! llmpipe-shard: the hot paths of token shards.
//!
//! - [`batch`]: training batches gathered from memory-mapped shards (widen, shift, mask, doc ids).
//! - [`prefetch`]: an ordered, bounded background producer (the loader's prefetch thread).
//! - [`pack`]: documents packed into fixed-length samples (concatenation or best-fit).
//! - [`blocks`]: per-block CRC-32 checksums of shard files (the manifest's full, cheap check).

pub mod batch;
pub mod blocks;
pub mod pack;
pub mod prefetch;

pub use batch::{build_batch, masked_targets, BatchError, BatchOut, Id, Samples, ShardRows, Tokens};
pub use blocks::crc32_blocks;
pub use prefetch::Prefetch;
