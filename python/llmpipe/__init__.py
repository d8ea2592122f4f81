"""llmpipe: raw web crawl to trained language model."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("llmpipe")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+src"

__all__ = ["__version__"]
