"""The models a run trains, built from config (never downloaded): one file per family, each a line of
registry.py (the timm vision families, vit.py to davit.py, share timm_family.py; bert.py; sequence.py, the
Nystromformer), any transformers encoder (hf_text.py), named timm and transformers models for the command
line (named.py), and the one entry point, run_model.py."""
