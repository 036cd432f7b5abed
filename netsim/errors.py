"""The one exception type netsim raises on purpose.

It derives from ValueError so callers that already catch bad-value errors keep working,
and so the phantora-prof CLI can print it as a single clear line instead of a traceback.
"""


class NetsimError(ValueError):
    """An invalid topology, cluster file, collective request or simulator input.

    The message names the offending field or argument and says what is allowed.
    """
