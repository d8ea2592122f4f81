"""llmpipe's one exception hierarchy: the CLI prints their message (no traceback) and exits non-zero.

The Rust extension raises these same classes (``llmpipe._core`` maps each core error to one of them),
so Python code never translates errors.
"""


class LlmpipeError(Exception):
    """An error caused by input, configuration or environment that the user can fix."""


class ConfigError(LlmpipeError):
    """A configuration file or option is invalid (unknown key, wrong type, bad value)."""


class InputError(LlmpipeError):
    """An input path is missing, empty or unreadable (in --strict mode: any bad record)."""


class ShardError(LlmpipeError):
    """A shard directory is malformed, corrupted or does not match the run."""


class TokenizerError(InputError):
    """A tokenizer file or argument is invalid."""
