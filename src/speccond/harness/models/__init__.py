"""The models a run trains, built from config (never downloaded): the timm vision families (families.py),
BERT (bert.py), the Nystromformer (sequence.py), any transformers encoder (hf_text.py), named timm and
transformers models for the command line (named.py), and the one entry point, run_model.py."""
