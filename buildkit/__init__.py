"""Build tooling of the product (not used at run time, not part of the package): see requirements.py."""
