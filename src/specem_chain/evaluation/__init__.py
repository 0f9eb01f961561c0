"""``specem eval``: does the ensemble beat its members and the usual ensembling baselines?

Needs the eval extra: ``pip install 'specem-chain[eval]'``.
"""
