"""xlalab: helpers for the compiled-TensorFlow course."""
