//! llmpipe-quality: filled in by its issue.
