"""Communication: logical messages, the meter and its ledger, and the papers' bound formulas."""
from .ledger import MESSAGE_QUANTITIES, Ledger, merge_ledgers
from .message import Inbox, MessageBatch, Outbox, merge_batches
from .meter import Meter

__all__ = ["Inbox", "MessageBatch", "Outbox", "merge_batches", "Ledger", "Meter", "merge_ledgers",
           "MESSAGE_QUANTITIES"]
