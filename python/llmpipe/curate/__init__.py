"""The curate pipeline: stages, the executor, and the funnel."""
