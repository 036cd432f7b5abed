"""The package's one exception base: every error we raise on purpose derives from it,
so the CLI can print it as one clear line instead of a traceback."""


class PhantoraError(Exception):
    """Base of all phantora-prof errors; the message says what was wrong and how to fix it."""


class ConfigError(PhantoraError):
    """A cluster, GPU or option value is invalid."""


class NativeBuildError(PhantoraError):
    """The fake-CUDA native library could not be built or loaded."""


class UnsupportedOpError(PhantoraError):
    """An operator cannot be simulated (no fake implementation and no user cost)."""


class TraceFormatError(PhantoraError):
    """A file is not a valid Kineto/Chrome trace."""


class ProtocolError(PhantoraError):
    """A rank and the coordinator disagree about the message stream."""
