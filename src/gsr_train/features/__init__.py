"""What a model is fed, computed from the KG: structural node features (DDE), triple batches
and relation tokens.

This floor sits under both ``datamodules`` and ``models``: a datamodule builds these inputs and
a model consumes them, and neither imports the other (the recipe in ``runs/`` wires them).
"""
