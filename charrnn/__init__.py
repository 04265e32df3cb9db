"""charrnn: character-level recurrent language models from the command line."""

import warnings

# The CPU wheel of torch warns when NumPy is missing; charrnn never converts to NumPy, so the warning
# would only confuse users.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)

from charrnn.config import VERSION as __version__  # noqa: E402, F401 (after the warning filter)

# The Python API (see charrnn.api): one function per command, and load() for a model kept in memory.
__all__ = ["load", "train", "sample", "stream", "perplexity", "compare", "evolution", "info", "inspect",
           "surprisal", "export", "plot", "get_dataset"]


def __getattr__(name: str):
    """The API's functions (:mod:`charrnn.api`), imported on first use so the CLI starts without torch."""
    if name in __all__:
        from charrnn import api

        return getattr(api, name)
    raise AttributeError(f"module 'charrnn' has no attribute {name!r}")
