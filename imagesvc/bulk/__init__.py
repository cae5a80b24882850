"""Bulk delivery: whole books as one streamed archive (ZIP or TAR) that unpacks into a BagIt bag.

``bag`` writes the BagIt tag files, ``containers`` frames members as ZIP (with ``stream-zip``) or TAR (``tarfile``
headers) while telling the caller when each member's bytes have been handed over. Nothing here knows HTTP, the
catalog or budgets: ``imagesvc.tools.archive`` decides what goes in, ``imagesvc.web.archive`` sends it.
"""
