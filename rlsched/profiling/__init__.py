"""Profiles from measurements: ``fit`` (measurement CSV -> profile YAML) and ``measure``
(time a diffusers transformer on this device -> measurement CSV). Not part of the
simulator core: ``fit`` needs scipy, ``measure`` needs torch and diffusers."""
