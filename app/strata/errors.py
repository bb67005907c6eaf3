"""Errors a user can act on. Each message is one line that names the thing that is wrong."""
from __future__ import annotations


class StrataError(Exception):
    """Base class for every error strata reports to a user."""


class ModelError(StrataError):
    """A model folder, checkpoint, pack or state blob is missing, malformed or does not match."""


class WindowError(StrataError):
    """A violation of the window/commit transaction rules (run while open, double commit, ...)."""


class SessionError(StrataError):
    """A session store or session file is corrupt, foreign, or does not match the model."""


class EditError(StrataError):
    """An edit cannot proceed (binary file, too large, changed on disk since, ...)."""


class UsageError(StrataError):
    """Bad command-line input (an option value out of range, a conflicting combination)."""


class ContextError(UsageError, WindowError):
    """The input does not fit the model's context (a prompt, a file to edit): exit code 2."""


class AlreadyExistsError(UsageError):
    """The output path exists and --force was not given (convert, sessions export): exit code 2."""
