"""The core of the correction: SpectralConfig, the q/k/v layout of a projection, the correction C and its
math, and how C is attached to a weight (plain, PEFT-wrapped or FSDP2-sharded). The public verbs
(api.py, verify.py, checkpoint.py) stand on it; nothing here imports them."""
