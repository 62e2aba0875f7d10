"""Remediation: giving back the GPUs of workloads that stay critical, per ClusterQueue policy.

Reads the episodes the ``alerts`` app writes and the deliveries of the ``notifications`` app (when
the owners were warned); ``RemediationPolicy`` (off by default) says what to do, ``apply`` does it
(notify, deactivate with ``spec.active: false``, dry run, staff re-activation) and records every
``RemediationAction``; the beat task ``remediation.tasks.remediate_workloads`` runs it every
minute.
"""
