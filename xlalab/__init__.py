"""xlalab: helpers for the compiled-TensorFlow course."""

from xlalab import log as _log

_log.install_default()   # xlalab's messages reach stderr as plain lines (xlalab.log)
