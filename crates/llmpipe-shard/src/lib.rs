//! llmpipe-shard: the hot paths of token shards.
//!
//! - [`batch`]: training batches gathered from memory-mapped shards (widen, shift, mask, doc ids).
//! - [`prefetch`]: an ordered, bounded background producer (the loader's prefetch thread).
//! - [`pack`]: documents packed into fixed-length samples (concatenation or best-fit).

pub mod batch;
pub mod pack;
pub mod prefetch;

pub use batch::{build_batch, masked_targets, BatchError, BatchOut, Id, Samples, ShardRows, Tokens};
pub use prefetch::Prefetch;
