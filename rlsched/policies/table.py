"""Per-request static figures as numpy arrays: a long queue's decision reads each request once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rlsched.sim.request import CLASS_INDEX, MODALITY_INDEX, RequestRecord


@dataclass(frozen=True, slots=True)
class Rows:
    """Static figures of a list of records, as parallel arrays (see ``RecordTable``)."""

    request_id: np.ndarray
    cls: np.ndarray
    """Index in ``PRIORITY_CLASSES``."""
    modality: np.ndarray
    """Index in ``MODALITIES``."""
    key_id: np.ndarray
    """Table-wide id of the compatibility key (equal ids = may batch together)."""
    arrival_s: np.ndarray
    deadline_s: np.ndarray
    work_s: np.ndarray
    num_steps: np.ndarray
    mem_gb: np.ndarray
    tokens: np.ndarray

    def remaining_s(self, records: Sequence[RequestRecord], step_mode: bool) -> list[float]:
        """``RequestRecord.remaining_s`` of every record, bit for bit, as Python floats (a decision's
        few candidates: the observation and the projection's items compute on them in Python)."""
        work, steps = self.work_s.tolist(), self.num_steps.tolist()
        if not step_mode:  # nothing waiting has run yet
            return [w * n / n for w, n in zip(work, steps, strict=True)]
        return [w * (n - r.steps_done) / n for w, n, r in zip(work, steps, records, strict=True)]


class RecordTable:
    """Per-request static figures, read once per request and gathered as numpy arrays.

    A decision over a long queue must not walk every record in Python: the table keeps
    one row per record it has seen, keyed by the record's identity (it holds a
    reference, so the identity cannot be reused while the row lives). The request,
    deadline and key do not change once a record is queued; its cost figures do — a
    calibration version re-costs ``work_s`` and ``mem_gb`` in place (``rlsched.sim.online``)
    — so every ``gather`` reads those two of the queried records again (a decision's few
    candidates) and rewrites the rows they moved: a policy never packs on a memory belief
    an OOM has already raised. When more than ``capacity`` records are cached the table
    forgets all rows but the queried ones.
    """

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self._clear(capacity)

    def _clear(self, capacity: int) -> None:
        self._row: dict[int, int] = {}
        self._recs: list[RequestRecord] = []
        self._keys: dict[tuple, int] = {}
        self._ints = np.zeros((capacity, 4), dtype=np.int64)
        self._floats = np.zeros((capacity, 6))
        self._last: tuple[list[RequestRecord], Rows | None, np.ndarray] = ([], None, np.zeros(0, np.intp))

    def gather(self, records: Sequence[RequestRecord]) -> Rows:
        """Rows of ``records``, in order. Asking twice for the same list (the encoder, then
        the policy, on one decision) costs one list comparison and a read of the figures that
        may move (``work_s``, ``mem_gb``)."""
        last, rows, idx = self._last
        fresh = rows is None or records != last  # identity short-cuts the comparison
        if fresh:
            index = list(map(self._row.get, map(id, records)))
            idx = np.fromiter(self._add_missing(records) if None in index else index, np.intp, len(index))
            rows = self._rows(idx)
        assert rows is not None
        moved = self._moved(records, rows).tolist()
        for k in moved:
            self._floats[idx[k], 2], self._floats[idx[k], 4] = records[k].work_s, records[k].mem_gb
        if moved:
            rows = self._rows(idx)
        if fresh or moved:
            self._last = (list(records), rows, idx)
        return rows

    def _rows(self, idx: np.ndarray) -> Rows:
        i, f = self._ints.take(idx, axis=0).T, self._floats.take(idx, axis=0).T
        return Rows(i[0], i[1], i[2], i[3], f[0], f[1], f[2], f[3], f[4], f[5])

    @staticmethod
    def _moved(records: Sequence[RequestRecord], rows: Rows) -> np.ndarray:
        """Positions of the records whose ``work_s`` or ``mem_gb`` differ from their row (re-costed since)."""
        n = len(records)
        work = np.fromiter((r.work_s for r in records), np.float64, n)
        mem = np.fromiter((r.mem_gb for r in records), np.float64, n)
        return np.flatnonzero((work != rows.work_s) | (mem != rows.mem_gb))

    def _add_missing(self, records: Sequence[RequestRecord]) -> list[int]:
        new = [r for r in records if id(r) not in self._row]
        if len(self._recs) + len(new) > self.capacity:
            self.capacity = max(self.capacity, 2 * len(records))
            self._clear(self.capacity)
            new = list(records)
        for rec in new:
            self._add(rec)
        return [self._row[id(r)] for r in records]

    def _add(self, rec: RequestRecord) -> None:
        row, q = len(self._recs), rec.request
        self._row[id(rec)] = row
        self._recs.append(rec)
        key = self._keys.setdefault(rec.key, len(self._keys))
        self._ints[row] = (q.id, CLASS_INDEX[q.tier], MODALITY_INDEX[q.modality], key)
        self._floats[row] = (q.arrival_s, rec.deadline_s, rec.work_s, q.num_inference_steps, rec.mem_gb, rec.tokens)


__all__ = ["RecordTable", "Rows"]
