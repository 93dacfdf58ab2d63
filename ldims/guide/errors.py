"""Errors of guided sessions, in the seed's ``isError`` shape.

::

    LdimsError
    ├── SessionNotFound   404  SESSION_NOT_FOUND   no such session (never created, or long gone)
    ├── SessionExpired    410  SESSION_EXPIRED     it existed, its time-to-live ran out
    ├── SessionComplete   409  SESSION_COMPLETE    it ended; start a new one
    ├── InvalidOption     400  INVALID_OPTION      not an option of this step (details list them)
    └── GuideUnavailable  503  GUIDE_UNAVAILABLE   no usable tree, or the session store is down
"""

from __future__ import annotations

from ldims.errors import LdimsError


class SessionNotFound(LdimsError):
    code = "SESSION_NOT_FOUND"
    http_status = 404
    default_message = "No such session. Start one with initiate_session."


class SessionExpired(LdimsError):
    code = "SESSION_EXPIRED"
    http_status = 410
    default_message = "The session expired. Start a new one with initiate_session."


class SessionComplete(LdimsError):
    code = "SESSION_COMPLETE"
    http_status = 409
    default_message = "The session has ended. Start a new one with initiate_session."


class InvalidOption(LdimsError):
    code = "INVALID_OPTION"
    http_status = 400
    default_message = "That is not an option of this step."


class GuideUnavailable(LdimsError):
    code = "GUIDE_UNAVAILABLE"
    http_status = 503
    default_message = "Guided sessions are unavailable right now. Try again later."
