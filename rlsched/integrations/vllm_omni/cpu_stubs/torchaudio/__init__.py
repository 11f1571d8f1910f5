"""Import-only stand-in for torchaudio (``rlsched serve-cpu`` and the e2e tier); see ``_importstub``."""
from rlsched.integrations.vllm_omni.cpu_stubs._importstub import install

install(__name__, globals())
