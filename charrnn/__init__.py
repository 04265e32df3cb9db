"""charrnn: character-level recurrent language models from the command line."""

import warnings

# The CPU wheel of torch works without NumPy but warns about it the first time a
# submodule touches tensor conversion; charrnn never converts to NumPy, so the
# warning would only confuse users.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)

__version__ = "0.1.0"
