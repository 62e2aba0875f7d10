"""The state of one batch's write, and the upsert every Kueue kind goes through.

A :class:`SnapshotWriter` holds the batch, the time it was observed, which kinds may be marked
deleted, and the :class:`WriteResult` it fills in. :meth:`SnapshotWriter.sync` is
``core.bulk.upsert`` scoped to the cluster, with the batch sizes of ``quotas.constants``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import models
from django.db.models import Q

from core import bulk
from fleet.models import Cluster
from quotas import constants as c
from quotas.ingest import KueueBatch


@dataclass
class WriteResult:
    created: dict[str, int] = field(default_factory=dict)
    updated: dict[str, int] = field(default_factory=dict)
    deleted: dict[str, int] = field(default_factory=dict)
    transitions_added: int = 0

    @property
    def rows_written(self) -> int:
        return (
            sum(self.created.values())
            + sum(self.updated.values())
            + sum(self.deleted.values())
            + self.transitions_added
        )


class SnapshotWriter:
    def __init__(self, cluster: Cluster, batch: KueueBatch, complete: frozenset[str]) -> None:
        self.cluster = cluster
        self.batch = batch
        self.now = batch.observed_at
        self.complete = frozenset(complete)
        # A kind with an object we could not identify is not trusted for deletions this round.
        self.deletable = self.complete - frozenset(batch.unidentified)
        self.result = WriteResult()
        # ClusterQueue name -> stopPolicy before this write (quota changes observed).
        self.stop_policies_before: dict[str, str] = {}
        self.marked_deleted: dict[str, list[int]] = {}

    def upsert(
        self,
        model: type[models.Model],
        key_fields: tuple[str, ...],
        rows: Mapping[tuple, Mapping[str, Any]],
        **options: Any,
    ) -> bulk.Upserted:
        """``core.bulk.upsert`` of the cluster's rows; soft deletes are stamped with ``now``."""
        return bulk.upsert(
            model,
            Q(cluster=self.cluster),
            key_fields,
            rows,
            parent={"cluster": self.cluster},
            batch_size=c.WRITE_BATCH_SIZE,
            lookup_batch_size=c.LOOKUP_BATCH_SIZE,
            deleted_at=self.now,
            **options,
        )

    def record(self, label: str, written: bulk.Upserted) -> None:
        self.marked_deleted[label] = written.deleted
        self.result.created[label] = written.created
        self.result.updated[label] = written.updated
        self.result.deleted[label] = len(written.deleted)

    def sync(
        self,
        label: str,
        model: type[models.Model],
        key_fields: tuple[str, ...],
        rows: Mapping[tuple, Mapping[str, Any]],
        **options: Any,
    ) -> dict[tuple, int]:
        """Upsert ``rows`` (key -> field values), record it under ``label``; returns key -> id.

        ``options`` are ``core.bulk.upsert``'s: ``seen`` (only from :meth:`seen`, for a
        complete LIST), ``keep_existing``, ``want_ids``, ``selective``, ``stamp``.
        """
        written = self.upsert(model, key_fields, rows, **options)
        self.record(label, written)
        return written.ids

    def seen(self, kind: str, extra: Iterable[tuple] = ()) -> set[tuple] | None:
        """The identities a complete LIST of ``kind`` returned (plus ``extra``), else None."""
        if kind not in self.deletable:
            return None
        return set(self.batch.seen.get(kind, set())) | set(extra)

    def meta_fields(self, meta: Any) -> dict[str, Any]:
        return {
            "uid": meta.uid,
            "resource_version": meta.resource_version,
            "labels": meta.labels,
            "observed_at": meta.created_at,
            "deleted_at": None,
        }
