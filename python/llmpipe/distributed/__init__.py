"""Running curation on a Ray cluster: the Ray executor and the ``ray submit`` entry script."""
