"""The binding's version: libflux's, from include/flux.h (FLUX_VERSION_*).

tests/test_header.py checks it against the header, and pyproject.toml reads it
from here for the distribution's metadata.
"""

__version__ = "0.2.0"
