"""gated: the fleet client, tool gate and reviewer-plugin SDK of gated, the
policy gate for AI agent fleets.

``gated.Client`` (asyncio) and ``gated.SyncClient`` publish proposals and
wait for verdicts with every check the Go client makes, and wait for an
operator's decision on a held one (``await_decision``); ``gated.ToolGate``
runs a tool only on approval, through the approval's signed grant, used
once; ``Client.accept_grant`` is the same check for a service that is
handed a grant (``gated.grant`` verifies grants). Errors are in
``gated.errors``. Reviewer plugins are written with ``gated.plugin``.
"""

from gated.client import DEFAULT_WAIT, Client, StatusWatch
from gated.errors import (
    AwaitingOperator,
    BadProposal,
    ConnectionLost,
    GatedError,
    GrantRefused,
    GrantUseRefused,
    IDReused,
    InvalidConfig,
    InvalidToolSpec,
    KeySetError,
    Malformed,
    NoVerdict,
    NotApproved,
    NotFound,
    NotGated,
    NotThisProposal,
    ProposalInvalid,
    PublishError,
    ReviewBlocked,
    ReviewError,
    ReviewRejected,
    ReviewTimeout,
    ServiceError,
    ServiceUnavailable,
    StatusError,
    StoreError,
    TenantMismatch,
    Unconfirmed,
)
from gated.grant import Claims, Expected, Key, KeySet
from gated.gate import Change, Identity, ToolGate, ToolSpec, new_proposal_id
from gated.proposal import Flags, Operator, Proposal, RequestedBy
from gated.sync import SyncClient
from gated.status import Status, decode_status
from gated.verdict import OperatorDecision, OperatorHold, Verdict
from gated.wire import Address, address_of, encode_proposal

__all__ = [
    "DEFAULT_WAIT",
    "Address",
    "AwaitingOperator",
    "BadProposal",
    "Change",
    "Claims",
    "Client",
    "ConnectionLost",
    "Flags",
    "Expected",
    "GatedError",
    "GrantRefused",
    "GrantUseRefused",
    "IDReused",
    "Identity",
    "InvalidConfig",
    "InvalidToolSpec",
    "Key",
    "KeySet",
    "KeySetError",
    "Malformed",
    "NoVerdict",
    "NotApproved",
    "NotFound",
    "NotGated",
    "NotThisProposal",
    "Operator",
    "OperatorDecision",
    "OperatorHold",
    "Proposal",
    "ProposalInvalid",
    "PublishError",
    "RequestedBy",
    "ReviewBlocked",
    "ReviewError",
    "ReviewRejected",
    "ReviewTimeout",
    "ServiceError",
    "ServiceUnavailable",
    "Status",
    "StatusError",
    "StatusWatch",
    "StoreError",
    "SyncClient",
    "TenantMismatch",
    "ToolGate",
    "ToolSpec",
    "Unconfirmed",
    "Verdict",
    "address_of",
    "decode_status",
    "encode_proposal",
    "new_proposal_id",
]
