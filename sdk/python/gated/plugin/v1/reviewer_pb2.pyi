from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Decision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DECISION_UNSPECIFIED: _ClassVar[Decision]
    DECISION_APPROVE: _ClassVar[Decision]
    DECISION_REJECT: _ClassVar[Decision]
DECISION_UNSPECIFIED: Decision
DECISION_APPROVE: Decision
DECISION_REJECT: Decision

class DescribeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeResponse(_message.Message):
    __slots__ = ("name", "version", "personas", "models", "max_concurrency")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PERSONAS_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    personas: _containers.RepeatedScalarFieldContainer[str]
    models: _containers.RepeatedScalarFieldContainer[str]
    max_concurrency: int
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., personas: _Optional[_Iterable[str]] = ..., models: _Optional[_Iterable[str]] = ..., max_concurrency: _Optional[int] = ...) -> None: ...

class ReviewRequest(_message.Message):
    __slots__ = ("review_id", "proposal_json", "persona", "deadline_unix_ms", "tool_host_broker_id", "policy")
    REVIEW_ID_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_JSON_FIELD_NUMBER: _ClassVar[int]
    PERSONA_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    TOOL_HOST_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    review_id: str
    proposal_json: bytes
    persona: Persona
    deadline_unix_ms: int
    tool_host_broker_id: int
    policy: PolicyContext
    def __init__(self, review_id: _Optional[str] = ..., proposal_json: _Optional[bytes] = ..., persona: _Optional[_Union[Persona, _Mapping]] = ..., deadline_unix_ms: _Optional[int] = ..., tool_host_broker_id: _Optional[int] = ..., policy: _Optional[_Union[PolicyContext, _Mapping]] = ...) -> None: ...

class Persona(_message.Message):
    __slots__ = ("name", "system_prompt", "model", "max_turns", "tools", "required_gates", "permission_mode")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MAX_TURNS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_GATES_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_MODE_FIELD_NUMBER: _ClassVar[int]
    name: str
    system_prompt: str
    model: str
    max_turns: int
    tools: _containers.RepeatedCompositeFieldContainer[Tool]
    required_gates: _containers.RepeatedScalarFieldContainer[str]
    permission_mode: str
    def __init__(self, name: _Optional[str] = ..., system_prompt: _Optional[str] = ..., model: _Optional[str] = ..., max_turns: _Optional[int] = ..., tools: _Optional[_Iterable[_Union[Tool, _Mapping]]] = ..., required_gates: _Optional[_Iterable[str]] = ..., permission_mode: _Optional[str] = ...) -> None: ...

class Tool(_message.Message):
    __slots__ = ("name", "description", "input_schema_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    input_schema_json: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., input_schema_json: _Optional[str] = ...) -> None: ...

class PolicyContext(_message.Message):
    __slots__ = ("revision", "why", "sop", "denied_tools", "history_json", "run_json")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    WHY_FIELD_NUMBER: _ClassVar[int]
    SOP_FIELD_NUMBER: _ClassVar[int]
    DENIED_TOOLS_FIELD_NUMBER: _ClassVar[int]
    HISTORY_JSON_FIELD_NUMBER: _ClassVar[int]
    RUN_JSON_FIELD_NUMBER: _ClassVar[int]
    revision: str
    why: str
    sop: Sop
    denied_tools: _containers.RepeatedScalarFieldContainer[str]
    history_json: bytes
    run_json: bytes
    def __init__(self, revision: _Optional[str] = ..., why: _Optional[str] = ..., sop: _Optional[_Union[Sop, _Mapping]] = ..., denied_tools: _Optional[_Iterable[str]] = ..., history_json: _Optional[bytes] = ..., run_json: _Optional[bytes] = ...) -> None: ...

class Sop(_message.Message):
    __slots__ = ("id", "title", "actions", "rollback", "steps")
    ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    ROLLBACK_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    id: str
    title: str
    actions: _containers.RepeatedScalarFieldContainer[str]
    rollback: str
    steps: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[str] = ..., title: _Optional[str] = ..., actions: _Optional[_Iterable[str]] = ..., rollback: _Optional[str] = ..., steps: _Optional[_Iterable[str]] = ...) -> None: ...

class ReviewResponse(_message.Message):
    __slots__ = ("text", "decision", "gates", "sop_id", "rollback_path", "notes", "model", "turns", "usage", "criteria", "comments", "missing_work", "next_round_guidance", "confidence", "warnings")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    GATES_FIELD_NUMBER: _ClassVar[int]
    SOP_ID_FIELD_NUMBER: _ClassVar[int]
    ROLLBACK_PATH_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    CRITERIA_FIELD_NUMBER: _ClassVar[int]
    COMMENTS_FIELD_NUMBER: _ClassVar[int]
    MISSING_WORK_FIELD_NUMBER: _ClassVar[int]
    NEXT_ROUND_GUIDANCE_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    text: str
    decision: Decision
    gates: _containers.RepeatedCompositeFieldContainer[Gate]
    sop_id: str
    rollback_path: str
    notes: str
    model: str
    turns: int
    usage: Usage
    criteria: _containers.RepeatedCompositeFieldContainer[CriterionResult]
    comments: _containers.RepeatedCompositeFieldContainer[Comment]
    missing_work: _containers.RepeatedScalarFieldContainer[str]
    next_round_guidance: str
    confidence: float
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, text: _Optional[str] = ..., decision: _Optional[_Union[Decision, str]] = ..., gates: _Optional[_Iterable[_Union[Gate, _Mapping]]] = ..., sop_id: _Optional[str] = ..., rollback_path: _Optional[str] = ..., notes: _Optional[str] = ..., model: _Optional[str] = ..., turns: _Optional[int] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., criteria: _Optional[_Iterable[_Union[CriterionResult, _Mapping]]] = ..., comments: _Optional[_Iterable[_Union[Comment, _Mapping]]] = ..., missing_work: _Optional[_Iterable[str]] = ..., next_round_guidance: _Optional[str] = ..., confidence: _Optional[float] = ..., warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class Gate(_message.Message):
    __slots__ = ("name", "passed", "detail")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    name: str
    passed: bool
    detail: str
    def __init__(self, name: _Optional[str] = ..., passed: _Optional[bool] = ..., detail: _Optional[str] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ...) -> None: ...

class CriterionResult(_message.Message):
    __slots__ = ("id", "confidence", "reason", "refs")
    ID_FIELD_NUMBER: _ClassVar[int]
    PASS_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REFS_FIELD_NUMBER: _ClassVar[int]
    id: str
    confidence: float
    reason: str
    refs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[str] = ..., confidence: _Optional[float] = ..., reason: _Optional[str] = ..., refs: _Optional[_Iterable[str]] = ..., **kwargs) -> None: ...

class Comment(_message.Message):
    __slots__ = ("path", "line", "body")
    PATH_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    path: str
    line: int
    body: str
    def __init__(self, path: _Optional[str] = ..., line: _Optional[int] = ..., body: _Optional[str] = ...) -> None: ...

class CallToolRequest(_message.Message):
    __slots__ = ("review_id", "name", "args_json")
    REVIEW_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    review_id: str
    name: str
    args_json: bytes
    def __init__(self, review_id: _Optional[str] = ..., name: _Optional[str] = ..., args_json: _Optional[bytes] = ...) -> None: ...

class CallToolResponse(_message.Message):
    __slots__ = ("result_json",)
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    result_json: bytes
    def __init__(self, result_json: _Optional[bytes] = ...) -> None: ...
