"""Import-only stand-in for torchvision (test-only); see ``_importstub``."""
from _importstub import install

install(__name__, globals())
