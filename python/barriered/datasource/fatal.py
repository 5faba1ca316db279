"""The coordinator's fatal message in the trigger log, raised in the source as its error.

The coordinator cannot fail a query itself (it runs in a listener): it writes a fatal
message to the trigger log, and the source's next planning call fails the query with
the error the message's prefix names.
"""

from __future__ import annotations

from barriered import crash_points
from barriered.control import offsets
from barriered.control.triggers import TriggerLog
from barriered.errors import (
    CheckpointFailureLimitExceeded,
    ConfigError,
    InjectedFault,
    MirrorError,
    RestoreError,
    UnsupportedOperatorError,
)
from barriered.statestore import stateful_operators

__all__ = ["raise_fatal"]

#: The error a query fails with for a fatal message in the trigger log, by its prefix
#: (anything else: the checkpoint failure limit was exceeded).
_FATAL: tuple[tuple[str, type[Exception]], ...] = (
    (crash_points.MESSAGE_PREFIX, InjectedFault),
    (stateful_operators.MESSAGE_PREFIX, UnsupportedOperatorError),
    (stateful_operators.RESTORE_PREFIX, RestoreError),
    (stateful_operators.UNDECLARED_PREFIX, ConfigError),
    (offsets.TWO_SOURCES_PREFIX, MirrorError),
)
_FATAL_DEFAULT: type[Exception] = CheckpointFailureLimitExceeded


def raise_fatal(triggers: TriggerLog) -> None:
    """Fail the query with the error of the trigger log's fatal message, if it has one.

    Raises
    ------
    BarrieredError
        The error the message's prefix names (``CheckpointFailureLimitExceeded`` for
        any other message).
    """
    if triggers.fatal:
        fatal = triggers.fatal
        raise next((e for p, e in _FATAL if fatal.startswith(p)), _FATAL_DEFAULT)(fatal)
