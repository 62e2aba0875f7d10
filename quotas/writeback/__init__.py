"""Quota administration: preview, validate and write ClusterQueue / Cohort quotas back to Kueue,
Volcano or KAI.

* ``models``   the audit trail (``QuotaChange``), registered through ``quotas.models``
* ``edits``    what an edit is (flavor x resource cells, stopPolicy), canonical quantities, and
               the complete ``resourceGroups`` built from the live object
* ``gitops``   who owns the object: Argo CD, Flux, another field manager; the YAML patch and the
               ``kubectl patch`` command offered instead of a write
* ``whatif``   the preview from the latest synced state (borrowers, pending that would fit, cohort
               lendable quota, reclaim estimates); pure over rows
* ``native``   the object an edit is written to: Kueue's own, or the Volcano or KAI Queue a row
               was translated from, with the mapping of the edit to its fields
* ``service``  preview / dry-run / apply / request / decide, each leaving a ``QuotaChange``
* ``observe``  what the sync records about quota changes it sees

This package imports nothing at load time: ``quotas.models`` imports ``models`` from here.
"""
