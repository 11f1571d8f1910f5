"""Import-only stand-in for torchaudio (test-only); see ``_importstub``."""
from _importstub import install

install(__name__, globals())
