"""Third-party import noise kept from users, filtered precisely where the import happens.

torchao registers its enums as pytree constants when imported; torch 2.10+ logs a deprecation line for
each (``<enum 'KernelPreference'> is an Enum subclass ... register_constant() ... is deprecated``), and an
old string literal of torchao warns about an invalid escape sequence when its source is compiled.
Neither says anything to a user of llmpipe. ``quiet_imports()`` drops exactly these messages while the
block inside it runs (the torchao imports, transformers' ``from_pretrained``, which imports torchao
through its quantizers); everything else still shows.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

#: (logger, text in the message) pairs dropped inside ``quiet_imports``
DROPPED_LOGS = (("torch.utils._pytree", "register_constant() on Enum subclasses is deprecated"),)
#: warnings messages (regex, from the start) dropped inside ``quiet_imports``
DROPPED_WARNINGS = (r"invalid escape sequence",)


class _DropText(logging.Filter):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


@contextmanager
def quiet_imports() -> Iterator[None]:
    added = [(logging.getLogger(name), _DropText(text)) for name, text in DROPPED_LOGS]
    for logger, f in added:
        logger.addFilter(f)
    try:
        with warnings.catch_warnings():
            for message in DROPPED_WARNINGS:
                for category in (DeprecationWarning, SyntaxWarning):
                    warnings.filterwarnings("ignore", message=message, category=category)
            yield
    finally:
        for logger, f in added:
            logger.removeFilter(f)
