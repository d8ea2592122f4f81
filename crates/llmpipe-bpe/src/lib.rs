//! llmpipe-bpe: filled in by its issue.
