//! llmpipe-dedup: filled in by its issue.
