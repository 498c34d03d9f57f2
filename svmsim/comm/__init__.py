"""Communication: logical messages, the meter and its ledger, and the papers' bound formulas."""
from .message import Inbox, MessageBatch, Outbox, merge_batches
from .meter import Ledger, Meter

__all__ = ["Inbox", "MessageBatch", "Outbox", "merge_batches", "Ledger", "Meter"]
