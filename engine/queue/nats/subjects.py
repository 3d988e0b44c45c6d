"""Every NATS name the queue uses, in one place: work and dead-letter subjects, the bell, advisories."""

from __future__ import annotations

import hashlib
import re

WORK = "shoal.work"  # shoal.work.<token>: one model's tasks (the work stream)
DEAD = "shoal.dead"  # shoal.dead.<token>: tasks that failed for good (the dead-letter stream)
BELL = "shoal.bell"  # shoal.bell.<token>: a publish wakes idle workers at once
MAX_DELIVERIES = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES"  # JetStream gave up on a message


def subject_token(model: str) -> str:
    """A subject- and consumer-name-safe token for a model id: readable tail plus a short hash."""
    readable = re.sub(r"[^A-Za-z0-9_-]+", "_", model).strip("_")[-40:] or "model"
    return f"{readable}-{hashlib.sha1(model.encode()).hexdigest()[:10]}"


def token_of(subject: str, prefix: str = WORK) -> str:
    """The model token of a `<prefix>.<token>` subject ('unknown' for anything else)."""
    return subject[len(prefix) + 1 :] if subject.startswith(prefix + ".") else "unknown"


def consumer_name(token: str) -> str:
    """The durable pull consumer every worker shares for one model's subject."""
    return f"work-{token}"
